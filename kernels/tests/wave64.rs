//! Rung 4 of the HIP ladder (docs/HIP.md): the kernels as an MI300X plans them, run on the
//! test device against the f64 reference.
//!
//! The planners get the test device's properties with a 64-wide plane and at most 64 KiB of
//! shared memory (the MI300X's wave64 and LDS); the kernels then run with those plans
//! ([`flash_attention_forward`] with a plan for a wave64 device, and the backward kernels with planned configs). On a
//! device with cmma (CUDA) the f16 / bf16 forward takes the matrix path with 64-unit "planes":
//! two 32-wide warps compute each plane's 16 rows redundantly, which stays correct and runs the
//! wave64 index arithmetic (4 units per row, plane `UNIT_POS_Y`, 256-unit cubes). On lavapipe
//! (no cmma) the portable forward and the backward run with the MI300X's block sizes where its
//! 32 KiB of shared memory allows; on CUDA the f16 / bf16 backward takes the matrix kernels
//! with 64-unit planes, as an MI300X with rocWMMA would for f16. The register-level mma paths
//! need 32-wide planes: a wave64 plan never picks them.
//!
//! `cargo test -p burn-flash-attn-kernels --test wave64` (CUDA: `--no-default-features
//! --features cuda`).
mod support;

use support::forward::run_forward_cases;
use support::planning;
use support::*;
use burn_flash_attn_kernels::backward::config::GradientConfig;
use burn_flash_attn_kernels::backward::flash_attention_backward;
use burn_flash_attn_kernels::config::MATRIX_TILE;
use burn_flash_attn_kernels::forward::{ForwardTensors, flash_attention_forward};
use burn_flash_attn_kernels::plan::{self, DeviceCaps, ForwardPlan};
use burn_flash_attn_kernels::problem::FloatKind::{BF16, F16, F32};
use burn_flash_attn_kernels::problem::AttentionProblem;
use burn_flash_attn_kernels::reference::{self, Precision};
use burn_flash_attn_kernels::{FlashError, ForwardConfig};
use cubecl::ir::DeviceProperties;
use cubecl::ir::features::Plane;
use cubecl::prelude::*;

/// Units per wave on AMD CDNA (gfx942).
const WAVE64: u32 = 64;
/// LDS per workgroup on the MI300X.
const MI300X_LDS_BYTES: usize = 64 * 1024;

/// The test device's properties as an MI300X would present them to the planners: wave64
/// planes without a plane sync, at most 64 KiB of shared memory; the device's own cmma and
/// types.
fn wave64(device: &DeviceProperties) -> DeviceProperties {
    let mut props = device.clone();
    props.hardware.plane_size_min = WAVE64;
    props.hardware.plane_size_max = WAVE64;
    props.hardware.max_shared_memory_size =
        device.hardware.max_shared_memory_size.min(MI300X_LDS_BYTES);
    // HIP has no plane sync in CubeCL 0.10 (and on CUDA a 64-unit plane is two warps, which
    // `__syncwarp` would not join): the kernels synchronize the cube wherever an MI300X would.
    props.features.plane.remove(Plane::Sync);
    props
}

/// Plans the forward as for an MI300X, checks the wave64 split, launches that plan.
fn launch_wave64(
    client: &ComputeClient<TestRuntime>,
    problem: &AttentionProblem,
    tensors: ForwardTensors<TestRuntime>,
) -> Result<ForwardPlan, FlashError> {
    let plan = planning::forward_plan(&wave64(client.properties()), problem, None)?;
    if let ForwardConfig::Matrix(matrix) = plan.config {
        assert_eq!(matrix.plane_size, WAVE64, "a wave64 matrix plan");
        assert_eq!(
            matrix.units_per_row(),
            WAVE64 / MATRIX_TILE,
            "4 units per query row"
        );
    }
    flash_attention_forward(client, problem, &plan, tensors)?;
    Ok(plan)
}

