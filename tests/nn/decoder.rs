//! `nn::TransformerDecoder` against burn-nn's: records both ways, outputs with target and
//! memory masks (pre- and post-norm), autoregressive inference against the full causal
//! computation.
use burn::module::Module;
use burn::nn::transformer as theirs;
use burn::tensor::{TensorData, backend::Backend};
use burn_flash_attn::nn::{TransformerDecoder, TransformerDecoderConfig, TransformerDecoderInput};
use serial_test::serial;

use crate::oracle::HostDecoder;
use crate::support::*;

const SEQ: usize = 13;
const SEQ_MEMORY: usize = 19;
const D_FF: usize = 96;
const LAYERS: usize = 2;
/// burn-nn's default layer norm epsilon, which the configs here keep.
const LAYER_NORM_EPS: f64 = 1e-5;

fn config(norm_first: bool) -> theirs::TransformerDecoderConfig {
    theirs::TransformerDecoderConfig::new(D_MODEL, D_FF, HEADS, LAYERS).with_norm_first(norm_first).with_dropout(0.0)
}

fn burn_nn_decoder(config: &theirs::TransformerDecoderConfig) -> theirs::TransformerDecoder<Inner> {
    let device = Default::default();
    Inner::seed(&device, INIT_SEED);
    materialized(config.init(&device))
}

/// Ours on `B` with the parameters of `module`, through the bytes of a saved record.
fn ours_from<B: Backend>(config: &theirs::TransformerDecoderConfig, module: &theirs::TransformerDecoder<Inner>) -> TransformerDecoder<B> {
    let config: TransformerDecoderConfig = config.clone().into();
    config.init::<B>(&Default::default()).load_record(through_bytes::<Inner, B, _, _>(module.clone().into_record()))
}

/// A target, a memory and their masks: causal self-attention over a padded target, a padded
/// memory.
struct Inputs {
    target: TensorData,
    memory: TensorData,
    target_pad: TensorData,
    causal: TensorData,
    memory_pad: TensorData,
}

impl Inputs {
    fn new(seed: u64) -> Self {
        Self {
            target: random_data([BATCH, SEQ, D_MODEL], seed),
            memory: random_data([BATCH, SEQ_MEMORY, D_MODEL], seed + 1),
            target_pad: padding_mask(&[SEQ, SEQ - 3], SEQ),
            causal: causal_mask(BATCH, SEQ),
            memory_pad: padding_mask(&[SEQ_MEMORY - 5, SEQ_MEMORY], SEQ_MEMORY),
        }
    }

    fn oracle<B: Backend>(&self, module: &theirs::TransformerDecoder<B>) -> Vec<f64> {
        let target_masked = masked_by(Some(&self.target_pad), Some(&self.causal));
        let memory_masked = masked_by(Some(&self.memory_pad), None);
        HostDecoder::new(module, LAYER_NORM_EPS)
            .forward(BATCH, &rows(&self.target), &rows(&self.memory), &target_masked, &memory_masked)
            .data
    }

    fn ours<B: Backend>(&self) -> TransformerDecoderInput<B> {
        TransformerDecoderInput::new(float(&self.target), float(&self.memory))
            .target_mask_pad(bool(&self.target_pad))
            .target_mask_attn(bool(&self.causal))
            .memory_mask_pad(bool(&self.memory_pad))
    }

    fn theirs<B: Backend>(&self) -> theirs::TransformerDecoderInput<B> {
        theirs::TransformerDecoderInput::new(float(&self.target), float(&self.memory))
            .target_mask_pad(bool(&self.target_pad))
            .target_mask_attn(bool(&self.causal))
            .memory_mask_pad(bool(&self.memory_pad))
    }
}

fn matches_burn_nn(name: &str, norm_first: bool) {
    let config = config(norm_first);
    let module = burn_nn_decoder(&config);
    let inputs = Inputs::new(61);
    let reference = inputs.oracle(&module);
    let plain = to_f64(module.forward(inputs.theirs()));
    let ours = to_f64(ours_from::<Inner>(&config, &module).forward(inputs.ours()));
    assert_rule(&format!("{name} (plain backend)"), &ours, &plain, &reference);
    let flash = to_f64(ours_from::<FlashInner>(&config, &module).forward(inputs.ours()));
    assert_kernel_route(name);
    assert_rule(&format!("{name} (flash)"), &flash, &plain, &reference);
}

