//! The matrix backward (`backward::matrix`: the dK/dV and dQ kernels on 16x16x16 tile
//! products), asked for by the tuning: on a device with cmma for the dtype (CUDA f16 / bf16) its
//! cmma kernels, elsewhere (lavapipe; f32 everywhere) the same kernels with the scalar stand-in
//! for the fragments (`Tuning::matrix_stand_in`). Every case must plan the matrix path and meet
//! the FlashAttention rule. `BURN_FLASH_BWD_PATH=matrix` runs the whole suite on it instead
//! (with `BURN_FLASH_MATRIX_STAND_IN=1` where the device has no cmma).
use burn_flash_attn_kernels::backward::BackwardPath;
use burn_flash_attn_kernels::plan::DqAccumulation;
use burn_flash_attn_kernels::problem::FloatKind::{self, BF16, F16, F32};

use crate::support::planning::tuning;
use crate::support::*;

/// Runs every case on the matrix backward and checks that the plan took it.
fn run_matrix(cases: &[Case]) {
    run_with(cases, &tuning().with_backward_path(Some(BackwardPath::Matrix)).with_matrix_stand_in(true));
}

/// [`run_matrix`] with `matrix` (a tuning that asks for the matrix path).
fn run_with(cases: &[Case], matrix: &burn_flash_attn_kernels::plan::Tuning) {
    run_all(cases, |case| {
        let Some(plan) = run_case_with(case, matrix)? else { return Ok(()) };
        println!("{}: {plan}", case.label());
        for gradient in [&plan.dkdv, &plan.dq] {
            if gradient.config.path() != BackwardPath::Matrix {
                return Err(format!("{}: planned {gradient}, not the matrix path", case.label()));
            }
        }
        Ok(())
    });
}

/// Shapes and options for one dtype: odd lengths, seq_q != seq_kv with causal (both ways,
/// rows without keys), masks with fully masked rows, bias, softcap, head dims not a multiple of
/// 16, val_dim != head_dim, strided inputs.
fn cases(dtype: FloatKind) -> Vec<Case> {
    vec![
        Case::new(dtype, 1, 1, 64),
        Case::new(dtype, 113, 203, 64).causal(),
        Case::new(dtype, 203, 113, 64).causal(),
        Case::new(dtype, 128, 217, 128),
        Case::new(dtype, 65, 33, 80).val_dim(40).causal(),
        Case::new(dtype, 37, 29, 31).mask(MaskPattern::RandomWithMaskedRows).bias(),
        Case::new(dtype, 45, 58, 24).softcap(5.0).scale(0.7).causal(),
        Case::new(dtype, 33, 47, 32).heads(2, 3).transposed(),
        Case::new(dtype, 100, 64, 16).mask_u8(MaskPattern::Random).scale(-0.4).causal(),
    ]
}

/// The model features: GQA, windows, ALiBi, dropout, the quiet softmax, combined.
fn feature_cases(dtype: FloatKind) -> Vec<Case> {
    vec![
        Case::new(dtype, 128, 192, 64).heads(1, 4).gqa(2).bias().softcap(3.0),
        Case::new(dtype, 113, 203, 32).window(Some(40), None).causal(),
        Case::new(dtype, 203, 113, 16).window(Some(3), Some(0)),
        Case::new(dtype, 70, 65, 32).heads(1, 2).alibi().causal().bias(),
        Case::new(dtype, 192, 128, 32).quiet().dropout(0.2, 7),
        Case::new(dtype, 77, 90, 128).quiet().mask(MaskPattern::RandomWithMaskedRows).bias(),
    ]
}

#[test]
fn matrix_backward_f16() {
    run_matrix(&cases(F16));
}

#[test]
fn matrix_backward_bf16() {
    run_matrix(&cases(BF16));
}

/// f32 has no cmma (it would round to tf32): the stand-in everywhere. Its f32 tiles at head dim
/// 128 do not fit lavapipe's 32 KiB, so that case is left out here.
#[test]
fn matrix_backward_f32_stand_in() {
    let cases: Vec<Case> = cases(F32).into_iter().filter(|case| case.problem().head_dim < 128).collect();
    run_matrix(&cases);
}

#[test]
fn matrix_backward_features_f16_bf16() {
    let mut all = feature_cases(F16);
    all.extend(feature_cases(BF16));
    run_matrix(&all);
}

