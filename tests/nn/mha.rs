//! `nn::MultiHeadAttention` against burn-nn's: records both ways, outputs under each mask and
//! quiet softmax (FlashAttention rule against the f64 oracle, burn-nn in f32 as the plain
//! implementation) on the plain backend and on `Flash` (kernel route), the opt-in weights, the
//! fully masked row, cached decoding and the attention dropout's seed stream.
use burn::config::{Config, config_to_json};
use burn::module::Module;
use burn::nn::attention as theirs;
use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Recorder};
use burn::tensor::{TensorData, backend::Backend};
use burn_flash_attn::nn::{MhaCache, MhaInput, MultiHeadAttention, MultiHeadAttentionConfig, seed_dropout};
use serial_test::serial;

use crate::oracle::HostMha;
use crate::support::*;

const SEQ_Q: usize = 13;
const SEQ_KV: usize = 19;

/// burn-nn's module, initialized from a fixed seed.
fn burn_nn_mha(config: &theirs::MultiHeadAttentionConfig) -> theirs::MultiHeadAttention<Inner> {
    let device = Default::default();
    Inner::seed(&device, INIT_SEED);
    materialized(config.init(&device))
}

/// Ours on `B` with the parameters of `module`, through the bytes of a saved record.
fn ours_from<B: Backend>(module: &theirs::MultiHeadAttention<Inner>) -> MultiHeadAttention<B> {
    let config: MultiHeadAttentionConfig = burn_nn_config(module).into();
    config.init::<B>(&Default::default()).load_record(through_bytes::<Inner, B, _, _>(module.clone().into_record()))
}

fn burn_nn_config(module: &theirs::MultiHeadAttention<Inner>) -> theirs::MultiHeadAttentionConfig {
    theirs::MultiHeadAttentionConfig::new(module.d_model, module.n_heads)
        .with_dropout(module.dropout.prob)
        .with_quiet_softmax(module.quiet_softmax)
}

/// The inputs of one comparison: query `[batch, seq_q, d_model]`, key and value `[batch,
/// seq_kv, d_model]`, the masks.
struct Inputs {
    query: TensorData,
    key: TensorData,
    value: TensorData,
    pad: Option<TensorData>,
    attn: Option<TensorData>,
}

impl Inputs {
    fn new(seq_q: usize, seq_kv: usize, pad: bool, attn: bool, seed: u64) -> Self {
        Self {
            query: random_data([BATCH, seq_q, D_MODEL], seed),
            key: random_data([BATCH, seq_kv, D_MODEL], seed + 1),
            value: random_data([BATCH, seq_kv, D_MODEL], seed + 2),
            pad: pad.then(|| padding_mask(&[seq_kv, seq_kv - 6], seq_kv)),
            attn: attn.then(|| attention_mask(BATCH, seq_q, seq_kv, 0.3, seed + 3)),
        }
    }

    fn ours<B: Backend>(&self) -> MhaInput<B> {
        let mut input = MhaInput::new(float(&self.query), float(&self.key), float(&self.value));
        if let Some(pad) = &self.pad {
            input = input.mask_pad(bool(pad));
        }
        if let Some(attn) = &self.attn {
            input = input.mask_attn(bool(attn));
        }
        input
    }

    fn theirs<B: Backend>(&self) -> theirs::MhaInput<B> {
        let mut input = theirs::MhaInput::new(float(&self.query), float(&self.key), float(&self.value));
        if let Some(pad) = &self.pad {
            input = input.mask_pad(bool(pad));
        }
        if let Some(attn) = &self.attn {
            input = input.mask_attn(bool(attn));
        }
        input
    }

    fn oracle<B: Backend>(&self, module: &theirs::MultiHeadAttention<B>) -> Vec<f64> {
        let masked = masked_by(self.pad.as_ref(), self.attn.as_ref());
        HostMha::new(module).forward(BATCH, &rows(&self.query), &rows(&self.key), &rows(&self.value), &masked).data
    }
}

