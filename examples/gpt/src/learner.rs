//! Training through burn-train's `Learner`, as Burn users train: a dataset of byte windows and
//! a batcher for burn's `DataLoader`, `TrainStep` / `InferenceStep` for [`Gpt`], the warmup +
//! cosine schedule as an `LrScheduler`, loss / learning-rate / iteration-speed / tokens-per-second
//! metrics, a checkpoint after the last epoch ([`LastEpochCheckpoint`]), burn-train's progress
//! display (its terminal UI on a terminal, plain lines otherwise), one device or several
//! ([`execution_strategy`]).
//!
//! ```text
//! corpus --split--> train bytes --WindowStarts(seed)--> Windows --DataLoader(batch)--> LmBatch
//!               \-> valid bytes (last 5 %) --WindowStarts(seed + 1)--------------------^
//! Learner(Gpt, AdamW, WarmupCosine) --SupervisedTraining::launch (1 epoch)--> StepLog (+ CSV, per step)
//! ```
//! The training windows are the hand-written loop's ([`crate::train`]) drawn from the first
//! 95 % of the corpus; the per-step CSV is the same (`record::HEADER`), so `compare` and `plot`
//! read both. burn-train syncs each step's output on its metrics thread while the next step is
//! queued, so a step's time here is the interval between two steps' losses arriving: in steady
//! state the step time, as in the hand-written loop; the first includes compilation.
use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Instant,
};

use burn::{
    backend::Flex,
    data::{
        dataloader::{DataLoaderBuilder, batcher::Batcher as DataBatcher},
        dataset::Dataset,
    },
    lr_scheduler::LrScheduler,
    record::{HalfPrecisionSettings, NamedMpkFileRecorder},
    tensor::{
        ElementConversion, Int, Tensor,
        backend::{AutodiffBackend, Backend},
    },
    train::{
        checkpoint::{CheckpointingAction, CheckpointingStrategy},
        metric::store::EventStoreClient,
        ExecutionStrategy, InferenceStep, ItemLazy, Learner, MultiDeviceOptim, SupervisedTraining,
        TrainOutput, TrainStep,
        metric::{
            Adaptor, IterationSpeedMetric, LearningRateMetric, LossInput, LossMetric, Metric,
            MetricAttributes, MetricMetadata, MetricName, Numeric, NumericAttributes,
            NumericEntry, SerializedEntry,
            state::{FormatOptions, NumericMetricState},
        },
    },
};

use crate::{
    Error,
    data::{Corpus, WindowStarts, window_tensors},
    memory::PeakMemory,
    model::Gpt,
    record::{CsvWriter, StepRecord},
    train::{MS_PER_S, TrainConfig, adamw},
};

/// The share of the corpus (its end) held out for validation.
pub const VALID_FRACTION: f64 = 0.05;
/// Validation batches at the end of each epoch.
const VALID_BATCHES: usize = 4;
/// The Learner runs one epoch of `steps` batches: the hand-written loop's data, once.
const EPOCHS: usize = 1;

/// The Learner's settings beyond the hand-written loop's [`TrainConfig`].
#[derive(Debug, Clone)]
pub struct LearnerConfig {
    pub train: TrainConfig,
    /// Checkpoints, metric logs and the experiment log.
    pub artifact_dir: PathBuf,
    /// burn-train's multi-device strategy even on one device (see [`execution_strategy`]).
    pub multi_device: bool,
    /// The per-step CSV, written as the steps arrive (see [`StepLog`]); `None`: not written.
    pub csv: Option<PathBuf>,
}

/// Where burn-train runs the steps: `devices[0]` alone, or burn-train's multi-device strategy
/// (the windows split into one shard per device; each step runs one batch per device, on a
/// thread each, sums the gradients on `devices[0]` and steps the optimizer there) with several
/// devices, or with one when `multi_device` asks for it (so that its code path runs, and is
/// checked against the single-device one, without two GPUs).
pub fn execution_strategy<B: Backend>(devices: Vec<B::Device>, multi_device: bool) -> Result<ExecutionStrategy<B>, Error> {
    match devices.as_slice() {
        [] => Err(Error::NoDevice),
        [device] if !multi_device => Ok(ExecutionStrategy::SingleDevice(device.clone())),
        _ => Ok(ExecutionStrategy::MultiDevice(devices, MultiDeviceOptim::OptimMainDevice)),
    }
}