/// Runs the backward of `case` (preprocess, dK/dV, dQ) with the wave64 plans: portable where
/// the device has no cmma (lavapipe), the matrix kernels with 64-unit planes for f16 / bf16
/// where it has (CUDA: two warps compute each plane's tiles redundantly, as in the forward).
fn backward(case: &Case) -> Result<(), String> {
    let client = client();
    if !supported(&client, case) {
        return Ok(());
    }
    let p = case.problem();
    let props = wave64(client.properties());
    let seed = case.seed();
    let data = HostData::draw(case, seed);
    let (o, lse) = forward_outputs(case, &data);
    let device = DeviceCase::upload(&client, case, &data, &o, &lse);
    let layout = device.tensors().layout(p.dtype);
    let caps = DeviceCaps::new(&props, planning::SIMULATED);
    let plan = plan::backward::backward(&caps, &p, layout, &planning::tuning())
        .map_err(|e| format!("{}: {e}", case.label()))?;
    println!("case {} seed {seed}: {plan}", case.name());
    for gradient in [&plan.dkdv, &plan.dq] {
        match gradient.config {
            GradientConfig::Mma(_) => panic!("a wave64 plan took the mma path"),
            GradientConfig::Matrix(config) => assert_eq!(config.plane_size, WAVE64, "a wave64 matrix plan"),
            GradientConfig::Portable(_) => {}
        }
    }
    flash_attention_backward(&client, &p, &plan, device.tensors()).map_err(|e| format!("{}: {e}", case.label()))?;
    let oracle = reference::backward(&p, &data.inputs(), &data.d_out, Precision::F64);
    let plain = reference::backward(&p, &data.inputs(), &data.d_out, precision(case.dtype));
    for (what, tensor, plain, oracle) in [
        ("dq", &device.dq, &plain.dq, &oracle.dq),
        ("dk", &device.dk, &plain.dk, &oracle.dk),
        ("dv", &device.dv, &plain.dv, &oracle.dv),
    ] {
        check_gradient(
            &case.label(),
            what,
            &read(&client, tensor),
            plain,
            oracle,
            case.dtype,
        )?;
    }
    Ok(())
}

fn backward_cases(cases: &[Case]) {
    run_all(cases, backward);
}

#[test]
fn forward_wave64_tails_and_head_dims() {
    run_forward_cases(
        &[
            Case::new(F32, 1, 1, 32),
            Case::new(F16, 1, 1, 32),
            Case::new(F32, 113, 203, 64),
            Case::new(F16, 113, 203, 64),
            Case::new(BF16, 113, 203, 64),
            Case::new(F16, 77, 90, 33).val_dim(80),
            Case::new(F32, 65, 70, 256).val_dim(48),
            Case::new(F16, 113, 77, 256),
            Case::new(F16, 1024, 1023, 128),
        ],
        &launch_wave64,
    );
}

#[test]
fn forward_wave64_causal_mask_bias_softcap() {
    run_forward_cases(
        &[
            Case::new(F16, 203, 113, 64).causal(),
            Case::new(F32, 113, 203, 64).causal(),
            Case::new(BF16, 128, 1023, 128).causal(),
            Case::new(F16, 113, 203, 64).mask(MaskPattern::RandomWithMaskedRows),
            Case::new(F16, 203, 113, 64)
                .causal()
                .mask(MaskPattern::Random)
                .bias()
                .softcap(2.0),
            Case::new(F32, 77, 203, 33)
                .val_dim(80)
                .causal()
                .mask(MaskPattern::RandomWithMaskedRows)
                .bias()
                .softcap(2.0),
            Case::new(F16, 113, 203, 96).heads(2, 2).transposed(),
            Case::new(F16, 203, 113, 64)
                .causal()
                .mask_u8(MaskPattern::Random)
                .bias(),
        ],
        &launch_wave64,
    );
}

#[test]
fn backward_wave64_shapes_and_options() {
    backward_cases(&[
        Case::new(F32, 1, 1, 64),
        Case::new(F32, 113, 203, 64).causal(),
        Case::new(F32, 203, 113, 64).causal(),
        Case::new(F16, 128, 217, 128),
        Case::new(F32, 65, 70, 256).causal(),
        Case::new(F32, 37, 29, 31)
            .mask(MaskPattern::RandomWithMaskedRows)
            .bias(),
        Case::new(F16, 45, 58, 24).softcap(5.0).scale(0.7).causal(),
        Case::new(BF16, 65, 33, 80).val_dim(40).causal(),
        Case::new(F32, 33, 47, 32).heads(2, 3).transposed(),
    ]);
}
