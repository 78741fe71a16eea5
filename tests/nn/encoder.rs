//! `nn::TransformerEncoder` against burn-nn's: records both ways, outputs with both masks
//! (pre- and post-norm, quiet softmax), autoregressive inference against the full causal
//! computation, and one training step's gradients on `Flash<Autodiff<..>>`.
use burn::module::Module;
use burn::nn::transformer as theirs;
use burn::tensor::{Tensor, TensorData, backend::Backend};
use burn_flash_attn::nn::{TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput, seed_dropout};
use serial_test::serial;

use burn_flash_attn::kernels::tolerance::GRADIENT_FACTOR;

use crate::oracle::HostEncoder;
use crate::support::*;

const SEQ: usize = 15;
const D_FF: usize = 96;
const LAYERS: usize = 2;
/// burn-nn's default layer norm epsilon, which the configs here keep.
const LAYER_NORM_EPS: f64 = 1e-5;

fn config(norm_first: bool, quiet: bool) -> theirs::TransformerEncoderConfig {
    theirs::TransformerEncoderConfig::new(D_MODEL, D_FF, HEADS, LAYERS)
        .with_norm_first(norm_first)
        .with_quiet_softmax(quiet)
        .with_dropout(0.0)
}

fn burn_nn_encoder(config: &theirs::TransformerEncoderConfig) -> theirs::TransformerEncoder<Inner> {
    let device = Default::default();
    Inner::seed(&device, INIT_SEED);
    materialized(config.init(&device))
}

/// Ours on `B` with the parameters of `module`, through the bytes of a saved record.
fn ours_from<B: Backend>(config: &theirs::TransformerEncoderConfig, module: &theirs::TransformerEncoder<Inner>) -> TransformerEncoder<B> {
    let config: TransformerEncoderConfig = config.clone().into();
    config.init::<B>(&Default::default()).load_record(through_bytes::<Inner, B, _, _>(module.clone().into_record()))
}

fn ours_input<B: Backend>(x: &TensorData, pad: Option<&TensorData>, attn: Option<&TensorData>) -> TransformerEncoderInput<B> {
    let mut input = TransformerEncoderInput::new(float(x));
    if let Some(pad) = pad {
        input = input.mask_pad(bool(pad));
    }
    if let Some(attn) = attn {
        input = input.mask_attn(bool(attn));
    }
    input
}

fn theirs_input<B: Backend>(x: &TensorData, pad: Option<&TensorData>, attn: Option<&TensorData>) -> theirs::TransformerEncoderInput<B> {
    let mut input = theirs::TransformerEncoderInput::new(float(x));
    if let Some(pad) = pad {
        input = input.mask_pad(bool(pad));
    }
    if let Some(attn) = attn {
        input = input.mask_attn(bool(attn));
    }
    input
}

/// Ours on the plain backend and on `Flash` meets the rule against the f64 oracle, burn-nn's
/// output as the plain implementation.
fn matches_burn_nn(name: &str, norm_first: bool, quiet: bool) {
    let config = config(norm_first, quiet);
    let module = burn_nn_encoder(&config);
    let x = random_data([BATCH, SEQ, D_MODEL], 31);
    let pad = padding_mask(&[SEQ, SEQ - 4], SEQ);
    let attn = attention_mask(BATCH, SEQ, SEQ, 0.3, 32);
    let masked = masked_by(Some(&pad), Some(&attn));
    let reference = HostEncoder::new(&module, LAYER_NORM_EPS).forward(BATCH, &rows(&x), &masked).data;
    let plain = to_f64(module.forward(theirs_input(&x, Some(&pad), Some(&attn))));

    let ours = ours_from::<Inner>(&config, &module).forward(ours_input(&x, Some(&pad), Some(&attn)));
    assert_rule(&format!("{name} (plain backend)"), &to_f64(ours), &plain, &reference);
    let flash = ours_from::<FlashInner>(&config, &module).forward(ours_input(&x, Some(&pad), Some(&attn)));
    assert_kernel_route(name);
    assert_rule(&format!("{name} (flash)"), &to_f64(flash), &plain, &reference);
}

