//! Reruns bit-identical with dQ by its own kernel (no atomics, fixed summation orders), and
//! typed errors.
use crate::support::*;
use burn_flash_attn_kernels::plan::DqAccumulation;
use burn_flash_attn_kernels::problem::FloatKind::{BF16, F32};

/// Reruns of the determinism test.
const RERUNS: usize = 20;

#[test]
fn bf16_causal_mask_reruns_are_bit_identical() {
    assert_reruns_bit_identical(
        &Case::new(BF16, 113, 203, 64)
            .heads(1, 2)
            .causal()
            .mask(MaskPattern::Random),
    );
}

#[test]
fn f32_causal_mask_bias_reruns_are_bit_identical() {
    assert_reruns_bit_identical(
        &Case::new(F32, 113, 203, 48)
            .heads(1, 2)
            .causal()
            .mask(MaskPattern::Random)
            .bias(),
    );
}

/// Runs the whole backward RERUNS times on the same inputs, dQ by its own kernel whatever
/// BURN_FLASH_DQ says (its reruns are what is checked): see [`assert_reruns_identical`].
fn assert_reruns_bit_identical(case: &Case) {
    let tuning = crate::support::planning::tuning().with_backward_dq(Some(DqAccumulation::Kernel));
    assert_reruns_identical(case, &tuning, RERUNS);
}

/// Runs the whole backward planned with `tuning` `reruns` times on the same inputs: dq, dk and
/// dv must be the same bytes every time (skips where the device cannot hold the case's types).
pub fn assert_reruns_identical(case: &Case, tuning: &burn_flash_attn_kernels::plan::Tuning, reruns: usize) {
    let client = client();
    if !supported(&client, case) {
        return;
    }
    let data = HostData::draw(case, case.seed());
    let (o, lse) = forward_outputs(case, &data);
    let mut first: Option<[Vec<u8>; 3]> = None;
    for run in 0..reruns {
        let device = DeviceCase::upload(&client, case, &data, &o, &lse);
        crate::support::planning::launch_backward_with(&client, &case.problem(), device.tensors(), tuning).unwrap();
        let bytes = [&device.dq, &device.dk, &device.dv].map(|t| read_bytes(&client, t));
        match &first {
            None => first = Some(bytes),
            Some(first) => assert!(
                first == &bytes,
                "{}: run {run} differs from run 0",
                case.label()
            ),
        }
    }
}

#[test]
fn shape_mismatch_is_a_typed_error() {
    let case = Case::new(F32, 5, 6, 8);
    let client = client();
    let data = HostData::draw(&case, case.seed());
    let (o, lse) = forward_outputs(&case, &data);
    let device = DeviceCase::upload(&client, &case, &data, &o, &lse);
    let mut problem = case.problem();
    problem.seq_kv = 7;
    let err = crate::support::planning::launch_backward(&client, &problem, device.tensors()).unwrap_err();
    assert!(err.to_string().contains("key"), "{err}");
}
