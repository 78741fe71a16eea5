//! The training loop: AdamW, linear warmup then cosine decay, one CSV row per step.
use std::{f64::consts::PI, time::Instant};

use burn::{
    optim::{AdamWConfig, GradientsParams, Optimizer},
    tensor::backend::AutodiffBackend,
};
use indicatif::{ProgressBar, ProgressStyle};

use crate::{
    Error,
    data::{Batcher, Corpus},
    memory::PeakMemory,
    model::{Gpt, GptConfig},
    record::StepRecord,
};

/// GPT-2 / nanoGPT AdamW settings.
const BETA_1: f32 = 0.9;
/// 0.95 rather than 0.999: steadier with the large, noisy steps of early LM training.
const BETA_2: f32 = 0.95;
const EPSILON: f32 = 1e-8;
const WEIGHT_DECAY: f32 = 0.1;
/// The cosine decays the learning rate to this fraction of its peak at the last step.
const MIN_LR_FRACTION: f64 = 0.1;
pub(crate) const MS_PER_S: f64 = 1e3;
const PROGRESS_TEMPLATE: &str = "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} {msg}";

#[derive(Debug, Clone, PartialEq)]
pub struct TrainConfig {
    pub model: GptConfig,
    pub batch: usize,
    pub steps: usize,
    /// Seeds the parameters and the order of the batches.
    pub seed: u64,
    pub learning_rate: f64,
    pub warmup_steps: usize,
    /// Draw the indicatif progress bar (on stderr).
    pub progress: bool,
}

/// AdamW with the GPT-2 / nanoGPT settings above (both training loops).
pub(crate) fn adamw() -> AdamWConfig {
    AdamWConfig::new()
        .with_beta_1(BETA_1)
        .with_beta_2(BETA_2)
        .with_epsilon(EPSILON)
        .with_weight_decay(WEIGHT_DECAY)
}

impl TrainConfig {
    /// Linear warmup to `learning_rate`, then cosine decay to `MIN_LR_FRACTION` of it.
    /// `step` is 0-based.
    pub fn learning_rate_at(&self, step: usize) -> f64 {
        if step < self.warmup_steps {
            return self.learning_rate * (step + 1) as f64 / self.warmup_steps as f64;
        }
        let decay_steps = self.steps.saturating_sub(self.warmup_steps).max(1);
        let progress = (step - self.warmup_steps) as f64 / decay_steps as f64;
        let cosine = 0.5 * (1.0 + (PI * progress.min(1.0)).cos());
        self.learning_rate * (MIN_LR_FRACTION + (1.0 - MIN_LR_FRACTION) * cosine)
    }

    pub fn tokens_per_step(&self) -> usize {
        self.batch * self.model.context
    }
}

/// Trains a fresh model on `corpus` for `config.steps` steps, handing each step's record to
/// `on_step` as soon as it is measured, and returns all records.
pub fn train<B: AutodiffBackend>(
    config: &TrainConfig,
    corpus: &Corpus,
    device: &B::Device,
    memory: &mut impl PeakMemory,
    mut on_step: impl FnMut(&StepRecord) -> Result<(), Error>,
) -> Result<Vec<StepRecord>, Error> {
    let mut batcher = Batcher::new(corpus, config.batch, config.model.context, config.seed)?;
    B::seed(device, config.seed);
    let mut model = Gpt::<B>::new(&config.model, device);
    let mut optimizer = adamw().init::<B, Gpt<B>>();
    let progress = progress_bar(config);
    let mut records = Vec::with_capacity(config.steps);
    for step in 0..config.steps {
        let batch = batcher.next_batch();
        let start = Instant::now();
        let (inputs, targets) = batch.tensors::<B>(device);
        let loss = model.loss(inputs, targets);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optimizer.step(config.learning_rate_at(step), model, grads);
        // Reading the loss back waits for this step's work on the device.
        let loss = loss.into_data().iter::<f64>().next().ok_or(Error::EmptyLoss)?;
        let seconds = start.elapsed().as_secs_f64();
        let record = StepRecord {
            step: step + 1,
            loss,
            ms_per_step: seconds * MS_PER_S,
            tokens_per_s: config.tokens_per_step() as f64 / seconds,
            peak_memory_mib: memory.sample_mib(),
        };
        progress.set_message(format!("loss {loss:.4} | {:.0} tok/s", record.tokens_per_s));
        progress.inc(1);
        on_step(&record)?;
        records.push(record);
    }
    progress.finish();
    Ok(records)
}

fn progress_bar(config: &TrainConfig) -> ProgressBar {
    if !config.progress {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(config.steps as u64);
    if let Ok(style) = ProgressStyle::with_template(PROGRESS_TEMPLATE) {
        bar.set_style(style);
    }
    bar
}
