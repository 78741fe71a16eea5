//! `flash-gpt train | compare | plot`: see `examples/gpt/README.md`.
use std::{path::PathBuf, process::ExitCode};

use burn_flash_attn::kernels::plan::DqAccumulation;
use clap::{Args, Parser, Subcommand};
use flash_gpt::{
    Error,
    backend::{Runtime, Selected, devices, float_name, variant},
    compare::{loss_gap, mean_ms_per_step},
    data::Corpus,
    kernel_cache::KernelCacheArgs,
    learner::{LearnerConfig, VALID_FRACTION, train_with_learner},
    memory::MemoryProbe,
    model::Preset,
    plot::{DEFAULT_FONT, Series, load_font, plot},
    record::{CsvWriter, read_csv},
    train::{TrainConfig, train},
};

/// The window of `compare`: the last 100 steps, as the experiment reports.
const COMPARE_WINDOW: usize = 100;

#[derive(Parser)]
#[command(version, about = "GPT training with and without FlashAttention (Burn + burn-flash-attn)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train a fresh model through burn-train's Learner (or the hand-written loop) and write one
    /// CSV row per step.
    Train(TrainArgs),
    /// Max and mean |loss_a - loss_b| over the last steps both runs have, and their step times.
    Compare {
        a: PathBuf,
        b: PathBuf,
        #[arg(long, default_value_t = COMPARE_WINDOW)]
        last: usize,
    },
    /// Draw the loss curves and step times of the given CSVs into one PNG.
    Plot {
        #[arg(required = true)]
        csvs: Vec<PathBuf>,
        #[arg(long, short, default_value = "runs.png")]
        out: PathBuf,
        /// TrueType font for the text; without it the figure has no text.
        #[arg(long, default_value = DEFAULT_FONT)]
        font: PathBuf,
    },
}

#[derive(Args)]
struct TrainArgs {
    #[arg(long, value_enum, default_value = "tiny")]
    preset: Preset,
    /// Overrides the preset's context (sequence length), e.g. 8192 or 16384.
    #[arg(long)]
    context: Option<usize>,
    /// Sequences per step (each `context` bytes long).
    #[arg(long, default_value_t = 8)]
    batch: usize,
    #[arg(long, default_value_t = 200)]
    steps: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Peak learning rate.
    #[arg(long, default_value_t = 6e-4)]
    lr: f64,
    #[arg(long, default_value_t = 20)]
    warmup: usize,
    /// A text file to train on; the built-in generated corpus when absent.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Where to write the per-step CSV (default `<variant>-<preset>.csv`).
    #[arg(long)]
    csv: Option<PathBuf>,
    /// No progress bar (logs and CI; the Learner prints plain lines when stdout is no terminal).
    #[arg(long)]
    quiet: bool,
    /// The hand-written loop (AdamW step, loss read back after every step, on the whole
    /// corpus) instead of burn-train's Learner.
    #[arg(long)]
    hand_loop: bool,
    /// Devices for the Learner (GPUs 0..N).
    #[arg(long, default_value_t = 1)]
    devices: usize,
    /// burn-train's multi-device strategy even with one device.
    #[arg(long)]
    multi_device: bool,
    /// The Learner's checkpoints and logs (default `<variant>-<preset>-learner`).
    #[arg(long)]
    artifacts: Option<PathBuf>,
    /// How the backward sums dQ (`flash` feature): `kernel` (its own kernel, bit-identical
    /// reruns) or `atomic` (the one-pass backward: the dK/dV kernel adds dQ with f32 atomic
    /// adds); the library's default when absent (the one pass on the mma path from 2048 keys).
    #[arg(long)]
    backward_dq: Option<DqAccumulation>,
    #[command(flatten)]
    kernel_cache: KernelCacheArgs,
}