/// In bf16 (pre-norm, both masks): burn-nn's f32 record → bytes → burn-nn in bf16 and ours on
/// `Flash<bf16>` → bytes → burn-nn in bf16, every parameter bit for bit; ours meets the rule
/// against the f64 oracle of the bf16 parameters and inputs, burn-nn in bf16 as the plain one.
#[test]
#[serial]
fn encoder_bf16_record_round_trips_and_outputs_meet_the_rule() {
    let name = "encoder_bf16_record_round_trips_and_outputs_meet_the_rule";
    if !bf16_supported(name) {
        return;
    }
    let device = Default::default();
    let config = config(true, false);
    let module = burn_nn_encoder(&config);
    let (theirs_bf16, flash) = bf16_round_trip(name, &module, || config.init::<Bf16>(&device), ours_from::<FlashBf16>(&config, &module));

    let x = bf16_rounded(&random_data([BATCH, SEQ, D_MODEL], 35));
    let pad = padding_mask(&[SEQ, SEQ - 4], SEQ);
    let attn = attention_mask(BATCH, SEQ, SEQ, 0.3, 36);
    let masked = masked_by(Some(&pad), Some(&attn));
    let reference = HostEncoder::new(&theirs_bf16, LAYER_NORM_EPS).forward(BATCH, &rows(&x), &masked).data;
    let plain = to_f64(theirs_bf16.forward(theirs_input(&x, Some(&pad), Some(&attn))));
    let ours = to_f64(flash.forward(ours_input(&x, Some(&pad), Some(&attn))));
    assert_kernel_route(name);
    assert_rule_bf16(name, &ours, &plain, &reference);
}

#[test]
#[serial]
fn encoder_post_norm_q15_mask_pad_and_attn() {
    matches_burn_nn("encoder_post_norm_q15_mask_pad_and_attn", false, false);
}

#[test]
#[serial]
fn encoder_pre_norm_quiet_softmax_q15_mask_pad_and_attn() {
    matches_burn_nn("encoder_pre_norm_quiet_softmax_q15_mask_pad_and_attn", true, true);
}

/// burn-nn → ours → burn-nn keeps every parameter bit for bit, in memory (`From` of records
/// and modules) and through saved bytes.
#[test]
#[serial]
fn encoder_record_round_trips() {
    let device = Default::default();
    let config = config(false, false);
    let module = burn_nn_encoder(&config);
    let expected = parameters(&module);
    let ours_config: TransformerEncoderConfig = config.clone().into();

    let in_memory = ours_config.init::<Inner>(&device).load_record(module.clone().into_record().into());
    assert_eq!(parameters(&in_memory), expected, "into_record + From");
    let bytes = ours_from::<Inner>(&config, &module);
    assert_eq!(parameters(&bytes), expected, "BinBytesRecorder");
    let back = config.init::<Inner>(&device).load_record(through_bytes::<Inner, Inner, _, _>(bytes.into_record()));
    assert_eq!(parameters(&back), expected, "ours -> bytes -> burn-nn");
    let back: theirs::TransformerEncoder<Inner> = in_memory.into();
    assert_eq!(parameters(&back), expected, "module From");
}

/// `forward_autoregressive_inference` over `x`, `steps` new rows per call: one row without a
/// mask (burn-nn's convention), several with the causal mask of the sequence so far.
fn decode<B: Backend>(module: &TransformerEncoder<B>, x: &TensorData, steps: &[usize]) -> Vec<f64> {
    let mut cache = module.new_autoregressive_cache();
    let (mut end, mut output) = (0, None);
    for &rows in steps {
        end += rows;
        let mut input = TransformerEncoderInput::new(float::<B, 3>(x).slice([0..BATCH, 0..end, 0..D_MODEL]));
        if rows > 1 {
            input = input.mask_attn(bool(&causal_mask(BATCH, end)));
        }
        output = Some(module.forward_autoregressive_inference(input, &mut cache));
    }
    to_f64(output.expect("a step"))
}

fn autoregressive_equals_full_causal(name: &str, norm_first: bool) {
    let config = config(norm_first, false);
    let module = burn_nn_encoder(&config);
    let x = random_data([BATCH, SEQ, D_MODEL], 41);
    let causal = causal_mask(BATCH, SEQ);
    let masked = masked_by(None, Some(&causal));
    let reference = HostEncoder::new(&module, LAYER_NORM_EPS).forward(BATCH, &rows(&x), &masked).data;
    let plain = to_f64(module.forward(theirs_input(&x, None, Some(&causal))));
    for steps in [vec![1; SEQ], vec![4, 1, 6, 4]] {
        let flash = decode(&ours_from::<FlashInner>(&config, &module), &x, &steps);
        assert_kernel_route(name);
        assert_rule(&format!("{name}, steps {steps:?} (flash)"), &flash, &plain, &reference);
    }
    let ours = decode(&ours_from::<Inner>(&config, &module), &x, &[1; SEQ]);
    assert_rule(&format!("{name} (plain backend)"), &ours, &plain, &reference);
}

#[test]
#[serial]
fn encoder_autoregressive_equals_full_causal_post_norm_q15() {
    autoregressive_equals_full_causal("encoder_autoregressive_equals_full_causal_post_norm_q15", false);
}

#[test]
#[serial]
fn encoder_autoregressive_equals_full_causal_pre_norm_q15() {
    autoregressive_equals_full_causal("encoder_autoregressive_equals_full_causal_pre_norm_q15", true);
}

