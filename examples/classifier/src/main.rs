//! `flash-classifier train`: see `examples/classifier/README.md`.
use std::{path::PathBuf, process::ExitCode};

use clap::{Parser, ValueEnum};
use flash_classifier::{
    Error,
    data::Texts,
    model::ClassifierConfig,
    training::{TrainConfig, VALID_FRACTION, train},
};
#[cfg(not(feature = "flash"))]
use burn::nn::transformer::TransformerEncoderConfig;
#[cfg(feature = "flash")]
use burn_flash_attn::nn::transformer::TransformerEncoderConfig;
use flash_gpt::{
    backend::{Runtime, Selected, devices, float_name, variant},
    compare::mean_ms_per_step,
    kernel_cache::KernelCacheArgs,
    memory::MemoryProbe,
};

/// Steps averaged for the reported step time (the first ones compile kernels).
const REPORT_WINDOW: usize = 100;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Preset {
    /// d_model 64, 2 layers, 2 heads, texts up to 256 bytes (lavapipe, CI).
    Tiny,
    /// d_model 384, 6 layers, 6 heads (head dim 64), d_ff 1536, texts up to 1024 bytes.
    Base,
}

impl Preset {
    /// (d_model, layers, heads, max_len).
    fn shape(self) -> (usize, usize, usize, usize) {
        match self {
            Preset::Tiny => (64, 2, 2, 256),
            Preset::Base => (384, 6, 6, 1024),
        }
    }
}

/// Train the encoder classifier through burn-train's Learner and write one CSV row per step.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[arg(long, value_enum, default_value = "tiny")]
    preset: Preset,
    /// A directory of fortune files (`scripts/fetch_fortunes.sh`); the generated texts when absent.
    #[arg(long)]
    data: Option<PathBuf>,
    #[arg(long, default_value_t = 32)]
    batch: usize,
    #[arg(long, default_value_t = 4)]
    epochs: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Peak factor of the Noam schedule.
    #[arg(long, default_value_t = 0.5)]
    lr: f64,
    #[arg(long, default_value_t = 100)]
    warmup: usize,
    /// Attention dropout of the encoder (burn-nn's default 0.1).
    #[arg(long, default_value_t = 0.1)]
    dropout: f64,
    /// Devices (GPUs 0..N).
    #[arg(long, default_value_t = 1)]
    devices: usize,
    /// burn-train's multi-device strategy even with one device.
    #[arg(long)]
    multi_device: bool,
    /// The per-step CSV (default `<variant>-classifier.csv`), in flash-gpt's format.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Checkpoints and logs (default `<variant>-classifier`).
    #[arg(long)]
    artifacts: Option<PathBuf>,
    #[command(flatten)]
    kernel_cache: KernelCacheArgs,
}

fn run(cli: Cli) -> Result<(), Error> {
    // Before any tensor: CubeCL reads its configuration once.
    cli.kernel_cache.enable().map_err(flash_gpt::Error::from)?;
    let texts = match &cli.data {
        Some(dir) => Texts::fortunes(dir, cli.seed)?,
        None => Texts::generated(cli.seed),
    };
    let (d_model, layers, heads, max_len) = cli.preset.shape();
    let transformer = TransformerEncoderConfig::new(d_model, 4 * d_model, heads, layers)
        .with_dropout(cli.dropout)
        .with_norm_first(true);
    let model = ClassifierConfig::new(transformer, texts.num_classes(), max_len);
    let csv = cli.csv.unwrap_or_else(|| format!("{}-classifier.csv", variant()).into());
    let config = TrainConfig {
        model,
        batch: cli.batch,
        epochs: cli.epochs,
        seed: cli.seed,
        learning_rate: cli.lr,
        warmup_steps: cli.warmup,
        artifact_dir: cli.artifacts.unwrap_or_else(|| format!("{}-classifier", variant()).into()),
        multi_device: cli.multi_device,
        csv: Some(csv.clone()),
    };
    let lengths: Vec<usize> = texts.items.iter().map(|t| t.bytes.len()).collect();
    println!(
        "{} {} | {:?}: d_model {d_model}, {layers} layers, {heads} heads, max_len {max_len}, \
         dropout {} | batch {} | {} epochs | seed {} | {} texts of {}..{} bytes ({} classes: {}), \
         {:.0} % held out",
        variant(),
        float_name(),
        cli.preset,
        cli.dropout,
        config.batch,
        config.epochs,
        config.seed,
        lengths.len(),
        lengths.iter().min().unwrap_or(&0),
        lengths.iter().max().unwrap_or(&0),
        texts.num_classes(),
        texts.topics.join(", "),
        VALID_FRACTION * 100.0,
    );
    let all_devices = devices(cli.devices);
    let memory = MemoryProbe::<Runtime>::start(&all_devices[0]);
    let result = train::<Selected, _>(&config, texts, all_devices, memory)?;
    let routes = burn_flash_attn::route_counts();
    let peak = result.steps.iter().map(|r| r.peak_memory_mib).fold(0.0, f64::max);
    let window = REPORT_WINDOW.min(result.steps.len());
    println!(
        "done: {} steps | valid accuracy {:.4}, loss {:.4} | {:.1} ms/step (last {window}) | \
         peak {peak:.0} MiB | attention calls: {} kernel, {} fallback | {}",
        result.steps.len(),
        result.valid_accuracy,
        result.valid_loss,
        mean_ms_per_step(&result.steps, window),
        routes.kernel,
        routes.fallback,
        csv.display()
    );
    Ok(())
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
