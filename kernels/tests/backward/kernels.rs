//! Each backward kernel alone, against the oracle's intermediates.
use burn_flash_attn_kernels::backward::{BackwardKernel, GradientConfig};
use burn_flash_attn_kernels::backward::{
    flash_attention_backward_dkdv, flash_attention_backward_dq,
    flash_attention_backward_preprocess,
};
use burn_flash_attn_kernels::problem::FloatKind::F32;
use burn_flash_attn_kernels::reference::{self, Precision};
use burn_flash_attn_kernels::tolerance::{GRADIENT_FACTOR, check};

use crate::support::*;
use crate::support::planning;

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
    let delta = filled(&client, &[p.batch, p.num_heads, p.seq_q], Elem::Float(F32), POISON);
    flash_attention_backward_preprocess::<TestRuntime, f32>(
        &client,
        &p,
        device.o.binding(),
        device.d_out.binding(),
        delta.binding(),
    )
    .unwrap();
    let got = read(&client, &delta);
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
        &case.label(),
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
    let label = case.label();
    println!("case {label} {kernel:?}");
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
        Elem::Float(F32),
        &Layout::Contiguous,
    );
    let inputs = device.gradient_inputs(&delta);
    let GradientConfig::Portable(config) = planning::gradient_plan(client.properties(), &p, kernel)
        .unwrap()
        .config
    else {
        panic!("f32 gradients take the portable path");
    };
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
            let dk = read(&client, &device.dk);
            let dv = read(&client, &device.dv);
            check_gradient(&label, "dk", &dk, &plain.dk, &oracle.dk, case.dtype).unwrap();
            check_gradient(&label, "dv", &dv, &plain.dv, &oracle.dv, case.dtype).unwrap();
        }
        BackwardKernel::Query => {
            flash_attention_backward_dq::<TestRuntime, f32, u32>(
                &client,
                &p,
                inputs,
                device.dq.binding(),
                config,
            );
            let dq = read(&client, &device.dq);
            check_gradient(&label, "dq", &dq, &plain.dq, &oracle.dq, case.dtype).unwrap();
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

