//! `nn::CrossAttention` against burn-nn's (grouped-query and multi-query heads): records both
//! ways, outputs with a context mask on the plain backend and on `Flash` (kernel route), the
//! cached keys and values.
use burn::config::config_to_json;
use burn::module::Module;
use burn::nn::attention as theirs;
use burn::tensor::backend::Backend;
use burn_flash_attn::nn::{CrossAttention, CrossAttentionCache, CrossAttentionConfig};
use serial_test::serial;

use crate::oracle::HostMha;
use crate::support::*;

const SEQ_Q: usize = 13;
const SEQ_CONTEXT: usize = 19;
const D_CONTEXT: usize = 48;
const D_HEAD: usize = 16;

fn config(n_heads_kv: usize) -> theirs::CrossAttentionConfig {
    theirs::CrossAttentionConfig::new(D_MODEL, D_CONTEXT, HEADS, n_heads_kv, D_HEAD).with_dropout(0.0)
}

fn burn_nn_cross(config: &theirs::CrossAttentionConfig) -> theirs::CrossAttention<Inner> {
    let device = Default::default();
    Inner::seed(&device, INIT_SEED);
    materialized(config.init(&device))
}

/// Ours on `B` with the parameters of `module`, through the bytes of a saved record.
fn ours_from<B: Backend>(config: &theirs::CrossAttentionConfig, module: &theirs::CrossAttention<Inner>) -> CrossAttention<B> {
    let config: CrossAttentionConfig = config.clone().into();
    config.init::<B>(&Default::default()).load_record(through_bytes::<Inner, B, _, _>(module.clone().into_record()))
}

fn matches_burn_nn(name: &str, n_heads_kv: usize) {
    let config = config(n_heads_kv);
    let module = burn_nn_cross(&config);
    let query = random_data([BATCH, SEQ_Q, D_MODEL], 81);
    let context = random_data([BATCH, SEQ_CONTEXT, D_CONTEXT], 82);
    let mask = padding_mask(&[SEQ_CONTEXT, SEQ_CONTEXT - 7], SEQ_CONTEXT);
    let masked = masked_by(Some(&mask), None);
    let (query_rows, context_rows) = (rows(&query), rows(&context));
    let reference = HostMha::cross(&module.clone().into_record(), &config)
        .forward(BATCH, &query_rows, &context_rows, &context_rows, &masked)
        .data;
    let plain = to_f64(module.forward(float(&query), float(&context), Some(bool(&mask))));

    let ours = ours_from::<Inner>(&config, &module).forward(float(&query), float(&context), Some(bool(&mask)));
    assert_rule(&format!("{name} (plain backend)"), &to_f64(ours), &plain, &reference);
    let flash = ours_from::<FlashInner>(&config, &module);
    let out = flash.forward(float(&query), float(&context), Some(bool(&mask)));
    assert_kernel_route(name);
    assert_rule(&format!("{name} (flash)"), &to_f64(out), &plain, &reference);

    let mut cache = CrossAttentionCache::new();
    for _ in 0..2 {
        let out = flash.forward_cache(float(&query), float(&context), Some(bool(&mask)), &mut cache);
        assert_rule(&format!("{name} (flash, cached keys and values)"), &to_f64(out), &plain, &reference);
    }
}

/// In bf16 (grouped-query, 4 heads over 2): burn-nn's f32 record → bytes → burn-nn in bf16 and
/// ours on `Flash<bf16>` → bytes → burn-nn in bf16, every parameter bit for bit; ours meets the
/// rule against the f64 oracle of the bf16 parameters and inputs, burn-nn in bf16 as the plain one.
#[test]
#[serial]
fn cross_attention_bf16_record_round_trips_and_outputs_meet_the_rule() {
    let name = "cross_attention_bf16_record_round_trips_and_outputs_meet_the_rule";
    if !bf16_supported(name) {
        return;
    }
    let device = Default::default();
    let config = config(2);
    let module = burn_nn_cross(&config);
    let (theirs_bf16, flash) = bf16_round_trip(name, &module, || config.init::<Bf16>(&device), ours_from::<FlashBf16>(&config, &module));

    let query = bf16_rounded(&random_data([BATCH, SEQ_Q, D_MODEL], 85));
    let context = bf16_rounded(&random_data([BATCH, SEQ_CONTEXT, D_CONTEXT], 86));
    let mask = padding_mask(&[SEQ_CONTEXT, SEQ_CONTEXT - 7], SEQ_CONTEXT);
    let masked = masked_by(Some(&mask), None);
    let context_rows = rows(&context);
    let reference = HostMha::cross(&theirs_bf16.clone().into_record(), &config)
        .forward(BATCH, &rows(&query), &context_rows, &context_rows, &masked)
        .data;
    let plain = to_f64(theirs_bf16.forward(float(&query), float(&context), Some(bool(&mask))));
    let ours = to_f64(flash.forward(float(&query), float(&context), Some(bool(&mask))));
    assert_kernel_route(name);
    assert_rule_bf16(name, &ours, &plain, &reference);
}

#[test]
#[serial]
fn cross_attention_gqa_h4_kv2_q13_context19_mask() {
    matches_burn_nn("cross_attention_gqa_h4_kv2_q13_context19_mask", 2);
}

#[test]
#[serial]
fn cross_attention_mqa_h4_kv1_q13_context19_mask() {
    matches_burn_nn("cross_attention_mqa_h4_kv1_q13_context19_mask", 1);
}

/// burn-nn's record → ours → burn-nn keeps every parameter bit for bit, in memory (`From` of
/// records) and through saved bytes; the configs' JSON is the same.
#[test]
#[serial]
fn cross_attention_record_round_trips() {
    let device = Default::default();
    let config = config(2);
    let module = burn_nn_cross(&config);
    let expected = parameters(&module);
    let ours_config: CrossAttentionConfig = config.clone().into();
    assert_eq!(config_to_json(&ours_config), config_to_json(&config));

    let in_memory = ours_config.init::<Inner>(&device).load_record(module.clone().into_record().into());
    assert_eq!(parameters(&in_memory), expected, "into_record + From");
    let bytes = ours_from::<Inner>(&config, &module);
    assert_eq!(parameters(&bytes), expected, "BinBytesRecorder");
    let back = config.init::<Inner>(&device).load_record(through_bytes::<Inner, Inner, _, _>(bytes.into_record()));
    assert_eq!(parameters(&back), expected, "ours -> bytes -> burn-nn");
    let back = config.init::<Inner>(&device).load_record(in_memory.into_record().into());
    assert_eq!(parameters(&back), expected, "ours -> record From -> burn-nn");
}
