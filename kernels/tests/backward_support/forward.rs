//! The forward pass on this suite's cases, checked as `tests/forward/` checks it: o with the
//! output rule, the lse of rows that see a key, fully masked rows exactly 0 with lse =
//! `FULLY_MASKED_LSE`. For the suites that run the forward and the backward on one runtime
//! (`tests/wave64.rs`, `tests/hip_runtime.rs`).
use burn_flash_attn_kernels::FlashError;
use burn_flash_attn_kernels::forward::ForwardTensors;
use burn_flash_attn_kernels::plan::ForwardPlan;
use burn_flash_attn_kernels::primitives::online_softmax::FULLY_MASKED_LSE;
use burn_flash_attn_kernels::problem::{AttentionProblem, FloatKind};
use burn_flash_attn_kernels::reference::{self, Precision};
use burn_flash_attn_kernels::tolerance::{OUTPUT_FACTOR, check};
use cubecl::prelude::*;

use super::*;

/// Plans and launches the forward of one problem on poisoned outputs; returns the plan.
pub type Launcher<'a> = &'a dyn Fn(
    &ComputeClient<TestRuntime>,
    &AttentionProblem,
    ForwardTensors<TestRuntime>,
) -> Result<ForwardPlan, FlashError>;

/// Runs the forward of `case` through `launch`; a problem the device refuses
/// (`FlashError::Device`) is skipped with its reason.
pub fn run_forward(case: &Case, launch: Launcher) -> Result<(), String> {
    let client = client();
    if !supported(&client, case) {
        return Ok(());
    }
    let p = case.problem();
    let seed = case.seed();
    let data = HostData::draw(case, seed);
    let (o_ref, lse_ref) = forward_outputs(case, &data);
    let device = DeviceCase::upload(&client, case, &data, &o_ref, &lse_ref);
    let o_shape = [p.batch, p.num_heads, p.seq_q, p.val_dim];
    let lse_shape = [p.batch, p.num_heads, p.seq_q];
    let poison = |len: usize| vec![f64::NAN; len];
    let o = upload_float(
        &client,
        case.dtype,
        &poison(o_shape.iter().product()),
        &o_shape,
        Layout::Contiguous,
        Role::Rows,
    );
    let lse = upload(
        &client,
        &poison(p.heads_total() * p.seq_q),
        &lse_shape,
        Layout::Contiguous,
        Role::Stats,
        |x| x as f32,
    );
    let tensors = ForwardTensors {
        q: device.q.binding(),
        k: device.k.binding(),
        v: device.v.binding(),
        mask: device.mask.as_ref().map(DeviceTensor::binding),
        bias: device.bias.as_ref().map(DeviceTensor::binding),
        o: o.binding(),
        lse: lse.binding(),
    };
    let launched = match launch(&client, &p, tensors) {
        Ok(launched) => launched,
        Err(FlashError::Device(reason)) => {
            println!("SKIPPED {}: {reason}", case.name());
            return Ok(());
        }
        Err(e) => return Err(format!("{}: valid problem refused: {e}", case.name())),
    };
    println!("case {} seed {seed}: {}", case.name(), launched);
    let got_o = read_float(&client, case.dtype, &o);
    let got_lse = read_float(&client, FloatKind::F32, &lse);
    let oracle = reference::forward(&p, &data.inputs(), Precision::F64);
    let plain = reference::forward(&p, &data.inputs(), precision(case.dtype));
    check(
        &format!("{} o", case.name()),
        &got_o,
        &plain.o,
        &oracle.o,
        OUTPUT_FACTOR,
        precision(case.dtype),
    )?;
    let mut visible = (Vec::new(), Vec::new(), Vec::new());
    for row in 0..got_lse.len() {
        if oracle.lse[row].is_infinite() {
            let o_row = &got_o[row * p.val_dim..(row + 1) * p.val_dim];
            if got_lse[row] != FULLY_MASKED_LSE as f64 || o_row.iter().any(|&x| x != 0.0) {
                return Err(format!(
                    "{}: fully masked row {row}: lse {}, o {o_row:?}",
                    case.name(),
                    got_lse[row]
                ));
            }
        } else {
            visible.0.push(got_lse[row]);
            // No f32 output can be closer than the plain lse rounded to f32.
            visible.1.push(Precision::F32.round(plain.lse[row]));
            visible.2.push(oracle.lse[row]);
        }
    }
    check(
        &format!("{} lse", case.name()),
        &visible.0,
        &visible.1,
        &visible.2,
        OUTPUT_FACTOR,
        precision(case.dtype),
    )
}

/// Runs the forward of every case, reports all failures at once.
pub fn run_forward_cases(cases: &[Case], launch: Launcher) {
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|case| run_forward(case, launch).err())
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
