//! Backend aliases, seeded inputs and comparisons shared by the conformance tests.
use burn::tensor::{Bool, Tensor, TensorData, backend::Backend};
use burn_autodiff::Autodiff;
use burn_cubecl::CubeBackend;
use burn_flash_attn::Flash;
use burn_fusion::Fusion;
use rand::{Rng, SeedableRng, rngs::StdRng};

#[cfg(feature = "wgpu")]
pub type Runtime = cubecl::wgpu::WgpuRuntime;
#[cfg(all(feature = "cuda", not(feature = "wgpu")))]
pub type Runtime = cubecl::cuda::CudaRuntime;
#[cfg(all(feature = "rocm", not(any(feature = "wgpu", feature = "cuda"))))]
pub type Runtime = cubecl::hip::HipRuntime;

/// Why the runtime cannot be touched here, if it cannot: HIP needs ROCm and an AMD GPU, and
/// touching `HipRuntime` without them aborts the process. WGPU and CUDA always answer `None`.
pub fn device_unavailable() -> Option<String> {
    #[cfg(all(feature = "rocm", not(any(feature = "wgpu", feature = "cuda"))))]
    {
        if !cubecl_hip_sys::is_available() {
            return Some("the HIP libraries (libamdhip64, libhiprtc) cannot be loaded".to_string());
        }
        let mut devices = 0;
        // SAFETY: the HIP library is loaded (checked above); `devices` outlives the call.
        let status = unsafe { cubecl_hip_sys::hipGetDeviceCount(&mut devices) };
        if status != cubecl_hip_sys::HIP_SUCCESS || devices == 0 {
            return Some(format!("ROCm reports no AMD GPU (status {status})"));
        }
    }
    None
}

/// Whether `test` must be skipped for want of a device (the reason is printed).
pub fn skip_without_device(test: &str) -> bool {
    let reason = device_unavailable();
    if let Some(reason) = &reason {
        println!("SKIPPED {test}: {reason}");
    }
    reason.is_some()
}

/// The plain CubeCL backend, f32.
pub type Cube = CubeBackend<Runtime, f32, i32, u32>;
/// What Burn users run: the fused backend.
pub type Inner = Fusion<Cube>;
pub type FlashInner = Flash<Inner>;
pub type Train = Autodiff<Inner>;
pub type FlashTrain = Flash<Autodiff<Inner>>;

pub fn device<B: Backend>() -> B::Device {
    Default::default()
}

/// Seeded uniform values in [-1, 1): never zeros, and the seed is printed.
pub fn random_data(shape: [usize; 4], seed: u64) -> TensorData {
    println!("inputs {shape:?}: seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let values: Vec<f32> = (0..shape.iter().product()).map(|_| rng.random_range(-1.0..1.0)).collect();
    TensorData::new(values, shape)
}

/// A mask with about `fraction` of the positions masked (`true`).
pub fn random_mask(shape: [usize; 4], fraction: f64, seed: u64) -> TensorData {
    let mut rng = StdRng::seed_from_u64(seed);
    let values: Vec<bool> = (0..shape.iter().product()).map(|_| rng.random_bool(fraction)).collect();
    TensorData::new(values, shape)
}

pub fn float<B: Backend, const D: usize>(data: &TensorData) -> Tensor<B, D> {
    Tensor::from_data(data.clone(), &device::<B>())
}

pub fn bool4<B: Backend>(data: &TensorData) -> Tensor<B, 4, Bool> {
    Tensor::from_data(data.clone(), &device::<B>())
}

pub fn to_f64(data: TensorData) -> Vec<f64> {
    data.convert::<f64>().to_vec::<f64>().expect("f64 data")
}

pub fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| if x.is_nan() || y.is_nan() { f64::INFINITY } else { (x - y).abs() }).fold(0.0, f64::max)
}

/// `mask` (`true` = masked, its last dimension the keys) with key 0 visible on the flat `rows`:
/// how the plain implementation (Burn 0.21's autodiff attention, which reads out of bounds on a
/// fully masked row) runs the rows that see no key; their d_out is zeroed beside it.
pub fn first_key_visible(mask: &TensorData, rows: &[usize]) -> TensorData {
    let (mut values, seq_kv) = (mask.to_vec::<bool>().expect("bool mask"), mask.shape[mask.shape.len() - 1]);
    for &row in rows {
        values[row * seq_kv] = false;
    }
    TensorData::new(values, mask.shape.clone())
}
