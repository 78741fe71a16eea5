//! Training through burn-train's `Learner`: padded batches from burn's `DataLoader`, AdamW with
//! the Noam schedule (warmup, then 1/sqrt(step)), loss / accuracy / learning-rate / iteration-
//! speed metrics, a checkpoint after the last epoch (`LastEpochCheckpoint` says why not after
//! each), burn-train's progress display, one or more devices;
//! then the validation accuracy of the trained model.
use std::path::PathBuf;

use burn::{
    backend::Flex,
    data::dataloader::DataLoaderBuilder,
    lr_scheduler::noam::NoamLrSchedulerConfig,
    optim::AdamWConfig,
    record::CompactRecorder,
    tensor::{
        ElementConversion,
        backend::{AutodiffBackend, Backend},
    },
    train::{
        Learner, SupervisedTraining,
        metric::{AccuracyMetric, IterationSpeedMetric, LearningRateMetric, LossMetric},
    },
};
use burn::data::dataloader::batcher::Batcher as _;
use flash_gpt::{
    learner::{LastEpochCheckpoint, StepLog, StepMetric, execution_strategy},
    memory::PeakMemory,
    record::StepRecord,
};

use crate::{
    Error,
    data::{PadBatcher, Texts},
    model::{Classifier, ClassifierConfig},
};

/// The share of the texts held out for validation.
pub const VALID_FRACTION: f64 = 0.1;

#[derive(Debug, Clone)]
pub struct TrainConfig {
    pub model: ClassifierConfig,
    pub batch: usize,
    pub epochs: usize,
    /// Seeds the parameters, the dropout masks and the order of the texts.
    pub seed: u64,
    pub learning_rate: f64,
    pub warmup_steps: usize,
    /// Checkpoints, metric logs and the experiment log.
    pub artifact_dir: PathBuf,
    /// burn-train's multi-device strategy even on one device (`flash_gpt::learner::execution_strategy`).
    pub multi_device: bool,
    /// The per-step CSV (flash-gpt's format), written as the steps arrive; `None`: not written.
    pub csv: Option<PathBuf>,
}

/// What a run gives: one row per training step, and the trained model's accuracy and mean loss
/// on the held-out texts.
#[derive(Debug, Clone)]
pub struct TrainResult {
    pub steps: Vec<StepRecord>,
    pub valid_accuracy: f64,
    pub valid_loss: f64,
}

pub fn train<B, P>(
    config: &TrainConfig,
    texts: Texts,
    devices: Vec<B::Device>,
    memory: P,
) -> Result<TrainResult, Error>
where
    B: AutodiffBackend,
    P: PeakMemory + Clone + Send + Sync + 'static,
{
    let strategy = execution_strategy::<B>(devices, config.multi_device)?;
    let device = strategy.main_device().clone();
    let (train_texts, valid_texts) = texts.split(VALID_FRACTION);
    let batcher = PadBatcher { max_len: config.model.max_len };
    let loader_train = DataLoaderBuilder::new(batcher.clone())
        .batch_size(config.batch)
        .shuffle(config.seed)
        .set_device(device.clone())
        .build(train_texts);
    let loader_valid = DataLoaderBuilder::new(batcher.clone())
        .batch_size(config.batch)
        .set_device(device.clone())
        .build(valid_texts.clone());

    B::seed(&device, config.seed);
    let model = config.model.init::<B>(&device);
    let optimizer = AdamWConfig::new().init::<B, Classifier<B>>();
    let schedule = NoamLrSchedulerConfig::new(config.learning_rate)
        .with_warmup_steps(config.warmup_steps.max(1))
        .with_model_size(config.model.transformer.d_model)
        .init()
        .map_err(Error::Schedule)?;
    let log = StepLog::writing(config.csv.as_deref())?;
    let training = SupervisedTraining::new(&config.artifact_dir, loader_train, loader_valid)
        .metric_train_numeric(LossMetric::<Flex>::new())
        .metric_valid_numeric(LossMetric::<Flex>::new())
        .metric_train_numeric(AccuracyMetric::<Flex>::new())
        .metric_valid_numeric(AccuracyMetric::<Flex>::new())
        .metric_train_numeric(LearningRateMetric::new())
        .metric_train(IterationSpeedMetric::new())
        .metric_train_numeric(StepMetric::new(memory, log.clone()))
        .with_file_checkpointer(CompactRecorder::new())
        .with_checkpointing_strategy(LastEpochCheckpoint { epochs: config.epochs })
        .with_training_strategy(strategy.into())
        .num_epochs(config.epochs)
        .summary();
    let trained = training.launch(Learner::new(model, optimizer, schedule)).model;
    let (valid_accuracy, valid_loss) = evaluate(&trained, &batcher, &valid_texts, config.batch, &device);
    let steps = log.finish()?;
    Ok(TrainResult { steps, valid_accuracy, valid_loss })
}

/// Accuracy and mean loss of `model` over `texts`, in batches of `batch`.
fn evaluate<B: Backend>(
    model: &Classifier<B>,
    batcher: &PadBatcher,
    texts: &Texts,
    batch: usize,
    device: &B::Device,
) -> (f64, f64) {
    let (mut correct, mut loss_sum, mut seen) = (0usize, 0.0, 0usize);
    for chunk in texts.items.chunks(batch.max(1)) {
        let batch = batcher.batch(chunk.to_vec(), device);
        let output = model.forward(batch).output;
        let predicted = output.output.argmax(1).squeeze_dim::<1>(1);
        correct += predicted.equal(output.targets).int().sum().into_scalar().elem::<i64>() as usize;
        loss_sum += output.loss.into_scalar().elem::<f64>() * chunk.len() as f64;
        seen += chunk.len();
    }
    let seen = seen.max(1) as f64;
    (correct as f64 / seen, loss_sum / seen)
}
