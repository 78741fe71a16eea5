//! The classifier in miniature on the default runtime (WGPU: Mesa lavapipe in CI), through
//! burn-train's Learner: a few epochs of the `tiny` shape on generated texts. The loss falls,
//! one CSV row per step is written, and the attention ran where the build says: the fused
//! kernels with `--features flash` (burn-flash-attn's encoder on `Flash<Autodiff<Wgpu>>`),
//! none of them without (burn-nn's encoder on `Autodiff<Wgpu>`).
use burn::nn::transformer::TransformerEncoderConfig as BurnEncoderConfig;
use flash_classifier::{
    data::Texts,
    model::ClassifierConfig,
    training::{TrainConfig, train},
};
use flash_gpt::{
    backend::{Runtime, Selected, devices},
    memory::MemoryProbe,
};

/// Texts kept from the generated set: 11 training steps of 16 per epoch, so that the test
/// stays short on lavapipe.
const TEXTS: usize = 192;
const EPOCHS: usize = 2;
const BATCH: usize = 16;
/// Cross-entropy of a uniform guess over 4 classes is ln 4 = 1.39 nats; two epochs of AdamW on
/// texts whose topics have disjoint vocabularies must gain at least this much.
const MIN_LOSS_DROP: f64 = 0.2;

#[test]
fn tiny_classifier_trains_through_the_learner() {
    let mut texts = Texts::generated(5);
    texts.items.truncate(TEXTS);
    let encoder = BurnEncoderConfig::new(32, 64, 2, 1).with_dropout(0.1).with_norm_first(true);
    // The flash build's config type is burn-flash-attn's, converted from burn-nn's (the same
    // type without the feature, where the conversion is the identity).
    #[allow(clippy::useless_conversion)]
    let model = ClassifierConfig::new(encoder.into(), texts.num_classes(), 128);
    let artifacts = std::env::temp_dir().join(format!("flash-classifier-test-{}", std::process::id()));
    let config = TrainConfig {
        model,
        batch: BATCH,
        epochs: EPOCHS,
        seed: 11,
        learning_rate: 0.2,
        warmup_steps: 4,
        artifact_dir: artifacts.clone(),
        multi_device: false,
        csv: None,
    };
    let device = devices(1);
    let memory = MemoryProbe::<Runtime>::start(&device[0]);
    let before = burn_flash_attn::route_counts();
    let result = train::<Selected, _>(&config, texts, device, memory).expect("training runs");
    let after = burn_flash_attn::route_counts();
    let _ = std::fs::remove_dir_all(&artifacts);

    let steps_per_epoch = (TEXTS - TEXTS / 10).div_ceil(BATCH);
    assert_eq!(result.steps.len(), EPOCHS * steps_per_epoch, "one row per training step");
    let first = result.steps[0].loss;
    let last: f64 = result.steps[result.steps.len() - 3..].iter().map(|r| r.loss).sum::<f64>() / 3.0;
    assert!(first - last >= MIN_LOSS_DROP, "loss {first:.4} -> {last:.4}");
    assert!(result.valid_loss.is_finite() && (0.0..=1.0).contains(&result.valid_accuracy));
    let kernel_calls = after.kernel - before.kernel;
    if cfg!(feature = "flash") {
        assert!(kernel_calls > 0, "the flash build's encoder reaches the kernels");
        assert_eq!(after.fallback, before.fallback, "no attention fell back");
    } else {
        assert_eq!(kernel_calls, 0, "burn-nn's encoder never calls the kernels");
    }
}
