//! Cases on options: scale, softcap, mask, bias, causal, quiet softmax, fully masked rows, and
//! combinations.

use burn_flash_attn_kernels::FloatKind::{BF16, F16, F32};

use crate::case::case;

forward_cases! {
    // Scale alone.
    f32_scale_hd64_q113_kv203: case(F32, 64, 113, 203).scale(0.3);
    f16_scale_hd64_q113_kv203: case(F16, 64, 113, 203).scale(0.3);
    f32_negative_scale_hd32_q50_kv60: case(F32, 32, 50, 60).scale(-0.2);
    // Softcap alone.
    f32_softcap_hd64_q113_kv203: case(F32, 64, 113, 203).softcap(1.5);
    f16_softcap_hd64_q113_kv203: case(F16, 64, 113, 203).softcap(1.5);
    f32_softcap_large_hd64_q100_kv90: case(F32, 64, 100, 90).softcap(30.0);
    bf16_softcap_hd64_q113_kv203: case(BF16, 64, 113, 203).softcap(1.5);
    // Mask alone.
    f32_mask_hd64_q113_kv203: case(F32, 64, 113, 203).mask();
    f16_mask_hd64_q113_kv203: case(F16, 64, 113, 203).mask();
    f16_mask_u8_hd64_q113_kv203: case(F16, 64, 113, 203).mask_u8();
    f32_mask_hd128_q64_kv64: case(F32, 128, 64, 64).mask();
    bf16_mask_hd64_q113_kv203: case(BF16, 64, 113, 203).mask();
    // Bias alone.
    f32_bias_hd64_q113_kv203: case(F32, 64, 113, 203).bias();
    f16_bias_hd64_q113_kv203: case(F16, 64, 113, 203).bias();
    f32_bias_hd64_q64_kv128: case(F32, 64, 64, 128).bias();
    bf16_bias_hd64_q113_kv203: case(BF16, 64, 113, 203).bias();
    // Causal alone: seq_q = seq_kv, seq_q < seq_kv, seq_q > seq_kv (leading rows see nothing).
    f32_causal_hd64_q128_kv128: case(F32, 64, 128, 128).causal();
    f16_causal_hd64_q128_kv128: case(F16, 64, 128, 128).causal();
    f32_causal_hd64_q113_kv203: case(F32, 64, 113, 203).causal();
    f16_causal_hd64_q113_kv203: case(F16, 64, 113, 203).causal();
    bf16_causal_hd64_q113_kv203: case(BF16, 64, 113, 203).causal();
    f32_causal_hd64_q203_kv113: case(F32, 64, 203, 113).causal();
    f16_causal_hd64_q203_kv113: case(F16, 64, 203, 113).causal();
    f32_causal_hd64_q64_kv1: case(F32, 64, 64, 1).causal();
    f16_causal_hd32_q1_kv64: case(F16, 32, 1, 64).causal();
    f32_causal_hd32_q1_kv1: case(F32, 32, 1, 1).causal();
    f32_causal_hd64_q1023_kv1024: case(F32, 64, 1023, 1024).causal();
    f16_causal_hd64_q1024_kv1023: case(F16, 64, 1024, 1023).causal();
    f16_causal_hd128_q1024_kv1024: case(F16, 128, 1024, 1024).causal();
    f32_causal_hd256_q300_kv257: case(F32, 256, 300, 257).causal();
    f16_causal_hd33_q77_kv500: case(F16, 33, 77, 500).causal();
    f32_causal_hd80_q500_kv77: case(F32, 80, 500, 77).causal();
    // Fully masked rows: through the mask, and through causal with seq_q > seq_kv.
    f32_masked_rows_hd64_q113_kv203: case(F32, 64, 113, 203).masked_rows();
    f16_masked_rows_hd64_q113_kv203: case(F16, 64, 113, 203).masked_rows();
    f32_masked_rows_bias_hd64_q64_kv40: case(F32, 64, 64, 40).masked_rows().bias();
    f16_masked_rows_causal_hd64_q203_kv113: case(F16, 64, 203, 113).masked_rows().causal();
    f32_masked_rows_softcap_hd32_q30_kv7: case(F32, 32, 30, 7).masked_rows().softcap(1.0);
    f32_causal_all_but_last_rows_hd64_q300_kv3: case(F32, 64, 300, 3).causal();
    // Quiet softmax alone and with the others: fully masked rows (output 0, lse 0), rows that
    // see no key (causal, seq_q > seq_kv), large logits (softcap 30 with a scale of 1).
    f32_quiet_hd64_q113_kv203: case(F32, 64, 113, 203).quiet();
    f16_quiet_hd64_q113_kv203: case(F16, 64, 113, 203).quiet();
    bf16_quiet_hd64_q113_kv203: case(BF16, 64, 113, 203).quiet();
    f32_quiet_masked_rows_hd64_q113_kv203: case(F32, 64, 113, 203).quiet().masked_rows();
    f16_quiet_causal_hd64_q203_kv113: case(F16, 64, 203, 113).quiet().causal();
    f32_quiet_causal_hd64_q203_kv113: case(F32, 64, 203, 113).quiet().causal();
    f16_quiet_causal_hd64_q113_kv203: case(F16, 64, 113, 203).quiet().causal();
    f32_quiet_causal_hd64_q300_kv3: case(F32, 64, 300, 3).quiet().causal();
    f32_quiet_large_logits_hd32_q50_kv60: case(F32, 32, 50, 60).quiet().scale(1.0).softcap(30.0);
    f32_quiet_all_options_hd33_dv80_q77_kv203: case(F32, 33, 77, 203).val_dim(80).quiet().scale(0.4).softcap(2.0).mask().bias().causal();
    f16_quiet_all_options_hd64_q203_kv113: case(F16, 64, 203, 113).quiet().softcap(2.0).masked_rows().bias().causal();
    // Options combined.
    f32_causal_mask_hd64_q113_kv203: case(F32, 64, 113, 203).causal().mask();
    f16_causal_mask_hd64_q203_kv113: case(F16, 64, 203, 113).causal().mask();
    f32_causal_bias_hd64_q113_kv203: case(F32, 64, 113, 203).causal().bias();
    f16_causal_bias_hd64_q203_kv113: case(F16, 64, 203, 113).causal().bias();
    f32_causal_softcap_hd64_q113_kv203: case(F32, 64, 113, 203).causal().softcap(2.0);
    f16_causal_softcap_hd64_q203_kv113: case(F16, 64, 203, 113).causal().softcap(2.0);
    f32_mask_bias_hd64_q113_kv203: case(F32, 64, 113, 203).mask().bias();
    f16_mask_bias_hd64_q113_kv203: case(F16, 64, 113, 203).mask().bias();
    f32_softcap_bias_hd64_q113_kv203: case(F32, 64, 113, 203).softcap(1.5).bias();
    f32_scale_softcap_hd64_q113_kv203: case(F32, 64, 113, 203).scale(0.5).softcap(3.0);
    f32_all_options_hd64_q113_kv203: case(F32, 64, 113, 203).scale(0.2).softcap(2.0).mask().bias().causal();
    f16_all_options_hd64_q203_kv113: case(F16, 64, 203, 113).scale(0.2).softcap(2.0).mask().bias().causal();
    f32_all_options_hd33_dv80_q77_kv203: case(F32, 33, 77, 203).val_dim(80).scale(0.4).softcap(2.0).mask().bias().causal();
    f16_all_options_hd127_q1023_kv1024: case(F16, 127, 1023, 1024).softcap(5.0).mask().bias().causal();
    bf16_all_options_hd64_q203_kv113: case(BF16, 64, 203, 113).softcap(2.0).mask().bias().causal();
    f16_all_options_u8_hd64_q113_kv203: case(F16, 64, 113, 203).softcap(2.0).mask_u8().bias().causal();
}
