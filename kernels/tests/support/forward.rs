//! The forward pass on a [`Case`] through any launcher, checked as `tests/forward/` checks it
//! ([`check_forward`]). For the suites that run the forward and the backward on one runtime
//! (`tests/wave64.rs`, `tests/hip_runtime.rs`).
use burn_flash_attn_kernels::FlashError;
use burn_flash_attn_kernels::forward::ForwardTensors;
use burn_flash_attn_kernels::plan::ForwardPlan;
use burn_flash_attn_kernels::problem::{AttentionProblem, FloatKind};
use burn_flash_attn_kernels::reference::{self, Precision};

use super::backward_run::{DeviceCase, HostData, forward_outputs};
use super::case::{Case, POISON, supported};
use super::compare::{check_forward, precision, run_all};
use super::device::{DeviceTensor, Elem, filled, read};
use super::runtime::{Client, TestRuntime, client};

/// Plans and launches the forward of one problem on poisoned outputs; returns the plan.
pub type Launcher<'a> = &'a (dyn Fn(
    &Client,
    &AttentionProblem,
    ForwardTensors<TestRuntime>,
) -> Result<ForwardPlan, FlashError>
         + Sync);

/// Runs the forward of `case` through `launch`; a problem the device refuses
/// (`FlashError::Device`) is skipped with its reason.
pub fn run_forward(case: &Case, launch: Launcher) -> Result<(), String> {
    let client = client();
    if !supported(&client, case) {
        return Ok(());
    }
    let p = case.problem();
    let seed = case.seed();
    let label = case.label();
    let data = HostData::draw(case, seed);
    let (o_ref, lse_ref) = forward_outputs(case, &data);
    let device = DeviceCase::upload(&client, case, &data, &o_ref, &lse_ref);
    let o_shape = [p.batch, p.num_heads, p.seq_q, p.val_dim];
    let o = filled(&client, &o_shape, Elem::Float(case.dtype), POISON);
    let lse = filled(&client, &o_shape[..3], Elem::Float(FloatKind::F32), POISON);
    let tensors = ForwardTensors {
        q: device.q.binding(),
        k: device.k.binding(),
        v: device.v.binding(),
        mask: device.mask.as_ref().map(DeviceTensor::binding),
        bias: device.bias.as_ref().map(DeviceTensor::binding),
        slopes: device.slopes.as_ref().map(DeviceTensor::binding),
        o: o.binding(),
        lse: lse.binding(),
    };
    let launched = match launch(&client, &p, tensors) {
        Ok(launched) => launched,
        Err(FlashError::Device(reason)) => {
            println!("SKIPPED {}: {reason}", case.name());
            return Ok(());
        }
        Err(e) => return Err(format!("{label}: valid problem refused: {e}")),
    };
    println!("case {} seed {seed}: {}", case.name(), launched);
    let oracle = reference::forward(&p, &data.inputs(), Precision::F64);
    let plain = reference::forward(&p, &data.inputs(), precision(case.dtype));
    check_forward(
        &label,
        &p,
        &read(&client, &o),
        &read(&client, &lse),
        &plain,
        &oracle,
    )
}

/// Runs the forward of every case, reports all failures at once.
pub fn run_forward_cases(cases: &[Case], launch: Launcher) {
    run_all(cases, |case| run_forward(case, launch));
}