fn run_train(args: TrainArgs) -> Result<(), Error> {
    // Before any tensor: CubeCL reads its configuration once.
    args.kernel_cache.enable()?;
    if let Some(accumulation) = args.backward_dq {
        burn_flash_attn::set_tuning(burn_flash_attn::tuning().with_backward_dq(Some(accumulation)));
    }
    let corpus = match &args.data {
        Some(path) => Corpus::from_file(path)?,
        None => Corpus::generated(),
    };
    let preset_name = format!("{:?}", args.preset).to_lowercase();
    let csv = args.csv.unwrap_or_else(|| format!("{}-{preset_name}.csv", variant()).into());
    let mut model = args.preset.config();
    model.context = args.context.unwrap_or(model.context);
    let config = TrainConfig {
        model,
        batch: args.batch,
        steps: args.steps,
        seed: args.seed,
        learning_rate: args.lr,
        warmup_steps: args.warmup,
        progress: !args.quiet,
    };
    let data_name = args.data.as_ref().map_or("generated".into(), |p| p.display().to_string());
    println!(
        "{} {} | {} | {:?} | batch {} x {} | {} steps | seed {} | data {data_name} ({} bytes)",
        variant(),
        if args.hand_loop { "hand-written loop" } else { "burn-train Learner" },
        float_name(),
        config.model,
        config.batch,
        config.model.context,
        config.steps,
        config.seed,
        corpus.len()
    );
    let all_devices = devices(args.devices);
    let mut memory = MemoryProbe::<Runtime>::start(&all_devices[0]);
    // Both loops write each step's row as it comes: a run cut short keeps its rows.
    let records = if args.hand_loop {
        let mut writer = CsvWriter::create(&csv)?;
        train::<Selected>(&config, &corpus, &all_devices[0], &mut memory, |r| writer.write(r))?
    } else {
        let artifact_dir = args
            .artifacts
            .unwrap_or_else(|| format!("{}-{preset_name}-learner", variant()).into());
        println!(
            "Learner: {} device(s), validation on the last {:.0} % of the text, artifacts in {}",
            all_devices.len(),
            VALID_FRACTION * 100.0,
            artifact_dir.display()
        );
        let learner = LearnerConfig {
            train: config.clone(),
            artifact_dir,
            multi_device: args.multi_device,
            csv: Some(csv.clone()),
        };
        train_with_learner::<Selected, _>(&learner, corpus, all_devices, memory)?
    };
    let routes = burn_flash_attn::route_counts();
    if let Some(last) = records.last() {
        let window = COMPARE_WINDOW.min(records.len());
        println!(
            "done: loss {:.4} | {:.1} ms/step (last {window}) | peak {:.0} MiB | \
             attention calls: {} kernel, {} fallback | {}",
            last.loss,
            mean_ms_per_step(&records, window),
            last.peak_memory_mib,
            routes.kernel,
            routes.fallback,
            csv.display()
        );
    }
    Ok(())
}

fn run_compare(a: PathBuf, b: PathBuf, last: usize) -> Result<(), Error> {
    let (runs_a, runs_b) = (read_csv(&a)?, read_csv(&b)?);
    let gap = loss_gap(&runs_a, &runs_b, last)
        .ok_or_else(|| Error::NothingToCompare(a.clone(), b.clone()))?;
    println!(
        "|loss delta| over the last {} steps: max {:.4e}, mean {:.4e}",
        gap.steps, gap.max_abs, gap.mean_abs
    );
    for (path, runs) in [(&a, &runs_a), (&b, &runs_b)] {
        let peak = runs.iter().map(|r| r.peak_memory_mib).fold(0.0, f64::max);
        let ms = mean_ms_per_step(runs, last);
        println!("{}: {ms:.1} ms/step, peak {peak:.0} MiB", path.display());
    }
    Ok(())
}

fn run_plot(csvs: Vec<PathBuf>, out: PathBuf, font: PathBuf) -> Result<(), Error> {
    let series = csvs
        .iter()
        .map(|path| Ok(Series::from_csv(path, read_csv(path)?)))
        .collect::<Result<Vec<_>, Error>>()?;
    plot(&series, &out, load_font(&font))?;
    println!("wrote {}", out.display());
    Ok(())
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let result = match Cli::parse().command {
        Command::Train(args) => run_train(args),
        Command::Compare { a, b, last } => run_compare(a, b, last),
        Command::Plot { csvs, out, font } => run_plot(csvs, out, font),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
