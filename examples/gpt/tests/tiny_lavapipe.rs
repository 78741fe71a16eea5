//! The seed experiment in miniature, on the default runtime (WGPU: Mesa lavapipe in CI): the
//! `tiny` preset trains a few steps with Burn's attention and with the flash kernels, from the
//! same seed and batches. Both losses fall, and the two runs agree step by step. One test binary
//! and one training test, so that Burn's kernels compile once (36-76 s per shape on lavapipe).
use flash_gpt::{
    backend::{FlashTrain, Runtime, Train},
    compare::loss_gap,
    data::Corpus,
    learner::{LearnerConfig, train_with_learner},
    memory::MemoryProbe,
    model::Preset,
    plot::{DEFAULT_FONT, Series, load_font, plot},
    record::{CsvWriter, StepRecord, read_csv},
    train::{TrainConfig, train},
};

const STEPS: usize = 6;
const SEED: u64 = 7;
/// Larger than the example's default: the loss must visibly fall within `STEPS` steps.
const LEARNING_RATE: f64 = 3e-3;
/// Initial loss of a uniform guess over bytes is ln 256 = 5.55 nats; six AdamW steps on the
/// generated corpus learn its byte frequencies and must gain at least this much.
const MIN_LOSS_DROP: f64 = 0.5;
/// f32 flash vs f32 decomposed attention (kernels and Burn agree to ~1e-6), carried through
/// `STEPS` AdamW steps of a 2-layer model: rounding-level gradient differences grow by each
/// update, and 1e-3 nats is still far below the loss drop being checked.
const LOSS_TOLERANCE: f64 = 1e-3;
/// The CSV keeps 6 decimals of the loss.
const CSV_LOSS_PRECISION: f64 = 1e-6;

fn config() -> TrainConfig {
    TrainConfig {
        model: Preset::Tiny.config(),
        batch: 4,
        steps: STEPS,
        seed: SEED,
        learning_rate: LEARNING_RATE,
        warmup_steps: 1,
        progress: false,
    }
}

fn losses(records: &[StepRecord]) -> Vec<f64> {
    records.iter().map(|r| r.loss).collect()
}

