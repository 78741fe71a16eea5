//! FA-2's online softmax for one query row: a running max and a running sum, rescaled by
//! `alpha = exp(old_max - new_max)` whenever a new key block raises the max. The output
//! accumulators are rescaled by the same `alpha` and normalized once at the end.
use cubecl::prelude::*;

use super::precise_math::{exp_f32, exp2_fast, ln_f32};
use super::score::{MASKED_LOGIT, is_masked_logit};

/// Log-sum-exp written for a fully masked row. It stands for `+inf` (WGSL cannot emit an
/// infinite literal): `exp(s - lse)` is 0 for every finite `s`, as the backward pass needs.
pub const FULLY_MASKED_LSE: f32 = f32::MAX;

/// How far (log2 of the factor) a row's entries may pass its running max before a lazily
/// rescaled row moves it ([`OnlineSoftmax::outgrown_scaled`]): P, the sums and the output
/// accumulators then hold values up to 2^8 = 256, exact in f32 and within f16/bf16's range.
pub const LAZY_RESCALE_LOG2: f32 = 8.0;

/// Running softmax statistics of one query row, in f32. `precise` (comptime) picks the ~1 ulp
/// exp / ln of [`super::precise_math`] over the device's built-ins.
#[derive(CubeType, Clone, Copy)]
pub struct OnlineSoftmax {
    /// Largest logit seen so far; [`MASKED_LOGIT`] while every entry seen was masked.
    pub row_max: f32,
    /// `sum exp(s - row_max)` over the entries seen so far.
    pub row_sum: f32,
}

/// See [`OnlineSoftmax::quiet_terms`].
#[derive(CubeType, Clone, Copy)]
struct QuietTerms {
    reference: f32,
    factor: f32,
    sum: f32,
}

#[cube]
impl OnlineSoftmax {
    /// Nothing seen yet: the max is the masked sentinel, the sum 0.
    #[allow(clippy::new_without_default)]
    pub fn new() -> OnlineSoftmax {
        OnlineSoftmax {
            row_max: f32::new(MASKED_LOGIT),
            row_sum: f32::new(0.0),
        }
    }

    /// Raises the running max to include `block_max` and returns `alpha`, the factor by which
    /// the accumulators of this row must be multiplied. The running sum is rescaled here.
    pub fn rescale(&mut self, block_max: f32, #[comptime] precise: bool) -> f32 {
        let new_max = max(self.row_max, block_max);
        // Both maxima may be MASKED_LOGIT (nothing visible yet): alpha = exp(0) = 1 and the
        // sum and accumulators are still 0. From MASKED_LOGIT to a real max: exp(-huge) = 0.
        let alpha = exp_f32(self.row_max - new_max, precise);
        self.row_max = new_max;
        self.row_sum *= alpha;
        alpha
    }

    /// [`Self::rescale`], lazily (FA-4's): the running max moves only when `block_max` passes
    /// it by more than 2^[`LAZY_RESCALE_LOG2`] in the exponentials (always from the masked
    /// sentinel to a visible entry); otherwise `alpha` is exactly 1 and the block's P is taken
    /// against the stale max, each entry at most 2^8.
    pub fn rescale_lazy(&mut self, block_max: f32, #[comptime] precise: bool) -> f32 {
        let threshold = comptime!(LAZY_RESCALE_LOG2 * core::f32::consts::LN_2);
        // From MASKED_LOGIT the difference rounds to f32::MAX (or +inf): outgrown.
        let outgrown = block_max - self.row_max > f32::new(threshold);
        let new_max = select(outgrown, block_max, self.row_max);
        let alpha = select(outgrown, exp_f32(self.row_max - new_max, precise), 1.0f32);
        self.row_max = new_max;
        self.row_sum *= alpha;
        alpha
    }

    /// `P = exp(s - row_max)`, exactly 0 for a masked logit. With `masked_pass = false` no
    /// entry is masked and the check is not emitted.
    pub fn probability(
        &self,
        logit: f32,
        #[comptime] masked_pass: bool,
        #[comptime] precise: bool,
    ) -> f32 {
        let p = exp_f32(logit - self.row_max, precise);
        if comptime!(masked_pass) {
            // When the whole row so far is masked, row_max = MASKED_LOGIT and exp(0) = 1:
            // the select keeps masked entries at exactly 0.
            select(is_masked_logit(logit), 0.0f32, p)
        } else {
            p
        }
    }