/// In bf16 (pre-norm, causal and padded target, padded memory): burn-nn's f32 record → bytes →
/// burn-nn in bf16 and ours on `Flash<bf16>` → bytes → burn-nn in bf16, every parameter bit for
/// bit; ours meets the rule against the f64 oracle of the bf16 parameters and inputs, burn-nn in
/// bf16 as the plain one.
#[test]
#[serial]
fn decoder_bf16_record_round_trips_and_outputs_meet_the_rule() {
    let name = "decoder_bf16_record_round_trips_and_outputs_meet_the_rule";
    if !bf16_supported(name) {
        return;
    }
    let device = Default::default();
    let config = config(true);
    let module = burn_nn_decoder(&config);
    let (theirs_bf16, flash) = bf16_round_trip(name, &module, || config.init::<Bf16>(&device), ours_from::<FlashBf16>(&config, &module));

    let mut inputs = Inputs::new(65);
    inputs.target = bf16_rounded(&inputs.target);
    inputs.memory = bf16_rounded(&inputs.memory);
    let reference = inputs.oracle(&theirs_bf16);
    let plain = to_f64(theirs_bf16.forward(inputs.theirs()));
    let ours = to_f64(flash.forward(inputs.ours()));
    assert_kernel_route(name);
    assert_rule_bf16(name, &ours, &plain, &reference);
}

#[test]
#[serial]
fn decoder_post_norm_q13_memory19_causal_and_pads() {
    matches_burn_nn("decoder_post_norm_q13_memory19_causal_and_pads", false);
}

#[test]
#[serial]
fn decoder_pre_norm_q13_memory19_causal_and_pads() {
    matches_burn_nn("decoder_pre_norm_q13_memory19_causal_and_pads", true);
}

/// burn-nn → ours → burn-nn keeps every parameter bit for bit, in memory (`From` of records
/// and modules) and through saved bytes.
#[test]
#[serial]
fn decoder_record_round_trips() {
    let device = Default::default();
    let config = config(false);
    let module = burn_nn_decoder(&config);
    let expected = parameters(&module);
    let ours_config: TransformerDecoderConfig = config.clone().into();

    let in_memory = ours_config.init::<Inner>(&device).load_record(module.clone().into_record().into());
    assert_eq!(parameters(&in_memory), expected, "into_record + From");
    let bytes = ours_from::<Inner>(&config, &module);
    assert_eq!(parameters(&bytes), expected, "BinBytesRecorder");
    let back = config.init::<Inner>(&device).load_record(through_bytes::<Inner, Inner, _, _>(bytes.into_record()));
    assert_eq!(parameters(&back), expected, "ours -> bytes -> burn-nn");
    let back: theirs::TransformerDecoder<Inner> = in_memory.into();
    assert_eq!(parameters(&back), expected, "module From");
}

/// `forward_autoregressive_inference` over the target, `steps` new rows per call: one row
/// without a mask (burn-nn's convention), several with the causal mask of the sequence so far;
/// the memory and its padding every call.
fn decode<B: Backend>(module: &TransformerDecoder<B>, inputs: &Inputs, steps: &[usize]) -> Vec<f64> {
    let mut cache = module.new_autoregressive_cache();
    let (mut end, mut output) = (0, None);
    for &rows in steps {
        end += rows;
        let target = float::<B, 3>(&inputs.target).slice([0..BATCH, 0..end, 0..D_MODEL]);
        let mut input = TransformerDecoderInput::new(target, float(&inputs.memory)).memory_mask_pad(bool(&inputs.memory_pad));
        if rows > 1 {
            input = input.target_mask_attn(bool(&causal_mask(BATCH, end)));
        }
        output = Some(module.forward_autoregressive_inference(input, &mut cache));
    }
    to_f64(output.expect("a step"))
}

#[test]
#[serial]
fn decoder_autoregressive_equals_full_causal_q13_memory19() {
    let name = "decoder_autoregressive_equals_full_causal_q13_memory19";
    let config = config(false);
    let module = burn_nn_decoder(&config);
    let mut inputs = Inputs::new(71);
    // No target padding: decoding has none.
    inputs.target_pad = padding_mask(&[SEQ, SEQ], SEQ);
    let reference = inputs.oracle(&module);
    let plain = to_f64(module.forward(inputs.theirs()));
    for steps in [vec![1; SEQ], vec![4, 2, 5, 2]] {
        let flash = decode(&ours_from::<FlashInner>(&config, &module), &inputs, &steps);
        assert_kernel_route(name);
        assert_rule(&format!("{name}, steps {steps:?} (flash)"), &flash, &plain, &reference);
    }
    let ours = decode(&ours_from::<Inner>(&config, &module), &inputs, &[1; SEQ]);
    assert_rule(&format!("{name} (plain backend)"), &ours, &plain, &reference);
}
