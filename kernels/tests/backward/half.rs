//! f16 / bf16 end to end; the mma path's shapes where the device has it.
use crate::support::*;
use burn_flash_attn_kernels::problem::FloatKind::{BF16, F16};

#[test]
fn f16_sweep_shapes_and_options() {
    run_cases(&half_cases(F16));
}

#[test]
fn bf16_sweep_shapes_and_options() {
    run_cases(&half_cases(BF16));
}

fn half_cases(dtype: burn_flash_attn_kernels::problem::FloatKind) -> Vec<Case> {
    vec![
        Case::new(dtype, 1, 1, 64),
        Case::new(dtype, 113, 203, 64).causal(),
        Case::new(dtype, 203, 113, 64).causal(),
        Case::new(dtype, 128, 217, 128),
        Case::new(dtype, 65, 33, 80).val_dim(40).causal(),
        Case::new(dtype, 37, 29, 31)
            .mask(MaskPattern::RandomWithMaskedRows)
            .bias(),
        Case::new(dtype, 45, 58, 24)
            .softcap(5.0)
            .scale(0.7)
            .causal(),
        Case::new(dtype, 33, 47, 32).heads(2, 3).transposed(),
        Case::new(dtype, 40, 40, 256),
        Case::new(dtype, 1024, 1023, 64).causal(),
    ]
}

/// Cases for the mma path (CUDA f16/bf16, dims multiples of 8 up to 128); elsewhere they run
/// on the portable path.
#[test]
fn half_sweep_mma_shapes_and_options() {
    run_cases(&[
        Case::new(BF16, 203, 113, 96)
            .mask(MaskPattern::RandomWithMaskedRows)
            .bias()
            .softcap(3.0)
            .causal(),
        Case::new(F16, 113, 203, 64)
            .heads(2, 2)
            .mask_u8(MaskPattern::Random)
            .bias(),
        Case::new(BF16, 77, 90, 40).val_dim(80),
        Case::new(F16, 1, 1, 8).val_dim(24),
        Case::new(BF16, 256, 256, 128).causal(),
        Case::new(F16, 100, 64, 16).scale(-0.4).causal(),
        Case::new(BF16, 64, 300, 32).heads(3, 1),
        Case::new(BF16, 203, 113, 64).quiet().causal(),
        Case::new(F16, 77, 90, 128)
            .quiet()
            .mask(MaskPattern::RandomWithMaskedRows)
            .bias(),
        // Both sequences tiled by the blocks, no causal or mask: the kernels without their
        // masked pass (bias, softcap, GQA, dropout and the quiet softmax still apply).
        Case::new(BF16, 256, 256, 128),
        Case::new(F16, 128, 192, 64).heads(1, 4).gqa(2).bias().softcap(3.0),
        Case::new(BF16, 192, 128, 32).quiet().dropout(0.2, 7),
    ]);
}

// ---- determinism ----