    /// [`Self::rescale`] for a row kept in raw dots whose logits are `scale` times them
    /// (`scale > 0`, see [`super::score::folds_scale`]): `row_max` is then a raw dot too.
    /// `log2_scale` is `scale * log2 e`: the exponentials are powers of two
    /// ([`exp2_fast`]), the multiply by log2 e folded into the scale.
    pub fn rescale_scaled(&mut self, block_max: f32, log2_scale: f32) -> f32 {
        let new_max = max(self.row_max, block_max);
        // MASKED_LOGIT times a scale > 1 is -inf: 2^-inf gives 0 as it should.
        let alpha = exp2_fast((self.row_max - new_max) * log2_scale);
        self.row_max = new_max;
        self.row_sum *= alpha;
        alpha
    }

    /// Whether `block_max` (a raw dot, see [`Self::rescale_scaled`]) passes the running max
    /// by more than 2^[`LAZY_RESCALE_LOG2`] in the exponentials: a lazily rescaled row must
    /// take it. True from the masked sentinel to any visible entry; false while both are
    /// masked.
    pub fn outgrown_scaled(&self, block_max: f32, log2_scale: f32) -> bool {
        (block_max - self.row_max) * log2_scale > f32::new(LAZY_RESCALE_LOG2)
    }

    /// [`Self::probability`] of a raw dot: `2^fma(dot, log2_scale, -shift)` with `log2_scale
    /// = scale * log2 e` and `shift = log2_scale * row_max` (computed once per row and block),
    /// exactly 0 for a masked entry.
    pub fn probability_scaled(
        &self,
        dot: f32,
        log2_scale: f32,
        shift: f32,
        #[comptime] masked_pass: bool,
    ) -> f32 {
        let p = exp2_fast(fma(dot, log2_scale, -shift));
        if comptime!(masked_pass) {
            // A row masked so far with scale > 1 has shift = -inf and the fma NaN: selected away.
            select(is_masked_logit(dot), 0.0f32, p)
        } else {
            p
        }
    }

    /// Adds the probabilities of one block (computed against the current `row_max`).
    pub fn accumulate(&mut self, block_sum: f32) {
        self.row_sum += block_sum;
    }

    /// Factor that normalizes the accumulators once at the end: `1 / row_sum`, or 0 for a
    /// fully masked row (its output is 0, not NaN).
    pub fn normalizer(&self) -> f32 {
        select(self.row_sum > 0.0f32, 1.0f32 / self.row_sum, 0.0f32)
    }

    /// The quiet softmax ("softmax1", `exp(s) / (1 + sum exp(s))`): its denominator against the
    /// reference `max(row_max, 0)`, so that no term exceeds 1, and the factor
    /// `exp(row_max - reference)` that brings the accumulators (kept against `row_max`) to it.
    /// A fully masked row has denominator 1 at reference 0 and factor 0.
    fn quiet_terms(&self, #[comptime] precise: bool) -> QuietTerms {
        let reference = max(self.row_max, 0.0f32);
        let factor = exp_f32(self.row_max - reference, precise);
        QuietTerms {
            reference,
            factor,
            sum: fma(self.row_sum, factor, exp_f32(-reference, precise)),
        }
    }

    /// [`Self::normalizer`] of the quiet softmax: `factor / denominator` (0 for a fully masked
    /// row, whose accumulators are 0 anyway). Call after the last block, `row_max` in logits.
    pub fn quiet_normalizer(&self, #[comptime] precise: bool) -> f32 {
        let terms = self.quiet_terms(precise);
        terms.factor / terms.sum
    }

    /// [`Self::lse`] of the quiet softmax: `ln(1 + sum exp(s))`, 0 for a fully masked row.
    pub fn quiet_lse(&self, #[comptime] precise: bool) -> f32 {
        let terms = self.quiet_terms(precise);
        terms.reference + ln_f32(terms.sum, precise)
    }

    /// Natural-log log-sum-exp of the row; [`FULLY_MASKED_LSE`] for a fully masked row.
    pub fn lse(&self, #[comptime] precise: bool) -> f32 {
        // ln(0) would be -inf: a fully masked row takes the +inf stand-in instead.
        let safe_sum = select(self.row_sum > 0.0f32, self.row_sum, 1.0f32);
        select(
            self.row_sum > 0.0f32,
            self.row_max + ln_f32(safe_sum, precise),
            f32::new(FULLY_MASKED_LSE),
        )
    }
}
