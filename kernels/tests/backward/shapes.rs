//! End to end (preprocess, dK/dV, dQ) at the shapes that break kernels.
use crate::support::*;
use burn_flash_attn_kernels::problem::FloatKind::F32;

#[test]
fn f32_q1_kv1_hd64() {
    run_cases(&[Case::new(F32, 1, 1, 64)]);
}

#[test]
fn f32_causal_hd64_q113_kv203() {
    run_cases(&[Case::new(F32, 113, 203, 64).causal()]);
}

#[test]
fn f32_causal_hd64_q203_kv113_rows_without_keys() {
    run_cases(&[Case::new(F32, 203, 113, 64).causal()]);
}

#[test]
fn f32_hd64_q1023_kv1024_causal() {
    run_cases(&[Case::new(F32, 1023, 1024, 64).causal()]);
}

#[test]
fn f32_hd64_q1024_kv1023() {
    run_cases(&[Case::new(F32, 1024, 1023, 64)]);
}

#[test]
fn f32_hd128_q128_kv217_causal() {
    run_cases(&[Case::new(F32, 128, 217, 128).causal()]);
}

#[test]
fn f32_hd256_vd256_q65_kv70() {
    run_cases(&[
        Case::new(F32, 65, 70, 256).causal(),
        Case::new(F32, 65, 70, 256),
    ]);
}

#[test]
fn f32_fully_masked_rows_give_zero_gradients() {
    run_cases(&[
        Case::new(F32, 37, 29, 16).mask(MaskPattern::RandomWithMaskedRows),
        Case::new(F32, 37, 29, 16)
            .mask(MaskPattern::RandomWithMaskedRows)
            .causal()
            .bias(),
        Case::new(F32, 40, 8, 16).causal().bias().softcap(3.0),
    ]);
}

/// Quiet softmax: alone, with fully masked rows and bias, with rows that see no key (causal,
/// seq_q > seq_kv) and softcap. The backward is the usual one on the quiet lse.
#[test]
fn f32_quiet_softmax() {
    run_cases(&[
        Case::new(F32, 113, 203, 64).quiet(),
        Case::new(F32, 37, 29, 16).quiet().mask(MaskPattern::RandomWithMaskedRows).bias(),
        Case::new(F32, 203, 113, 48).quiet().causal().softcap(3.0),
        // Three keys: row maxima below 0, where the quiet term dominates.
        Case::new(F32, 20, 3, 64).quiet(),
    ]);
}
