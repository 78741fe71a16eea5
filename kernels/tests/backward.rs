//! The backward kernels on the wgpu runtime (lavapipe here) against the f64 oracle, with the
//! FlashAttention tolerance rule for gradients (factor 3, `plain` = the same naive
//! implementation at the test dtype's precision). Inputs are drawn from a seeded RNG (the seed
//! is printed; `BACKWARD_SEED=n` overrides it) and outputs are poisoned with NaN first.
//!
//! `cargo test -p burn-flash-attn-kernels --test backward`
mod backward_support;
mod planning;

use backward_support::*;
use burn_flash_attn_kernels::backward::config::{BackwardKernel};
use burn_flash_attn_kernels::backward::{
    GradientInputs, flash_attention_backward_dkdv,
    flash_attention_backward_dq, flash_attention_backward_preprocess,
};
use burn_flash_attn_kernels::problem::FloatKind::{BF16, F16, F32};
use burn_flash_attn_kernels::reference::{self, Precision};
use burn_flash_attn_kernels::tolerance::{GRADIENT_FACTOR, check};

/// Reruns of the determinism test.
const RERUNS: usize = 20;

// ---- each kernel alone, against the oracle's intermediates ----

#[test]
fn preprocess_delta_f32_q203_vd96_strided_vs_f64() {
    preprocess_delta(
        &Case::new(F32, 203, 17, 40)
            .val_dim(96)
            .heads(2, 3)
            .transposed(),
    );
}

/// Contiguous rows: the kernel reads them in vectors (same summation order).
#[test]
fn preprocess_delta_f32_q203_vd96_contiguous_vs_f64() {
    preprocess_delta(&Case::new(F32, 203, 17, 40).val_dim(96).heads(2, 3));
}

fn preprocess_delta(case: &Case) {
    let case = case.clone();
    let client = client();
    let data = HostData::draw(&case, case.seed());
    let (o, lse) = forward_outputs(&case, &data);
    let device = DeviceCase::upload(&client, &case, &data, &o, &lse);
    let p = case.problem();
    let delta = upload(
        &client,
        &vec![f64::NAN; p.heads_total() * p.seq_q],
        &[p.batch, p.num_heads, p.seq_q],
        Layout::Contiguous,
        Role::Stats,
        |x| x as f32,
    );
    flash_attention_backward_preprocess::<TestRuntime, f32>(
        &client,
        &p,
        device.o.binding(),
        device.d_out.binding(),
        delta.binding(),
    )
    .unwrap();
    let got = read_float(&client, F32, &delta);
    let dv = p.val_dim;
    let row_dot = |row: usize, round: fn(f64) -> f64| {
        (0..dv).fold(0.0, |acc, c| {
            round(acc + round(o[row * dv + c] * data.d_out[row * dv + c]))
        })
    };
    let oracle: Vec<f64> = (0..got.len()).map(|row| row_dot(row, |x| x)).collect();
    let plain: Vec<f64> = (0..got.len())
        .map(|row| row_dot(row, |x| x as f32 as f64))
        .collect();
    check(
        &case.name(),
        &got,
        &plain,
        &oracle,
        GRADIENT_FACTOR,
        Precision::F32,
    )
    .unwrap();
}