/// Ours on the plain backend and on `Flash` meets the rule against the oracle, with burn-nn's
/// output as the plain implementation.
fn matches_burn_nn(name: &str, seq_q: usize, seq_kv: usize, pad: bool, attn: bool, quiet: bool) {
    let module = burn_nn_mha(&theirs::MultiHeadAttentionConfig::new(D_MODEL, HEADS).with_quiet_softmax(quiet));
    let inputs = Inputs::new(seq_q, seq_kv, pad, attn, 7);
    let reference = inputs.oracle(&module);
    let plain = to_f64(module.forward(inputs.theirs()).context);

    let ours = ours_from::<Inner>(&module).forward(inputs.ours());
    assert!(ours.weights.is_none(), "{name}: weights computed by default");
    assert_rule(&format!("{name} (plain backend)"), &to_f64(ours.context), &plain, &reference);

    let flash = ours_from::<FlashInner>(&module).forward(inputs.ours());
    assert_kernel_route(name);
    assert_rule(&format!("{name} (flash)"), &to_f64(flash.context), &plain, &reference);
}

#[test]
#[serial]
fn mha_cross_q13_kv19_no_mask() {
    matches_burn_nn("mha_cross_q13_kv19_no_mask", SEQ_Q, SEQ_KV, false, false, false);
}

#[test]
#[serial]
fn mha_cross_q13_kv19_mask_pad() {
    matches_burn_nn("mha_cross_q13_kv19_mask_pad", SEQ_Q, SEQ_KV, true, false, false);
}

#[test]
#[serial]
fn mha_cross_q13_kv19_mask_attn() {
    matches_burn_nn("mha_cross_q13_kv19_mask_attn", SEQ_Q, SEQ_KV, false, true, false);
}

#[test]
#[serial]
fn mha_self_q19_mask_pad_and_attn() {
    matches_burn_nn("mha_self_q19_mask_pad_and_attn", SEQ_KV, SEQ_KV, true, true, false);
}

#[test]
#[serial]
fn mha_cross_q13_kv19_quiet_softmax_mask_pad_and_attn() {
    matches_burn_nn("mha_cross_q13_kv19_quiet_softmax_mask_pad_and_attn", SEQ_Q, SEQ_KV, true, true, true);
}

/// burn-nn → ours → burn-nn keeps every parameter bit for bit, through `into_record` (`From`),
/// through a positional (bincode) and a named (MessagePack) recorder, and module `From`; the
/// configs' JSON is the same.
#[test]
#[serial]
fn mha_record_round_trips() {
    let device = Default::default();
    let module = burn_nn_mha(&theirs::MultiHeadAttentionConfig::new(D_MODEL, HEADS));
    let expected = parameters(&module);
    let config: MultiHeadAttentionConfig = burn_nn_config(&module).into();
    assert_eq!(config_to_json(&config), config_to_json(&burn_nn_config(&module)));
    assert_eq!(
        config_to_json(&MultiHeadAttentionConfig::load_binary(config_to_json(&burn_nn_config(&module)).as_bytes()).unwrap()),
        config_to_json(&config),
        "burn-nn's config JSON loads as ours"
    );

    let fresh = || config.init::<Inner>(&device);
    let in_memory = fresh().load_record(module.clone().into_record().into());
    assert_eq!(parameters(&in_memory), expected, "into_record + From");

    let bincode = ours_from::<Inner>(&module);
    assert_eq!(parameters(&bincode), expected, "BinBytesRecorder");

    let named = NamedMpkBytesRecorder::<FullPrecisionSettings>::default();
    let bytes = Recorder::<Inner>::record(&named, module.clone().into_record(), ()).unwrap();
    let named_loaded = fresh().load_record(Recorder::<Inner>::load(&named, bytes, &device).unwrap());
    assert_eq!(parameters(&named_loaded), expected, "NamedMpkBytesRecorder");

    let back = burn_nn_config(&module).init::<Inner>(&device).load_record(through_bytes::<Inner, Inner, _, _>(bincode.into_record()));
    assert_eq!(parameters(&back), expected, "ours -> bytes -> burn-nn");
    let back: theirs::MultiHeadAttention<Inner> = in_memory.into();
    assert_eq!(parameters(&back), expected, "module From");
}