#[test]
fn tiny_trains_with_and_without_flash_and_the_losses_agree() {
    let corpus = Corpus::generated();
    let device = Default::default();
    let config = config();
    let dir = tempfile::tempdir().expect("temp dir");

    let mut memory = MemoryProbe::<Runtime>::start(&device);
    let mut writer = CsvWriter::create(&dir.path().join("fallback.csv")).expect("csv");
    let fallback = train::<Train>(&config, &corpus, &device, &mut memory, |r| writer.write(r))
        .expect("fallback run");

    let before = burn_flash_attn::route_counts();
    let mut memory = MemoryProbe::<Runtime>::start(&device);
    let flash = train::<FlashTrain>(&config, &corpus, &device, &mut memory, |_| Ok(()))
        .expect("flash run");
    let after = burn_flash_attn::route_counts();

    println!("seed {SEED}: fallback {:?}", losses(&fallback));
    println!("seed {SEED}: flash    {:?}", losses(&flash));
    let attention_calls = config.model.layers * STEPS;
    assert_eq!(after.kernel - before.kernel, attention_calls, "every attention ran the kernels");
    assert_eq!(after.fallback, before.fallback, "no attention fell back");

    for (name, run) in [("fallback", &fallback), ("flash", &flash)] {
        assert_eq!(run.len(), STEPS);
        assert!(run.iter().all(|r| r.loss.is_finite()), "{name}: non-finite loss");
        let drop = run[0].loss - run[STEPS - 1].loss;
        assert!(drop >= MIN_LOSS_DROP, "{name}: loss fell by {drop:.3}, want >= {MIN_LOSS_DROP}");
        assert!(run.iter().all(|r| r.peak_memory_mib > 0.0), "{name}: no memory measured");
    }
    let gap = loss_gap(&fallback, &flash, STEPS).expect("common steps");
    println!("|loss delta|: max {:.3e}, mean {:.3e}", gap.max_abs, gap.mean_abs);
    let max = gap.max_abs;
    assert!(max <= LOSS_TOLERANCE, "flash and fallback losses differ by {max:.3e}");

    assert_csv_holds(&dir.path().join("fallback.csv"), &fallback);

    // The same two runs through burn-train's Learner (training on the first 95 % of the text,
    // validation on the rest): one row per step, falling losses, the same agreement, and the
    // flash run's attention (training and validation) on the kernels.
    let learner = |name: &str| LearnerConfig {
        train: config.clone(),
        artifact_dir: dir.path().join(name),
        multi_device: false,
        csv: Some(dir.path().join(format!("learner-{name}.csv"))),
    };
    let memory = MemoryProbe::<Runtime>::start(&device);
    let fallback = train_with_learner::<Train, _>(&learner("fallback"), Corpus::generated(), vec![device.clone()], memory)
        .expect("fallback Learner run");
    let before = burn_flash_attn::route_counts();
    let memory = MemoryProbe::<Runtime>::start(&device);
    let flash = train_with_learner::<FlashTrain, _>(&learner("flash"), Corpus::generated(), vec![device.clone()], memory)
        .expect("flash Learner run");
    let after = burn_flash_attn::route_counts();
    println!("Learner, seed {SEED}: fallback {:?}", losses(&fallback));
    println!("Learner, seed {SEED}: flash    {:?}", losses(&flash));
    assert!(after.kernel - before.kernel >= attention_calls, "the Learner's steps ran the kernels");
    assert_eq!(after.fallback, before.fallback, "no attention fell back under the Learner");
    for (name, run) in [("fallback", &fallback), ("flash", &flash)] {
        assert_eq!(run.len(), STEPS, "{name}: one row per Learner step");
        let drop = run[0].loss - run[STEPS - 1].loss;
        assert!(drop >= MIN_LOSS_DROP, "{name} (Learner): loss fell by {drop:.3}");
        assert!(run.iter().all(|r| r.peak_memory_mib > 0.0 && r.tokens_per_s > 0.0), "{name}: no step stats");
    }
    let gap = loss_gap(&fallback, &flash, STEPS).expect("common steps");
    assert!(gap.max_abs <= LOSS_TOLERANCE, "Learner: losses differ by {:.3e}", gap.max_abs);
    assert!(dir.path().join("flash/checkpoint").is_dir(), "the Learner wrote its checkpoint");
    assert_csv_holds(&dir.path().join("learner-flash.csv"), &flash);

    // burn-train's multi-device strategy on one device (what `--devices N` runs on N GPUs, here
    // with N = 1): the same steps, the same losses as the single-device strategy.
    let multi = LearnerConfig { multi_device: true, ..learner("flash-multi") };
    let memory = MemoryProbe::<Runtime>::start(&device);
    let flash_multi = train_with_learner::<FlashTrain, _>(&multi, Corpus::generated(), vec![device.clone()], memory)
        .expect("flash Learner run, multi-device strategy");
    println!("Learner, multi-device strategy on 1 device: flash {:?}", losses(&flash_multi));
    assert_eq!(flash_multi.len(), STEPS, "multi-device: one row per step");
    let gap = loss_gap(&flash, &flash_multi, STEPS).expect("common steps");
    assert!(gap.max_abs <= LOSS_TOLERANCE, "multi-device vs single-device: losses differ by {:.3e}", gap.max_abs);
}

/// The CSV at `path` has one row per step of `run`, with its step numbers and losses.
fn assert_csv_holds(path: &std::path::Path, run: &[StepRecord]) {
    let written = read_csv(path).expect("the run's CSV");
    assert_eq!(written.len(), STEPS, "{}: one row per step", path.display());
    for (read, run) in written.iter().zip(run) {
        assert_eq!(read.step, run.step);
        let (read, run) = (read.loss, run.loss);
        assert!((read - run).abs() <= CSV_LOSS_PRECISION, "{}: CSV loss {read} vs {run}", path.display());
    }
}

#[test]
fn plot_draws_a_png_with_and_without_a_font() {
    let dir = tempfile::tempdir().expect("temp dir");
    let record = |step: usize, loss: f64| StepRecord {
        step,
        loss,
        ms_per_step: 10.0 + step as f64,
        tokens_per_s: 1000.0,
        peak_memory_mib: 1.0,
    };
    let series = |name: &str, offset: f64| Series {
        name: name.into(),
        records: (1..=20).map(|s| record(s, 5.0 - 0.1 * s as f64 + offset)).collect(),
    };
    let runs = [series("flash", 0.0), series("fallback", 0.01)];
    let no_text = dir.path().join("no_text.png");
    plot(&runs, &no_text, false).expect("plot without text");
    let with_text = dir.path().join("text.png");
    let has_font = load_font(std::path::Path::new(DEFAULT_FONT));
    plot(&runs, &with_text, has_font).expect("plot");
    for png in [no_text, with_text] {
        let bytes = std::fs::read(&png).expect("png written");
        assert!(bytes.starts_with(b"\x89PNG"), "{} is a PNG", png.display());
    }
}
