//! Rung 1 of the HIP ladder (docs/HIP.md): the forward and the backward on HIP against the f64
//! reference, on a few cases, where ROCm and an AMD GPU are present. Elsewhere (CI, any machine
//! without ROCm) every test prints why it is skipped and passes: touching
//! `HipRuntime::client` without the HIP libraries aborts the process, so nothing touches it
//! before [`hip_device`] says yes.
//!
//! `cargo test -p burn-flash-attn-kernels --no-default-features --features hip --test hip_runtime`
//! (`hip-rocwmma` instead of `hip` for the f16 matrix path on MI300X).
mod support;

use support::forward::run_forward_cases;
use support::planning;
use support::*;
use burn_flash_attn_kernels::problem::FloatKind::{BF16, F16, F32};

/// Why the HIP runtime cannot be used here, if it cannot.
fn hip_unavailable() -> Option<String> {
    if !cubecl_hip_sys::is_available() {
        return Some(
            "the HIP libraries (libamdhip64, libhiprtc) cannot be loaded: install ROCm or set ROCM_PATH"
                .to_string(),
        );
    }
    let mut devices = 0;
    // SAFETY: the HIP library is loaded (checked above); `devices` outlives the call.
    let status = unsafe { cubecl_hip_sys::hipGetDeviceCount(&mut devices) };
    match (status == cubecl_hip_sys::HIP_SUCCESS, devices) {
        (true, 0) | (false, _) => Some(format!(
            "ROCm is installed but reports no AMD GPU (status {status})"
        )),
        _ => None,
    }
}

/// Whether to run; prints the reason when not.
fn hip_device(test: &str) -> bool {
    match hip_unavailable() {
        Some(reason) => {
            println!("SKIPPED {test}: {reason}");
            false
        }
        None => true,
    }
}

#[test]
fn hip_forward_smoke() {
    if !hip_device("hip_forward_smoke") {
        return;
    }
    run_forward_cases(
        &[
            Case::new(F16, 113, 203, 64).causal(),
            Case::new(BF16, 203, 113, 128)
                .mask(MaskPattern::RandomWithMaskedRows)
                .bias(),
            Case::new(F32, 77, 90, 33).val_dim(80).softcap(2.0),
            Case::new(F16, 1024, 1023, 128)
                .causal()
                .mask_u8(MaskPattern::Random),
            Case::new(BF16, 65, 70, 256).heads(2, 3).transposed(),
        ],
        &|client, problem, tensors| planning::launch_forward(client, problem, tensors),
    );
}

#[test]
fn hip_backward_smoke() {
    if !hip_device("hip_backward_smoke") {
        return;
    }
    run_cases(&[
        Case::new(F32, 113, 203, 64).causal(),
        Case::new(F16, 128, 217, 128),
        Case::new(BF16, 37, 29, 31)
            .mask(MaskPattern::RandomWithMaskedRows)
            .bias()
            .softcap(4.0),
        Case::new(F32, 65, 70, 256).causal(),
    ]);
}