/// In bf16: burn-nn's f32 record → bytes → burn-nn in bf16 (the plain implementation) and ours
/// on `Flash<bf16>` → bytes → burn-nn in bf16 again, every parameter bit for bit; ours meets
/// the rule against the f64 oracle of the bf16 parameters and inputs (both masks).
#[test]
#[serial]
fn mha_bf16_record_round_trips_and_outputs_meet_the_rule() {
    let name = "mha_bf16_record_round_trips_and_outputs_meet_the_rule";
    if !bf16_supported(name) {
        return;
    }
    let device = Default::default();
    let module = burn_nn_mha(&theirs::MultiHeadAttentionConfig::new(D_MODEL, HEADS));
    let (theirs_bf16, flash) = bf16_round_trip(name, &module, || burn_nn_config(&module).init::<Bf16>(&device), ours_from::<FlashBf16>(&module));

    let mut inputs = Inputs::new(SEQ_Q, SEQ_KV, true, true, 17);
    for data in [&mut inputs.query, &mut inputs.key, &mut inputs.value] {
        *data = bf16_rounded(data);
    }
    let reference = inputs.oracle(&theirs_bf16);
    let plain = to_f64(theirs_bf16.forward(inputs.theirs()).context);
    let ours = to_f64(flash.forward(inputs.ours()).context);
    assert_kernel_route(name);
    assert_rule_bf16(name, &ours, &plain, &reference);
}

/// `forward_with_weights` gives burn-nn's weights (where no row is fully masked) and
/// `forward`'s context.
#[test]
#[serial]
fn mha_forward_with_weights_matches_burn_nn_weights() {
    let module = burn_nn_mha(&theirs::MultiHeadAttentionConfig::new(D_MODEL, HEADS));
    let inputs = Inputs::new(SEQ_Q, SEQ_KV, true, true, 11);
    let theirs = module.forward(inputs.theirs());
    let flash = ours_from::<FlashInner>(&module);
    let ours = flash.forward_with_weights(inputs.ours());
    let weights = ours.weights.expect("weights requested");
    assert_eq!(weights.dims(), [BATCH, HEADS, SEQ_Q, SEQ_KV]);
    // Both are f32 softmaxes of the same scores: burn-nn's −1e4 fill and our −inf both give an
    // exact 0 after exp; what is left is the rounding of the score matmuls and of the two
    // softmaxes, a few ulps of 1 (1.2e-7 each). 1e-5 is ~80 ulps.
    let weight_error = max_diff(&to_f64(weights), &to_f64(theirs.weights));
    assert!(weight_error <= 1e-5, "weights differ by {weight_error:e}");
    let context = to_f64(flash.forward(inputs.ours()).context);
    assert_eq!(to_f64(ours.context), context, "forward_with_weights' context is forward's");
}