/// A training step through our encoder on `Flash<Autodiff<..>>` (the kernels' forward and
/// backward) gives burn-nn's gradients on `Autodiff<..>` (dropout 0), for every parameter and
/// the input.
#[test]
#[serial]
fn encoder_training_gradients_on_flash_autodiff_match_burn_nn() {
    let config = config(false, false);
    let module = burn_nn_encoder(&config);
    let x = random_data([BATCH, SEQ, D_MODEL], 51);
    let pad = padding_mask(&[SEQ, SEQ - 4], SEQ);
    let causal = causal_mask(BATCH, SEQ);
    let weights = random_data([BATCH, SEQ, D_MODEL], 52);

    let flash = ours_from::<FlashTrain>(&config, &module);
    let input = float::<FlashTrain, 3>(&x).require_grad();
    let output = flash.forward(TransformerEncoderInput::new(input.clone()).mask_pad(bool(&pad)).mask_attn(bool(&causal)));
    assert_kernel_route("encoder training");
    let grads = (output * float::<FlashTrain, 3>(&weights)).sum().backward();
    let mut ours = gradients(&flash, &grads);
    ours.push(to_f64(input.grad(&grads).expect("input gradient")));

    let masked = masked_by(Some(&pad), Some(&causal));
    let reference = HostEncoder::new(&module, LAYER_NORM_EPS).forward(BATCH, &rows(&x), &masked).data;
    let theirs = config.init::<Train>(&Default::default()).load_record(through_bytes::<Inner, Train, _, _>(module.into_record()));
    let input: Tensor<Train, 3> = float::<Train, 3>(&x).require_grad();
    let output = theirs.forward(theirs::TransformerEncoderInput::new(input.clone()).mask_pad(bool(&pad)).mask_attn(bool(&causal)));
    // burn-nn's relative forward error on this backend (f64 oracle): the rounding of its matmuls
    // (exact f32 products on lavapipe, TF32 inputs on CUDA), which its backward shares.
    let out_scale = reference.iter().fold(0.0f64, |m, o| m.max(o.abs()));
    let plain_forward = burn_flash_attn::kernels::tolerance::worst(&to_f64(output.clone()), &reference).1 / out_scale;
    let grads = (output * float::<Train, 3>(&weights)).sum().backward();
    let mut plain = gradients(&theirs, &grads);
    plain.push(to_f64(input.grad(&grads).expect("input gradient")));

    assert_eq!(ours.len(), plain.len());
    for (n, (ours, plain)) in ours.iter().zip(&plain).enumerate() {
        let scale = plain.iter().fold(0.0f64, |m, g| m.max(g.abs()));
        let (at, error, got, want) = burn_flash_attn::kernels::tolerance::worst(ours, plain);
        // Two implementations of the same gradients, summed in different orders (no f64
        // oracle of the encoder's backward here): in exact f32 arithmetic each entry is a sum
        // over ≤ 2·15·96 products through two layers, its rounding a few 1e-7 relative to the
        // largest gradient (4e-7 measured on lavapipe); 1e-4 of it leaves a margin of 250,
        // while a wrong mask or a missing term moves gradients by 1e-2 and more. Where the
        // backend's matmuls round more coarsely (TF32 on CUDA, 2^-11), burn-nn's gradients
        // carry its matmul rounding, measured as its relative forward error above: the rule's
        // 3x of that is added (on lavapipe it is ~1e-7, and the bound stays 1e-4).
        let bound = (GRADIENT_TOLERANCE + GRADIENT_FACTOR * plain_forward) * scale.max(1.0);
        assert!(error <= bound, "gradient {n}: |ours - plain| = {error:e} at {at} ({got} vs {want}), scale {scale:e}, bound {bound:e} (burn-nn's relative forward error {plain_forward:e})");
    }
}

/// See the comment at its use.
const GRADIENT_TOLERANCE: f64 = 1e-4;

/// Training with dropout (the residual paths' burn-nn `Dropout`s and the attention's, on the
/// kernels forward and backward) is reproducible: seeding Burn's RNG and `seed_dropout` before
/// a step repeats its gradients exactly.
#[test]
#[serial]
fn encoder_training_with_dropout_repeats_under_both_seeds() {
    let config = config(true, false).with_dropout(0.2);
    let module = burn_nn_encoder(&config);
    let flash = ours_from::<FlashTrain>(&config, &module);
    let x = random_data([BATCH, SEQ, D_MODEL], 91);
    let causal = causal_mask(BATCH, SEQ);
    let step = |seed: u64| {
        FlashTrain::seed(&Default::default(), seed);
        seed_dropout(seed);
        let output = flash.forward(ours_input(&x, None, Some(&causal)));
        gradients(&flash, &output.sum().backward())
    };
    let first = step(3);
    assert_kernel_route("encoder training with dropout");
    assert!(first.iter().flatten().all(|g| g.is_finite()), "finite gradients");
    assert_eq!(first, step(3), "same seeds, same gradients");
    assert_ne!(first, step(4), "other seeds, other gradients");
}
