//! The backend, chosen at compile time by cargo features. The two runs of the experiment differ
//! by one type: [`Selected`] is [`FlashTrain`] with the `flash` feature and [`Train`] without.
//!
//! ```text
//! features           runtime X                    float
//! wgpu (default)     Fusion<CubeBackend<Wgpu>>    f32 unless bf16 / f16
//! cuda               Fusion<CubeBackend<Cuda>>
//! rocm               Fusion<CubeBackend<Hip>>
//! ```
use burn::backend::Autodiff;
use burn_flash_attn::Flash;

#[cfg(not(any(feature = "wgpu", feature = "cuda", feature = "rocm")))]
compile_error!("flash-gpt needs one runtime feature: `wgpu`, `cuda` or `rocm`");

/// The float type of every tensor (parameters, activations, optimizer state).
#[cfg(feature = "bf16")]
pub type Float = half::bf16;
#[cfg(all(feature = "f16", not(feature = "bf16")))]
pub type Float = half::f16;
#[cfg(not(any(feature = "bf16", feature = "f16")))]
pub type Float = f32;

/// The CubeCL runtime under the backend, for the memory probe.
#[cfg(feature = "wgpu")]
pub type Runtime = cubecl::wgpu::WgpuRuntime;
#[cfg(all(feature = "cuda", not(feature = "wgpu")))]
pub type Runtime = cubecl::cuda::CudaRuntime;
#[cfg(all(feature = "rocm", not(any(feature = "wgpu", feature = "cuda"))))]
pub type Runtime = cubecl::hip::HipRuntime;

/// X: Burn's fused CubeCL backend on the selected runtime.
#[cfg(feature = "wgpu")]
pub type Inner = burn::backend::Wgpu<Float>;
#[cfg(all(feature = "cuda", not(feature = "wgpu")))]
pub type Inner = burn::backend::Cuda<Float>;
#[cfg(all(feature = "rocm", not(any(feature = "wgpu", feature = "cuda"))))]
pub type Inner = burn::backend::Rocm<Float>;

/// Training with Burn's own attention (the fallback run).
pub type Train = Autodiff<Inner>;
/// Training with the FlashAttention-2 kernels (the flash run).
pub type FlashTrain = Flash<Autodiff<Inner>>;

/// The backend of this build.
#[cfg(feature = "flash")]
pub type Selected = FlashTrain;
#[cfg(not(feature = "flash"))]
pub type Selected = Train;

/// Names the build in logs and CSV file names: `flash` or `fallback`, and the float type.
pub fn variant() -> &'static str {
    if cfg!(feature = "flash") { "flash" } else { "fallback" }
}

pub fn float_name() -> &'static str {
    if cfg!(feature = "bf16") {
        "bf16"
    } else if cfg!(feature = "f16") {
        "f16"
    } else {
        "f32"
    }
}

/// The device of [`Inner`].
pub type Device = burn::tensor::Device<Inner>;

/// `count` devices of the selected runtime, the first being the default one: GPU 0..count on
/// CUDA and ROCm; on WGPU the default adapter alone, or discrete GPUs 0..count.
pub fn devices(count: usize) -> Vec<Device> {
    let count = count.max(1);
    #[cfg(feature = "wgpu")]
    let devices = if count == 1 {
        vec![Device::default()]
    } else {
        (0..count).map(burn::backend::wgpu::WgpuDevice::DiscreteGpu).collect()
    };
    #[cfg(all(feature = "cuda", not(feature = "wgpu")))]
    let devices = (0..count).map(|index| burn::backend::cuda::CudaDevice { index }).collect();
    #[cfg(all(feature = "rocm", not(any(feature = "wgpu", feature = "cuda"))))]
    let devices = (0..count).map(|index| burn::backend::rocm::RocmDevice { index }).collect();
    devices
}