/// A row whose keys are all padded: ours attends to nothing (context = the output layer's bias),
/// burn-nn's `min_float` fill gives the row uniform weights (the mean of all values).
#[test]
#[serial]
fn mha_fully_masked_row_attends_to_nothing() {
    let module = burn_nn_mha(&theirs::MultiHeadAttentionConfig::new(D_MODEL, HEADS));
    let mut inputs = Inputs::new(SEQ_Q, SEQ_KV, false, false, 13);
    inputs.pad = Some(padding_mask(&[SEQ_KV, 0], SEQ_KV));
    let bias = to_f64(module.output.bias.as_ref().expect("a bias").val());
    let row_of_batch_1 = |context: Vec<f64>| context[SEQ_Q * D_MODEL..SEQ_Q * D_MODEL + D_MODEL].to_vec();

    for ours in [
        to_f64(ours_from::<Inner>(&module).forward(inputs.ours()).context),
        to_f64(ours_from::<FlashInner>(&module).forward(inputs.ours()).context),
    ] {
        assert_eq!(row_of_batch_1(ours), bias, "ours: attention 0, then the output layer's bias");
    }

    let context = to_f64(module.forward(inputs.theirs()).context);
    let theirs = row_of_batch_1(context.clone());
    let uniform = HostMha::new(&module).mean_value_output(BATCH, &rows(&inputs.value));
    // burn-nn's scores of the row are all exactly −1e4 in f32: its weights are exactly uniform,
    // and with exact f32 products the sums of 19 values round within a few ulps of the f64
    // mean (1e-5). Where the backend's matmuls round more coarsely (TF32 on CUDA), the row
    // carries that rounding: burn-nn's error on batch 0's rows (no key padded) against the f64
    // oracle, measured here, twice (the rule's factor), is added.
    let batch_0 = SEQ_Q * D_MODEL;
    let plain_error = max_diff(&context[..batch_0], &inputs.oracle(&module)[..batch_0]);
    let error = max_diff(&theirs, uniform.row(1));
    let bound = 1e-5 + 2.0 * plain_error;
    assert!(error <= bound, "burn-nn's fully masked row is not the output of the mean value: {error:e} (bound {bound:e})");
}

fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    burn_flash_attn::kernels::tolerance::worst(a, b).1
}

/// `forward_cache` over the sequence `x` (self-attention), `steps` new rows per call: one row
/// without a mask (burn-nn's convention), several with the causal mask of the sequence so far.
fn decode<B: Backend>(module: &MultiHeadAttention<B>, x: &TensorData, steps: &[usize]) -> Vec<f64> {
    let mut cache = MhaCache::autoregressive();
    let (mut end, mut context) = (0, None);
    for &rows in steps {
        end += rows;
        let mut input = MhaInput::self_attn(float::<B, 3>(x).slice([0..BATCH, 0..end, 0..D_MODEL]));
        if rows > 1 {
            input = input.mask_attn(bool(&causal_mask(BATCH, end)));
        }
        context = Some(module.forward_cache(input, &mut cache).context);
    }
    to_f64(context.expect("a step"))
}

/// Decoding with `MhaCache` gives the rows of the full causal attention, on the plain backend
/// and on `Flash`, one row per call or several.
#[test]
#[serial]
fn mha_cache_decoding_equals_full_causal_q17() {
    const SEQ: usize = 17;
    let module = burn_nn_mha(&theirs::MultiHeadAttentionConfig::new(D_MODEL, HEADS));
    let x = random_data([BATCH, SEQ, D_MODEL], 17);
    let causal = causal_mask(BATCH, SEQ);
    let masked = masked_by(None, Some(&causal));
    let reference = HostMha::new(&module).forward(BATCH, &rows(&x), &rows(&x), &rows(&x), &masked).data;
    let plain = to_f64(module.forward(theirs::MhaInput::self_attn(float(&x)).mask_attn(bool(&causal))).context);

    for steps in [vec![1; SEQ], vec![5, 1, 4, 7]] {
        let name = format!("mha cache, steps {steps:?}");
        let ours = decode(&ours_from::<Inner>(&module), &x, &steps);
        assert_rule(&format!("{name} (plain backend)"), &ours, &plain, &reference);
        let flash = decode(&ours_from::<FlashInner>(&module), &x, &steps);
        assert_kernel_route(&name);
        assert_rule(&format!("{name} (flash)"), &flash, &plain, &reference);
    }
}

