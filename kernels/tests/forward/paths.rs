//! Cases forcing a path: the matrix (cmma) path and the mma (register mma) path.

use burn_flash_attn_kernels::FloatKind::{BF16, F16, F32};

use crate::case::case;

forward_cases! {
    // The matrix path, forced (skips where the device has no cmma for the dtype).
    f16_matrix_hd64_q113_kv203: case(F16, 64, 113, 203).matrix();
    f16_matrix_hd128_q1024_kv1024: case(F16, 128, 1024, 1024).matrix();
    f16_matrix_causal_hd64_q203_kv113: case(F16, 64, 203, 113).matrix().causal();
    f16_matrix_causal_hd64_q113_kv203: case(F16, 64, 113, 203).matrix().causal();
    f16_matrix_hd33_dv80_q77_kv90: case(F16, 33, 77, 90).val_dim(80).matrix();
    f16_matrix_hd256_q113_kv203: case(F16, 256, 113, 203).matrix();
    f16_matrix_all_options_hd64_q203_kv113: case(F16, 64, 203, 113).matrix().softcap(2.0).mask().bias().causal();
    f16_matrix_masked_rows_hd64_q113_kv203: case(F16, 64, 113, 203).matrix().masked_rows();
    f16_matrix_quiet_all_options_hd64_q203_kv113: case(F16, 64, 203, 113).matrix().quiet().softcap(2.0).masked_rows().bias().causal();
    f16_matrix_strided_hd96_q113_kv203: case(F16, 96, 113, 203).heads(2, 2).matrix().strided();
    bf16_matrix_hd64_q113_kv203: case(BF16, 64, 113, 203).matrix();
    bf16_matrix_causal_hd128_q1023_kv1024: case(BF16, 128, 1023, 1024).matrix().causal();
    bf16_matrix_all_options_hd64_q203_kv113: case(BF16, 64, 203, 113).matrix().softcap(2.0).mask().bias().causal();
    f16_matrix_large_logits_hd64_q113_kv203: case(F16, 64, 113, 203).matrix().scale(2.0);
    bf16_matrix_large_logits_causal_hd128_q1023_kv1024: case(BF16, 128, 1023, 1024).matrix().scale(2.0).causal();
    // The matrix path on its scalar stand-in for the fragments (any device: the whole kernel
    // but the fragments, on lavapipe in CI), tiles in the dtype and in f32 (bf16 on gfx942).
    f32_matrix_stand_in_hd64_q113_kv203: case(F32, 64, 113, 203).matrix_stand_in(false);
    f32_matrix_stand_in_all_options_hd33_dv80_q77_kv90: case(F32, 33, 77, 90).val_dim(80).matrix_stand_in(false).softcap(2.0).mask().bias().causal();
    f32_matrix_stand_in_quiet_masked_rows_hd64_q203_kv113: case(F32, 64, 203, 113).matrix_stand_in(false).quiet().masked_rows().causal();
    f16_matrix_stand_in_f32_tiles_causal_hd64_q203_kv113: case(F16, 64, 203, 113).matrix_stand_in(true).causal().mask();
    bf16_matrix_stand_in_f32_tiles_hd128_q113_kv203: case(BF16, 128, 113, 203).matrix_stand_in(true).softcap(2.0).bias();
    // Logits spread over tens of units: later key blocks raise rows' maxima by more than 2^8
    // in the exponentials, so the planes rescale the O kept in their fragments (lazily).
    f32_matrix_stand_in_large_logits_hd64_q113_kv203: case(F32, 64, 113, 203).matrix_stand_in(false).scale(2.0);
    f16_matrix_stand_in_f32_tiles_large_logits_causal_hd64_q203_kv113: case(F16, 64, 203, 113).matrix_stand_in(true).scale(2.0).causal().mask();
    // With dropout the maxima move eagerly (P times 1 / (1 - p) must stay in f16's range).
    f32_matrix_stand_in_dropout_large_logits_hd64_q113_kv203: case(F32, 64, 113, 203).matrix_stand_in(false).scale(2.0).dropout(0.3, 11);
    // 32 query rows a plane (two row tiles sharing each K and V fragment; on a 32-unit plane
    // one unit a row, its stagger in four or eight groups), on cmma and on the stand-in.
    f16_matrix_rows32_hd64_q113_kv203: case(F16, 64, 113, 203).matrix().plane_rows_32();
    bf16_matrix_rows32_causal_hd128_q1023_kv1024: case(BF16, 128, 1023, 1024).matrix().plane_rows_32().causal();
    f16_matrix_rows32_quiet_all_options_hd33_dv80_q203_kv113: case(F16, 33, 203, 113).val_dim(80).matrix().plane_rows_32().quiet().softcap(2.0).masked_rows().bias().causal();
    bf16_matrix_rows32_large_logits_strided_hd64_q113_kv203: case(BF16, 64, 113, 203).heads(2, 2).matrix().plane_rows_32().scale(2.0).strided();
    f32_matrix_stand_in_rows32_all_options_hd33_dv80_q77_kv90: case(F32, 33, 77, 90).val_dim(80).matrix_stand_in(false).plane_rows_32().softcap(2.0).mask().bias().causal();
    f16_matrix_stand_in_f32_tiles_rows32_large_logits_quiet_masked_rows_hd64_q203_kv113: case(F16, 64, 203, 113).matrix_stand_in(true).plane_rows_32().scale(2.0).quiet().masked_rows().causal();
    // S and O's staging in one tile (`Tuning::matrix_shared_stage`): large logits rescale O
    // through S's rows, val_dim 80 makes the tile's rows O's (longer than 64 keys).
    f16_matrix_shared_stage_large_logits_hd64_q113_kv203: case(F16, 64, 113, 203).matrix().shared_stage().scale(2.0);
    bf16_matrix_shared_stage_rows32_large_logits_causal_hd128_q1023_kv1024: case(BF16, 128, 1023, 1024).matrix().plane_rows_32().shared_stage().scale(2.0).causal();
    f16_matrix_shared_stage_quiet_all_options_hd33_dv80_q203_kv113: case(F16, 33, 203, 113).val_dim(80).matrix().shared_stage().quiet().softcap(2.0).masked_rows().bias().causal();
    f32_matrix_stand_in_shared_stage_large_logits_all_options_hd33_dv80_q77_kv90: case(F32, 33, 77, 90).val_dim(80).matrix_stand_in(false).shared_stage().scale(2.0).softcap(2.0).mask().bias().causal();
    f16_matrix_stand_in_f32_tiles_shared_stage_rows32_large_logits_masked_rows_hd64_q203_kv113: case(F16, 64, 203, 113).matrix_stand_in(true).plane_rows_32().shared_stage().scale(2.0).masked_rows().causal();
    f32_matrix_stand_in_shared_stage_dropout_large_logits_hd64_q113_kv203: case(F32, 64, 113, 203).matrix_stand_in(false).shared_stage().scale(2.0).dropout(0.3, 11);
    // The mma path, forced (skips where the device has no register mma for the dtype).
    f16_mma_hd64_q113_kv203: case(F16, 64, 113, 203).mma();
    bf16_mma_hd128_q1024_kv1024: case(BF16, 128, 1024, 1024).mma();
    bf16_mma_causal_hd128_q1023_kv1024: case(BF16, 128, 1023, 1024).mma().causal();
    f16_mma_causal_hd64_q203_kv113: case(F16, 64, 203, 113).mma().causal();
    bf16_mma_causal_hd64_q113_kv203: case(BF16, 64, 113, 203).mma().causal();
    f16_mma_hd40_dv80_q77_kv90: case(F16, 40, 77, 90).val_dim(80).mma();
    bf16_mma_hd8_dv24_q1_kv1: case(BF16, 8, 1, 1).val_dim(24).mma();
    f16_mma_all_options_hd64_q203_kv113: case(F16, 64, 203, 113).mma().softcap(2.0).mask().bias().causal();
    bf16_mma_all_options_u8_hd96_q113_kv203: case(BF16, 96, 113, 203).heads(2, 2).mma().softcap(2.0).mask_u8().bias().causal();
    f16_mma_masked_rows_hd64_q113_kv203: case(F16, 64, 113, 203).mma().masked_rows();
    f16_mma_quiet_hd64_q113_kv203: case(F16, 64, 113, 203).mma().quiet();
    bf16_mma_quiet_all_options_hd128_q203_kv113: case(BF16, 128, 203, 113).mma().quiet().softcap(2.0).masked_rows().bias().causal();
    bf16_mma_broadcast_mask_bias_b2_h3_hd32_q50_kv70: case(BF16, 32, 50, 70).heads(2, 3).broadcast().mask().bias().mma();
    // Keys tiled by the blocks, no causal or mask: the kernel without its masked pass (a query
    // tail, the bias, softcap and the quiet softmax still apply).
    bf16_mma_no_masked_pass_softcap_bias_hd64_q200_kv256: case(BF16, 64, 200, 256).heads(2, 2).mma().softcap(2.0).bias();
    f16_mma_no_masked_pass_quiet_hd128_q128_kv512: case(F16, 128, 128, 512).mma().quiet();
}
