//! The model features of the kernels, forward and backward against the f64 oracle: grouped-query
//! attention (K/V heads a divisor of the query heads, ratios 1, 2, 8 and num_heads), sliding
//! windows (smaller and larger than a block, one-sided, with causal, rows that see no key),
//! ALiBi, and each combined with the older options (mask, bias, softcap, quiet softmax,
//! seq_q != seq_kv). Every case runs the planner's forward, then the planner's backward.
use crate::support::forward::run_forward_cases;
use crate::support::planning::launch_forward;
use crate::support::*;
use burn_flash_attn_kernels::problem::FloatKind::{self, BF16, F16, F32};

fn run_both(cases: &[Case]) {
    run_forward_cases(cases, &|client, problem, tensors| {
        launch_forward(client, problem, tensors)
    });
    run_cases(cases);
}

#[test]
fn f32_grouped_query_attention() {
    run_both(&[
        Case::new(F32, 37, 53, 16).heads(2, 4).gqa(2).causal(),
        Case::new(F32, 29, 29, 32).heads(1, 8).gqa(1),
        Case::new(F32, 41, 17, 16).heads(1, 16).gqa(2).val_dim(8),
        Case::new(F32, 20, 33, 24)
            .heads(2, 3)
            .gqa(3)
            .mask(MaskPattern::RandomWithMaskedRows)
            .bias(),
    ]);
}

#[test]
fn f32_sliding_windows() {
    run_both(&[
        // Smaller than a block, both sides.
        Case::new(F32, 113, 203, 64).window(Some(16), Some(8)),
        // Left only, with causal: Mistral's window.
        Case::new(F32, 113, 203, 32).window(Some(40), None).causal(),
        // Right only, seq_q > seq_kv.
        Case::new(F32, 90, 61, 32).window(None, Some(5)),
        // The diagonal alone.
        Case::new(F32, 64, 64, 16).window(Some(0), Some(0)),
        // Larger than the sequences: the same as no window.
        Case::new(F32, 37, 45, 16)
            .window(Some(500), Some(500))
            .causal(),
        // Rows 0..90 have their window left of every key: they see nothing (output and dQ 0).
        Case::new(F32, 203, 113, 16).window(Some(3), Some(0)),
    ]);
}

#[test]
fn f32_alibi() {
    run_both(&[
        Case::new(F32, 37, 53, 16).heads(2, 3).alibi(),
        Case::new(F32, 70, 65, 32)
            .heads(1, 2)
            .alibi()
            .causal()
            .bias(),
        Case::new(F32, 64, 96, 16)
            .heads(1, 2)
            .alibi()
            .window(Some(20), Some(10)),
    ]);
}

#[test]
fn f32_features_combined() {
    run_both(&[
        Case::new(F32, 45, 58, 24)
            .heads(2, 4)
            .gqa(2)
            .window(Some(12), Some(6))
            .alibi()
            .mask(MaskPattern::RandomWithMaskedRows)
            .softcap(4.0)
            .quiet(),
        Case::new(F32, 77, 50, 16)
            .heads(1, 4)
            .gqa(1)
            .window(Some(9), None)
            .causal()
            .alibi()
            .scale(0.3),
    ]);
}

fn half_cases(dtype: FloatKind) -> Vec<Case> {
    vec![
        // The mma path's shapes on CUDA (dims multiples of 8), portable elsewhere.
        Case::new(dtype, 203, 113, 64)
            .heads(1, 4)
            .gqa(2)
            .causal()
            .window(Some(32), None),
        Case::new(dtype, 96, 130, 32).heads(1, 16).gqa(2).alibi(),
        Case::new(dtype, 64, 64, 64).heads(1, 8).gqa(1).causal(),
        Case::new(dtype, 150, 150, 64)
            .window(Some(20), Some(20))
            .alibi()
            .bias(),
        Case::new(dtype, 90, 61, 16)
            .window(Some(3), Some(0))
            .quiet(),
        // Head dim 31: the matrix forward on CUDA.
        Case::new(dtype, 37, 45, 31)
            .heads(2, 4)
            .gqa(2)
            .window(Some(10), Some(4))
            .alibi(),
    ]
}

#[test]
fn f16_features() {
    run_both(&half_cases(F16));
}

#[test]
fn bf16_features() {
    run_both(&half_cases(BF16));
}