/// `MhaCache::autoregressive_cross_attention`: the query grows one row per call, the keys and
/// values are a padded memory projected once; the rows equal the full cross-attention.
#[test]
#[serial]
fn mha_cross_attention_cache_equals_full_q13_kv19_mask_pad() {
    let module = burn_nn_mha(&theirs::MultiHeadAttentionConfig::new(D_MODEL, HEADS));
    let inputs = Inputs::new(SEQ_Q, SEQ_KV, true, false, 19);
    let reference = inputs.oracle(&module);
    let plain = to_f64(module.forward(inputs.theirs()).context);
    let flash = ours_from::<FlashInner>(&module);
    let mut cache = MhaCache::autoregressive_cross_attention();
    let mut context = None;
    for end in 1..=SEQ_Q {
        let query = float::<FlashInner, 3>(&inputs.query).slice([0..BATCH, 0..end, 0..D_MODEL]);
        let input = MhaInput::new(query, float(&inputs.key), float(&inputs.value)).mask_pad(bool(inputs.pad.as_ref().unwrap()));
        context = Some(flash.forward_cache(input, &mut cache).context);
    }
    assert_kernel_route("mha cross-attention cache");
    assert_rule("mha cross-attention cache", &to_f64(context.unwrap()), &plain, &reference);
}

/// In training the attention dropout applies to the probabilities with a seed per call from
/// the `seed_dropout` stream: the same seed gives the same output, on the kernels and on the
/// Burn-ops path (the same mask), another seed another; inference has none.
#[test]
#[serial]
fn mha_dropout_follows_seed_dropout_on_kernels_and_burn_ops() {
    const DROPOUT: f64 = 0.25;
    let module = burn_nn_mha(&theirs::MultiHeadAttentionConfig::new(D_MODEL, HEADS).with_dropout(DROPOUT));
    let inputs = Inputs::new(SEQ_Q, SEQ_KV, true, false, 23);
    let flash = ours_from::<FlashTrain>(&module);
    let plain = ours_from::<Train>(&module);
    let first = seeded_forward(&flash, &inputs, 5);
    assert_kernel_route("mha dropout");
    assert_eq!(first, seeded_forward(&flash, &inputs, 5), "same seed, same output");
    assert!(max_diff(&first, &seeded_forward(&flash, &inputs, 6)) > 1e-3, "another seed, another mask");
    let inference = to_f64(ours_from::<FlashInner>(&module).forward(inputs.ours()).context);
    assert!(max_diff(&first, &inference) > 1e-3, "dropout is active in training");
    // Same mask, two implementations: with exact f32 products they differ by ~1e-7 (1e-5
    // bounds it). Where the backend's matmuls round more coarsely (TF32 on CUDA) they differ
    // by that rounding, measured here without dropout (the kernels against the Burn-ops path,
    // inference) and scaled by the kept entries' 1 / (1 - p); twice that (the rule's factor)
    // is added. Another mask moves the output by more than 1e-3 (asserted above).
    let noise = max_diff(&inference, &to_f64(ours_from::<Inner>(&module).forward(inputs.ours()).context));
    let error = max_diff(&first, &seeded_forward(&plain, &inputs, 5));
    let bound = 1e-5 + 2.0 * noise / (1.0 - DROPOUT);
    assert!(error <= bound, "kernels and Burn ops drew different masks: {error:e} (bound {bound:e})");
}

/// Burn's `B::seed` on a `Flash` backend restarts the same stream: the output after
/// `FlashTrain::seed(device, s)` is the output after `seed_dropout(s)`.
#[test]
#[serial]
fn mha_dropout_follows_the_flash_backends_seed() {
    let module = burn_nn_mha(&theirs::MultiHeadAttentionConfig::new(D_MODEL, HEADS).with_dropout(0.25));
    let inputs = Inputs::new(SEQ_Q, SEQ_KV, true, false, 29);
    let flash = ours_from::<FlashTrain>(&module);
    let expected = seeded_forward(&flash, &inputs, 9);
    seed_dropout(10);
    FlashTrain::seed(&Default::default(), 9);
    assert_eq!(to_f64(flash.forward(inputs.ours()).context), expected, "B::seed restarts the dropout seeds");
}

fn seeded_forward<B: Backend>(module: &MultiHeadAttention<B>, inputs: &Inputs, seed: u64) -> Vec<f64> {
    seed_dropout(seed);
    to_f64(module.forward(inputs.ours()).context)
}