/// The start offsets of the windows of one split, in the order the loader batches them.
pub struct Windows {
    starts: Vec<usize>,
}

impl Windows {
    pub fn new(corpus: &Corpus, seq: usize, seed: u64, count: usize) -> Result<Self, Error> {
        Ok(Self { starts: WindowStarts::new(corpus, seq, seed)?.take(count).collect() })
    }
}

impl Dataset<usize> for Windows {
    fn get(&self, index: usize) -> Option<usize> {
        self.starts.get(index).copied()
    }

    fn len(&self) -> usize {
        self.starts.len()
    }
}

/// Turns window starts into `[batch, seq]` inputs and targets on the loader's device.
#[derive(Clone)]
pub struct WindowBatcher {
    bytes: Arc<[u8]>,
    seq: usize,
}

/// One step's inputs and next-byte targets, `[batch, seq]`.
#[derive(Debug, Clone)]
pub struct LmBatch<B: Backend> {
    pub inputs: Tensor<B, 2, Int>,
    pub targets: Tensor<B, 2, Int>,
}

impl<B: Backend> DataBatcher<B, usize, LmBatch<B>> for WindowBatcher {
    fn batch(&self, starts: Vec<usize>, device: &B::Device) -> LmBatch<B> {
        let batch = window_tensors(&self.bytes, self.seq, &starts);
        let (inputs, targets) = batch.tensors::<B>(device);
        LmBatch { inputs, targets }
    }
}

/// What a step hands to the metrics: the loss (still on the device) and the tokens it covered.
pub struct LmOutput<B: Backend> {
    pub loss: Tensor<B, 1>,
    pub tokens: usize,
}

/// A training step as [`StepMetric`] reads it: its loss, read back on the metrics thread, and
/// the tokens it covered.
#[derive(Debug, Clone, Copy)]
pub struct StepStats {
    pub loss: f64,
    pub tokens: usize,
}

impl<B: Backend> ItemLazy for LmOutput<B> {
    type ItemSync = StepStats;

    fn sync(self) -> StepStats {
        StepStats { loss: self.loss.into_scalar().elem::<f64>(), tokens: self.tokens }
    }
}

impl Adaptor<LossInput<Flex>> for StepStats {
    fn adapt(&self) -> LossInput<Flex> {
        LossInput::new(Tensor::from_floats([self.loss as f32], &Default::default()))
    }
}

impl Adaptor<StepStats> for StepStats {
    fn adapt(&self) -> StepStats {
        *self
    }
}

fn lm_output<B: Backend>(model: &Gpt<B>, batch: LmBatch<B>) -> LmOutput<B> {
    let tokens = batch.inputs.shape().num_elements();
    LmOutput { loss: model.loss(batch.inputs, batch.targets), tokens }
}

impl<B: AutodiffBackend> TrainStep for Gpt<B> {
    type Input = LmBatch<B>;
    type Output = LmOutput<B>;

    fn step(&self, batch: LmBatch<B>) -> TrainOutput<LmOutput<B>> {
        let output = lm_output(self, batch);
        TrainOutput::new(self, output.loss.backward(), output)
    }
}

impl<B: Backend> InferenceStep for Gpt<B> {
    type Input = LmBatch<B>;
    type Output = LmOutput<B>;

    fn step(&self, batch: LmBatch<B>) -> LmOutput<B> {
        lm_output(self, batch)
    }
}

/// [`TrainConfig::learning_rate_at`] as burn's scheduler: linear warmup, cosine decay.
#[derive(Debug, Clone)]
pub struct WarmupCosine {
    config: TrainConfig,
    step: usize,
}

