//! How far apart two runs' loss curves are over their last steps.
use crate::record::StepRecord;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossGap {
    /// Steps compared: the last `window` steps both runs have.
    pub steps: usize,
    pub max_abs: f64,
    pub mean_abs: f64,
}

/// |loss_a - loss_b| over the last `window` steps present in both runs (matched by step).
/// `None` when the runs share no step.
pub fn loss_gap(a: &[StepRecord], b: &[StepRecord], window: usize) -> Option<LossGap> {
    let last = a.iter().map(|r| r.step).max()?.min(b.iter().map(|r| r.step).max()?);
    let first = last.saturating_sub(window) + 1;
    let gaps: Vec<f64> = a
        .iter()
        .filter(|r| r.step >= first && r.step <= last)
        .filter_map(|r| b.iter().find(|s| s.step == r.step).map(|s| (r.loss - s.loss).abs()))
        // A NaN loss (a diverged run) is an infinite gap, never silently skipped by `max`.
        .map(|gap| if gap.is_nan() { f64::INFINITY } else { gap })
        .collect();
    if gaps.is_empty() {
        return None;
    }
    Some(LossGap {
        steps: gaps.len(),
        max_abs: gaps.iter().copied().fold(0.0, f64::max),
        mean_abs: gaps.iter().sum::<f64>() / gaps.len() as f64,
    })
}

/// Mean step time in ms over the same window, for the summary line.
pub fn mean_ms_per_step(records: &[StepRecord], window: usize) -> f64 {
    let tail = &records[records.len().saturating_sub(window)..];
    tail.iter().map(|r| r.ms_per_step).sum::<f64>() / tail.len().max(1) as f64
}