/// The tiles staged in f32 (the inputs converted exactly), as gfx942 stages bf16 for its f32
/// cmma: here by the stand-in (no f32 16x16x16 cmma on CUDA or lavapipe), f16 and bf16 inputs.
#[test]
fn matrix_backward_f32_tiles_stand_in() {
    let f32_tiles = tuning()
        .with_backward_path(Some(BackwardPath::Matrix))
        .with_matrix_stand_in(true)
        .with_matrix_f32_tiles(true);
    // What differs from the cases above is the tiles' type: both dtypes at the shapes that
    // break kernels (seq_q != seq_kv with causal, masked rows with bias, softcap, strides).
    let mut all = Vec::new();
    for dtype in [F16, BF16] {
        all.extend([
            Case::new(dtype, 113, 203, 64).causal(),
            Case::new(dtype, 37, 29, 31).mask(MaskPattern::RandomWithMaskedRows).bias(),
            Case::new(dtype, 45, 58, 24).softcap(5.0).scale(0.7).causal(),
            Case::new(dtype, 33, 47, 32).heads(2, 3).transposed(),
        ]);
    }
    all.push(Case::new(BF16, 192, 128, 32).quiet().dropout(0.2, 7).causal());
    run_with(&all, &f32_tiles);
}

/// The one pass on the matrix path (dQ by f32 atomic adds in the dK/dV kernel) where the device
/// adds f32 atomically, otherwise dQ's kernel (printed): every case must plan the one it can
/// run and meet the rule. Odd head dims take 1 f32 per request, multiples of 4 the widest the
/// device has; f32 tiles too.
#[test]
fn matrix_one_pass_meets_the_rule() {
    let atomic = crate::one_pass::has_atomic_f32_add();
    let expected = if atomic { DqAccumulation::Atomic } else { DqAccumulation::Kernel };
    let one_pass = tuning()
        .with_backward_path(Some(BackwardPath::Matrix))
        .with_matrix_stand_in(true)
        .with_backward_dq(Some(DqAccumulation::Atomic));
    let all = [
        Case::new(F16, 113, 203, 64).causal(),
        Case::new(BF16, 203, 113, 64).causal().heads(2, 2),
        Case::new(F16, 37, 29, 31).mask(MaskPattern::RandomWithMaskedRows).bias(),
        Case::new(BF16, 45, 58, 24).softcap(5.0).scale(0.7).causal(),
        Case::new(F16, 65, 33, 80).val_dim(40).causal(),
        Case::new(F16, 96, 130, 32).heads(1, 4).gqa(2).window(Some(20), Some(10)).dropout(0.2, 3),
        Case::new(F16, 77, 90, 128).quiet().mask(MaskPattern::RandomWithMaskedRows).bias(),
        Case::new(F32, 90, 61, 16).alibi().causal(),
    ];
    let f32_tiles = one_pass.with_matrix_f32_tiles(true);
    let tiles_cases = [
        Case::new(BF16, 113, 203, 40).causal(),
        Case::new(F16, 203, 113, 40).causal(),
        Case::new(F16, 33, 47, 32).heads(2, 3).transposed(),
    ];
    for (cases, tuning) in [(&all[..], &one_pass), (&tiles_cases[..], &f32_tiles)] {
        run_all(cases, |case| {
            let Some(plan) = run_case_with(case, tuning)? else { return Ok(()) };
            println!("{}: {plan}", case.label());
            if plan.dkdv.config.path() != BackwardPath::Matrix || plan.dq_accumulation() != expected {
                return Err(format!("{}: planned {plan}, expected the matrix path with dQ by {}", case.label(), expected.name()));
            }
            Ok(())
        });
    }
}

/// Reruns of the deterministic matrix backward are bit-identical (every sum in a fixed order,
/// no atomics).
#[test]
fn matrix_backward_reruns_are_bit_identical() {
    let matrix = tuning()
        .with_backward_path(Some(BackwardPath::Matrix))
        .with_matrix_stand_in(true)
        .deterministic();
    let case = Case::new(BF16, 203, 113, 64).mask(MaskPattern::RandomWithMaskedRows).bias().causal();
    crate::determinism::assert_reruns_identical(&case, &matrix, 5);
}