impl LrScheduler for WarmupCosine {
    type Record<B: Backend> = usize;

    fn step(&mut self) -> f64 {
        let lr = self.config.learning_rate_at(self.step);
        self.step += 1;
        lr
    }

    fn to_record<B: Backend>(&self) -> usize {
        self.step
    }

    fn load_record<B: Backend>(mut self, step: usize) -> Self {
        self.step = step;
        self
    }
}

/// The per-step rows of a Learner run, filled by [`StepMetric`] as the losses arrive. With a
/// CSV ([`StepLog::writing`]) each row is written and flushed as it arrives, so a run cut short
/// (a time limit, a crash in validation or checkpointing) keeps the rows of the steps it made.
#[derive(Clone, Default)]
pub struct StepLog(Arc<Mutex<StepRows>>);

#[derive(Default)]
struct StepRows {
    records: Vec<StepRecord>,
    csv: Option<CsvWriter>,
    /// The first failed write, reported by [`StepLog::finish`] (the rows stay in memory).
    error: Option<Error>,
}

impl StepLog {
    /// A log that also writes each row to `csv` (`None`: memory only).
    pub fn writing(csv: Option<&Path>) -> Result<Self, Error> {
        let csv = csv.map(CsvWriter::create).transpose()?;
        Ok(Self(Arc::new(Mutex::new(StepRows { csv, ..StepRows::default() }))))
    }

    /// Appends the next step's row (its step number is the count so far plus one).
    fn push(&self, row: impl FnOnce(usize) -> StepRecord) {
        // A poisoned lock only means a panic elsewhere while it was held: the rows are intact.
        let mut rows = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let record = row(rows.records.len() + 1);
        if let Some(csv) = rows.csv.as_mut()
            && let Err(error) = csv.write(&record)
        {
            rows.csv = None;
            rows.error = Some(error);
        }
        rows.records.push(record);
    }

    /// The rows so far, or the first error writing them to the CSV.
    pub fn finish(&self) -> Result<Vec<StepRecord>, Error> {
        let mut rows = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match rows.error.take() {
            Some(error) => Err(error),
            None => Ok(rows.records.clone()),
        }
    }
}

/// Tokens per second between two training steps' losses, with the CSV row of each step
/// (loss, step time, peak memory of `P`) pushed into a shared [`StepLog`].
#[derive(Clone)]
pub struct StepMetric<P: PeakMemory + Clone + Send + Sync> {
    name: MetricName,
    state: NumericMetricState,
    last: Instant,
    memory: P,
    log: StepLog,
}

impl<P: PeakMemory + Clone + Send + Sync> StepMetric<P> {
    pub fn new(memory: P, log: StepLog) -> Self {
        Self {
            // The name is also the metric log file's name: no `/`.
            name: Arc::new("Tokens per second".to_string()),
            state: NumericMetricState::new(),
            last: Instant::now(),
            memory,
            log,
        }
    }
}

impl<P: PeakMemory + Clone + Send + Sync> Metric for StepMetric<P> {
    type Input = StepStats;

    fn update(&mut self, stats: &StepStats, _metadata: &MetricMetadata) -> SerializedEntry {
        let now = Instant::now();
        let seconds = now.duration_since(self.last).as_secs_f64();
        self.last = now;
        let tokens_per_s = stats.tokens as f64 / seconds;
        let peak_memory_mib = self.memory.sample_mib();
        self.log.push(|step| StepRecord {
            step,
            loss: stats.loss,
            ms_per_step: seconds * MS_PER_S,
            tokens_per_s,
            peak_memory_mib,
        });
        self.state.update(tokens_per_s, 1, FormatOptions::new(self.name()).unit("tok/s").precision(0))
    }

    fn clear(&mut self) {
        self.state.reset();
    }

    fn name(&self) -> MetricName {
        self.name.clone()
    }

    fn attributes(&self) -> MetricAttributes {
        NumericAttributes { unit: Some("tok/s".to_string()), higher_is_better: true }.into()
    }
}

