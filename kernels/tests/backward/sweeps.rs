//! End to end over lengths, tails, head dims, options, layouts, batch and heads.
use crate::support::*;
use burn_flash_attn_kernels::problem::FloatKind::{F16, F32};

#[test]
fn f32_sweep_lengths_1_to_203_causal_both_directions() {
    let lengths = [
        (1, 7),
        (7, 1),
        (2, 3),
        (17, 17),
        (31, 65),
        (65, 31),
        (64, 64),
        (113, 203),
        (203, 113),
        (100, 1),
    ];
    let cases: Vec<Case> = lengths
        .iter()
        .flat_map(|&(sq, skv)| {
            [
                Case::new(F32, sq, skv, 32),
                Case::new(F32, sq, skv, 32).causal(),
            ]
        })
        .collect();
    run_cases(&cases);
}

#[test]
fn f32_sweep_tails_around_block_edges_plain_and_causal_bias() {
    let lengths = [
        (7, 9),
        (8, 8),
        (9, 7),
        (31, 33),
        (33, 31),
        (63, 65),
        (65, 63),
        (127, 129),
        (129, 127),
    ];
    let cases: Vec<Case> = lengths
        .iter()
        .flat_map(|&(sq, skv)| {
            [
                Case::new(F32, sq, skv, 16),
                Case::new(F32, sq, skv, 16).causal().bias(),
            ]
        })
        .collect();
    run_cases(&cases);
}

#[test]
fn f16_sweep_head_dims_causal() {
    let dims = [(16, 16), (33, 17), (64, 128), (100, 100), (200, 56)];
    let cases: Vec<Case> = dims
        .iter()
        .map(|&(hd, vd)| Case::new(F16, 50, 61, hd).val_dim(vd).causal())
        .collect();
    run_cases(&cases);
}

#[test]
fn f32_sweep_head_dims_1_to_256_and_val_dim_differs() {
    let dims = [
        (1, 1),
        (3, 5),
        (8, 16),
        (31, 17),
        (40, 40),
        (63, 64),
        (80, 80),
        (96, 48),
        (127, 130),
        (160, 200),
        (256, 256),
        (256, 7),
    ];
    let cases: Vec<Case> = dims
        .iter()
        .map(|&(hd, vd)| Case::new(F32, 41, 37, hd).val_dim(vd).causal())
        .collect();
    run_cases(&cases);
}

#[test]
fn f32_sweep_mask_bias_softcap_scale() {
    let base = || Case::new(F32, 45, 58, 24).heads(2, 2);
    run_cases(&[
        base().mask(MaskPattern::Random),
        base().mask(MaskPattern::Random).causal(),
        base().bias(),
        base().bias().causal(),
        base().softcap(2.0),
        base().softcap(30.0).causal(),
        base().scale(0.5),
        base().scale(-0.3).causal(),
        base()
            .mask(MaskPattern::RandomWithMaskedRows)
            .bias()
            .softcap(4.0)
            .scale(0.8)
            .causal(),
        base().mask_u8(MaskPattern::Random),
    ]);
}

/// The shapes of the decorator's conformance cases (`tests/conformance/semantics.rs`) with a
/// u8 mask, the bool layout of CUDA (wgpu's is u32): on the H200 the conformance case
/// `mask_with_fully_masked_row_q13_kv21` hit CUDA_ERROR_ILLEGAL_ADDRESS in its gradients
/// (H200, 2026-11-30, commit 0af16f3); this pins the kernels' side of it.
#[test]
fn f32_conformance_shapes_u8_mask_with_masked_rows() {
    let base = || Case::new(F32, 13, 21, 16).val_dim(8).heads(2, 3);
    run_cases(&[
        base().mask_u8(MaskPattern::RandomWithMaskedRows),
        base()
            .mask_u8(MaskPattern::RandomWithMaskedRows)
            .bias()
            .softcap(2.5)
            .scale(0.7)
            .causal(),
        base().mask(MaskPattern::RandomWithMaskedRows),
    ]);
}

#[test]
fn f32_sweep_strided_inputs_and_outputs() {
    run_cases(&[
        Case::new(F32, 33, 47, 32).heads(2, 3).transposed(),
        Case::new(F32, 47, 33, 20)
            .val_dim(12)
            .heads(1, 2)
            .transposed()
            .causal(),
        Case::new(F32, 29, 31, 16)
            .heads(2, 1)
            .transposed()
            .mask(MaskPattern::RandomWithMaskedRows)
            .bias(),
        Case::new(F32, 64, 64, 64)
            .heads(2, 2)
            .transposed()
            .causal()
            .softcap(10.0),
    ]);
}

#[test]
fn f32_sweep_batch_and_heads() {
    let cases: Vec<Case> = [(1, 4), (3, 1), (2, 5), (4, 4)]
        .iter()
        .flat_map(|&(b, h)| {
            [
                Case::new(F32, 19, 23, 16).heads(b, h),
                Case::new(F32, 23, 19, 16).heads(b, h).causal(),
            ]
        })
        .collect();
    run_cases(&cases);
}