/// Runs dK/dV or dQ alone, given the oracle's lse and delta rounded to f32.
fn single_kernel(case: &Case, kernel: BackwardKernel) {
    let client = client();
    let seed = case.seed();
    println!("case {} {kernel:?} seed {seed}", case.name());
    let p = case.problem();
    let data = HostData::draw(case, seed);
    let (o, lse) = forward_outputs(case, &data);
    let device = DeviceCase::upload(&client, case, &data, &o, &lse);
    let oracle = reference::backward(&p, &data.inputs(), &data.d_out, Precision::F64);
    let plain = reference::backward(&p, &data.inputs(), &data.d_out, precision(case.dtype));
    let delta = upload(
        &client,
        &oracle.delta,
        &[p.batch, p.num_heads, p.seq_q],
        Layout::Contiguous,
        Role::Stats,
        |x| x as f32,
    );
    let inputs = GradientInputs {
        q: device.q.binding(),
        k: device.k.binding(),
        v: device.v.binding(),
        d_out: device.d_out.binding(),
        lse: device.lse.binding(),
        delta: delta.binding(),
        mask: device.mask.as_ref().map(DeviceTensor::binding),
        bias: device.bias.as_ref().map(DeviceTensor::binding),
    };
    let config = planning::gradient_plan(client.properties(), &p, kernel)
        .unwrap()
        .config;
    match kernel {
        BackwardKernel::KeyValue => {
            flash_attention_backward_dkdv::<TestRuntime, f32, u32>(
                &client,
                &p,
                inputs,
                device.dk.binding(),
                device.dv.binding(),
                config,
            );
            let dk = read_float(&client, F32, &device.dk);
            let dv = read_float(&client, F32, &device.dv);
            check_gradient(case, "dk", &dk, &plain.dk, &oracle.dk).unwrap();
            check_gradient(case, "dv", &dv, &plain.dv, &oracle.dv).unwrap();
        }
        BackwardKernel::Query => {
            flash_attention_backward_dq::<TestRuntime, f32, u32>(
                &client,
                &p,
                inputs,
                device.dq.binding(),
                config,
            );
            let dq = read_float(&client, F32, &device.dq);
            check_gradient(case, "dq", &dq, &plain.dq, &oracle.dq).unwrap();
        }
    }
}

#[test]
fn dkdv_alone_f32_causal_q113_kv203_hd64() {
    single_kernel(
        &Case::new(F32, 113, 203, 64).causal(),
        BackwardKernel::KeyValue,
    );
}

#[test]
fn dkdv_alone_f32_mask_bias_softcap_q77_kv50_hd33_vd20() {
    let case = Case::new(F32, 77, 50, 33)
        .val_dim(20)
        .mask(MaskPattern::RandomWithMaskedRows)
        .bias()
        .softcap(5.0);
    single_kernel(&case, BackwardKernel::KeyValue);
}

#[test]
fn dq_alone_f32_causal_q203_kv113_hd64() {
    single_kernel(
        &Case::new(F32, 203, 113, 64).causal(),
        BackwardKernel::Query,
    );
}

#[test]
fn dq_alone_f32_mask_bias_softcap_q77_kv50_hd33_vd20() {
    let case = Case::new(F32, 77, 50, 33)
        .val_dim(20)
        .mask(MaskPattern::RandomWithMaskedRows)
        .bias()
        .softcap(5.0);
    single_kernel(&case, BackwardKernel::Query);
}

// ---- end to end: preprocess, dK/dV, dQ ----

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
/// (benches/RESULTS.md, 2026-11-30 fourth session); this pins the kernels' side of it.
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
    ]);
}

// ---- determinism ----

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

/// Runs the whole backward RERUNS times on the same inputs: dq, dk and dv must be the same
/// bytes every time (skips where the device cannot hold the case's types).
fn assert_reruns_bit_identical(case: &Case) {
    let client = client();
    if !supported(&client, case) {
        return;
    }
    let data = HostData::draw(case, case.seed());
    let (o, lse) = forward_outputs(case, &data);
    let mut first: Option<[Vec<u8>; 3]> = None;
    for run in 0..RERUNS {
        let device = DeviceCase::upload(&client, case, &data, &o, &lse);
        crate::planning::launch_backward(&client, &case.problem(), device.tensors()).unwrap();
        let bytes = [&device.dq, &device.dk, &device.dv].map(|t| read_bytes(&client, t));
        match &first {
            None => first = Some(bytes),
            Some(first) => assert!(
                first == &bytes,
                "{}: run {run} differs from run 0",
                case.name()
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
    let err = crate::planning::launch_backward(&client, &problem, device.tensors()).unwrap_err();
    assert!(err.to_string().contains("key"), "{err}");
}