impl<P: PeakMemory + Clone + Send + Sync> Numeric for StepMetric<P> {
    fn value(&self) -> NumericEntry {
        self.state.current_value()
    }

    fn running_value(&self) -> NumericEntry {
        self.state.running_value()
    }
}

/// Saves the checkpoint of the last epoch only (the model, the optimizer and the schedule, in
/// `<artifact dir>/checkpoint`). burn-train writes checkpoints from a thread of its own while
/// the next epoch trains, and burn-fusion 0.21 does not survive that: reading the record's
/// tensors there while the training thread updates them panics in the fusion server ("Should
/// have handle for tensor", the family of tracel-ai/burn#4347; seen with the classifier on
/// lavapipe at the end of its first of two epochs). After the last epoch nothing updates them.
#[derive(Debug, Clone, Copy)]
pub struct LastEpochCheckpoint {
    pub epochs: usize,
}

impl CheckpointingStrategy for LastEpochCheckpoint {
    fn checkpointing(&mut self, epoch: usize, _store: &EventStoreClient) -> Vec<CheckpointingAction> {
        if epoch >= self.epochs { vec![CheckpointingAction::Save] } else { Vec::new() }
    }
}

/// Trains a fresh [`Gpt`] through burn-train's Learner for one epoch of `steps` batches
/// (validation on the held-out tail and a checkpoint in `artifact_dir` at its end) on
/// `devices` (the first holds the model and the optimizer; with several, burn-train spreads
/// the batches over them), and returns one row per training step (written to `config.csv`
/// as they arrive).
pub fn train_with_learner<B, P>(
    config: &LearnerConfig,
    corpus: Corpus,
    devices: Vec<B::Device>,
    memory: P,
) -> Result<Vec<StepRecord>, Error>
where
    B: AutodiffBackend,
    P: PeakMemory + Clone + Send + Sync + 'static,
{
    let train = &config.train;
    let seq = train.model.context;
    let strategy = execution_strategy::<B>(devices, config.multi_device)?;
    let device = strategy.main_device().clone();
    let (train_text, valid_text) = corpus.split(VALID_FRACTION);
    let train_windows = Windows::new(&train_text, seq, train.seed, train.steps * train.batch)?;
    let valid_windows = Windows::new(&valid_text, seq, train.seed + 1, VALID_BATCHES * train.batch)?;
    let batcher = |text: &Corpus| WindowBatcher { bytes: text.bytes().into(), seq };
    let loader_train = DataLoaderBuilder::new(batcher(&train_text))
        .batch_size(train.batch)
        .set_device(device.clone())
        .build(train_windows);
    let loader_valid = DataLoaderBuilder::new(batcher(&valid_text))
        .batch_size(train.batch)
        .set_device(device.clone())
        .build(valid_windows);

    B::seed(&device, train.seed);
    let model = Gpt::<B>::new(&train.model, &device);
    let optimizer = adamw().init::<B, Gpt<B>>();
    let schedule = WarmupCosine { config: train.clone(), step: 0 };
    let log = StepLog::writing(config.csv.as_deref())?;
    let training = SupervisedTraining::new(&config.artifact_dir, loader_train, loader_valid)
        .metric_train_numeric(LossMetric::<Flex>::new())
        .metric_valid_numeric(LossMetric::<Flex>::new())
        .metric_train_numeric(LearningRateMetric::new())
        .metric_train(IterationSpeedMetric::new())
        .metric_train_numeric(StepMetric::new(memory, log.clone()))
        // Half-precision MessagePack without gzip (burn's `CompactRecorder` adds it): gpt2-small's
        // parameters and AdamW state are about 0.5 GB, which gzip takes seconds to pack.
        .with_file_checkpointer(NamedMpkFileRecorder::<HalfPrecisionSettings>::new())
        .with_checkpointing_strategy(LastEpochCheckpoint { epochs: EPOCHS })
        .with_training_strategy(strategy.into())
        .num_epochs(EPOCHS)
        .summary();
    training.launch(Learner::new(model, optimizer, schedule));
    log.finish()
}
