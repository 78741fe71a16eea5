//! The one-pass backward (`DqAccumulation::Atomic`: dQ added by the dK/dV kernel with f32
//! atomic adds) against the f64 oracle with the gradient rule, at the shapes and options that
//! break kernels, and the same cases with dQ by its own kernel: both meet the rule on the same
//! inputs, so they agree within it. The half-precision cases take the mma path on CUDA (its
//! one-pass kernel: dS^T through a shared tile, read back transposed) and the portable one
//! elsewhere. Where the device has no f32 atomic add, or the one-pass mma blocks would not fit
//! its shared memory, the plan keeps dQ's kernel and the cases check that instead (printed).
//! The whole suite runs on the one-pass path with `BURN_FLASH_DQ=atomic`.
use crate::support::planning::tuning;
use crate::support::*;
use burn_flash_attn_kernels::backward::config::{GradientConfig, MmaGradientConfig};
use burn_flash_attn_kernels::plan::DqAccumulation::{self, Atomic, Kernel};
use burn_flash_attn_kernels::problem::FloatKind::{BF16, F16, F32};

fn cases() -> Vec<Case> {
    vec![
        // Tails on both sides, causal with seq_q < seq_kv and the reverse (rows without keys).
        Case::new(F32, 113, 203, 64).causal(),
        Case::new(F32, 203, 113, 64).causal(),
        Case::new(F32, 1, 1, 64),
        // Every score option, odd dims, val_dim ≠ head_dim, masked rows.
        Case::new(F32, 77, 50, 33)
            .val_dim(20)
            .mask(MaskPattern::RandomWithMaskedRows)
            .bias()
            .softcap(4.0)
            .scale(0.3),
        // Heads and batch, grouped-query attention (dQ per query head, K read per group).
        Case::new(F32, 37, 53, 16).heads(2, 4).gqa(2).causal(),
        Case::new(F32, 41, 17, 16).heads(1, 8).gqa(1).alibi(),
        // Windows (blocks skipped on both sides), the quiet softmax, dropout.
        Case::new(F32, 113, 203, 32).window(Some(40), None).causal(),
        Case::new(F32, 90, 61, 16).window(Some(3), Some(0)).quiet(),
        Case::new(F32, 45, 58, 32).heads(1, 4).gqa(2).window(Some(12), Some(6)).dropout(0.3, 9),
        // Transposed inputs and outputs: dQ finished into rows that are not contiguous.
        Case::new(F32, 47, 33, 20).val_dim(12).heads(1, 2).transposed().causal(),
        // Wide heads, and a sequence of several blocks each way.
        Case::new(F32, 65, 70, 256),
        Case::new(F32, 300, 260, 64).causal().bias(),
        // Half precision: portable (lavapipe, HIP) or mma (CUDA): tails and causal both ways,
        // every score option with odd-sized rows of 16-byte chunks, GQA, windows, dropout,
        // head_dim 128 over several blocks each way.
        Case::new(F16, 96, 130, 32).heads(1, 4).gqa(2).causal(),
        Case::new(BF16, 150, 150, 64).window(Some(20), Some(20)).alibi(),
        Case::new(BF16, 113, 203, 64).causal(),
        Case::new(F16, 203, 113, 64).causal().heads(2, 2),
        Case::new(BF16, 77, 50, 40)
            .val_dim(80)
            .mask(MaskPattern::RandomWithMaskedRows)
            .bias()
            .softcap(4.0),
        Case::new(F16, 45, 58, 64).heads(1, 4).gqa(2).window(Some(12), Some(6)).dropout(0.3, 9),
        Case::new(BF16, 300, 260, 128).causal().quiet(),
    ]
}

/// Runs every case planned with `accumulation` and reports which dQ each plan took.
fn run_planned(accumulation: DqAccumulation) {
    let tuning = tuning().with_backward_dq(Some(accumulation));
    run_all(&cases(), |case| {
        let Some(plan) = run_case_with(case, &tuning)? else { return Ok(()) };
        let expected = if accumulation == Atomic && has_atomic_f32_add() && one_pass_fits(&plan) {
            Atomic
        } else {
            Kernel
        };
        println!("{}: dQ by {}", case.label(), plan.dq_accumulation().name());
        if plan.dq_accumulation() == expected {
            Ok(())
        } else {
            Err(format!("{}: planned dQ by {}, expected {}", case.label(), plan.dq_accumulation().name(), expected.name()))
        }
    });
}

/// Whether the plan's dK/dV kernel would fit the device as the one-pass kernel (the portable
/// and matrix ones need nothing more; the mma one a dS^T tile).
fn one_pass_fits(plan: &burn_flash_attn_kernels::plan::BackwardPlan) -> bool {
    match plan.dkdv.config {
        GradientConfig::Portable(_) | GradientConfig::Matrix(_) => true,
        GradientConfig::Mma(config) => {
            let one_pass = MmaGradientConfig { atomic_dq: true, ..config };
            one_pass.shared_memory_bytes() <= plan.dkdv.device_shared_memory
        }
    }
}

/// Whether the test device adds f32 atomically (printed when not).
pub(crate) fn has_atomic_f32_add() -> bool {
    let client = client();
    let yes = burn_flash_attn_kernels::plan::DeviceCaps::of(&client).has_atomic_f32_add();
    if !yes {
        println!("the test device has no f32 atomic add: dQ keeps its kernel");
    }
    yes
}

#[test]
fn one_pass_meets_the_rule() {
    run_planned(Atomic);
}

#[test]
fn two_kernel_dq_meets_the_rule_on_the_same_cases() {
    run_planned(Kernel);
}
