//! Cases on layouts: batch and heads, strided inputs, mask and bias broadcast with stride 0.

use burn_flash_attn_kernels::FloatKind::{BF16, F16, F32};

use crate::case::case;

forward_cases! {
    // Batch and heads.
    f32_b2_h3_hd64_q113_kv203: case(F32, 64, 113, 203).heads(2, 3);
    f16_b2_h3_causal_hd64_q203_kv113: case(F16, 64, 203, 113).heads(2, 3).causal();
    f32_b3_h2_all_options_hd32_q40_kv50: case(F32, 32, 40, 50).heads(3, 2).softcap(2.0).mask().bias().causal();
    f16_b1_h5_masked_rows_hd64_q33_kv17: case(F16, 64, 33, 17).heads(1, 5).masked_rows();
    // Non-contiguous inputs: [b, s, h, d] storage viewed as [b, h, s, d], rows padded.
    f32_strided_hd64_q113_kv203: case(F32, 64, 113, 203).heads(2, 3).strided();
    f16_strided_hd64_q113_kv203: case(F16, 64, 113, 203).heads(2, 3).strided();
    f32_strided_causal_hd64_q203_kv113: case(F32, 64, 203, 113).heads(2, 2).strided().causal();
    f16_strided_mask_bias_hd64_q113_kv203: case(F16, 64, 113, 203).heads(2, 2).strided().mask().bias();
    f32_strided_all_options_hd33_dv80_q77_kv90: case(F32, 33, 77, 90).val_dim(80).heads(2, 2).strided().softcap(2.0).mask().bias().causal();
    bf16_strided_hd64_q113_kv203: case(BF16, 64, 113, 203).heads(2, 3).strided();
    // Mask and bias broadcast over batch and heads (stride 0), as `expand` gives them.
    f32_broadcast_mask_bias_b2_h3_hd32_q50_kv70: case(F32, 32, 50, 70).heads(2, 3).broadcast().mask().bias();
    f16_broadcast_masked_rows_causal_b2_h2_hd64_q70_kv50: case(F16, 64, 70, 50).heads(2, 2).broadcast().masked_rows().causal();
    f16_strided_broadcast_bias_b2_h2_hd48_q40_kv90: case(F16, 48, 40, 90).heads(2, 2).strided().broadcast().bias();
}
