//! The runtime the tests run on, its client, and simulated devices for the planner.
use burn_flash_attn_kernels::problem::FloatKind;
use cubecl::prelude::*;

/// The runtime the kernel tests run on: wgpu by default (lavapipe on CPU-only machines),
/// CUDA with `--no-default-features --features cuda`, HIP with `--features hip` (on a machine
/// with ROCm and an AMD GPU: without them, touching the HIP runtime aborts the process; only
/// `tests/hip_runtime.rs` checks first).
#[cfg(feature = "cuda")]
pub type TestRuntime = cubecl::cuda::CudaRuntime;
#[cfg(all(feature = "hip", not(feature = "cuda")))]
pub type TestRuntime = cubecl::hip::HipRuntime;
#[cfg(not(any(feature = "cuda", feature = "hip")))]
pub type TestRuntime = cubecl::wgpu::WgpuRuntime;

pub type Client = ComputeClient<TestRuntime>;

/// The client of the default device.
pub fn client() -> Client {
    TestRuntime::client(&Default::default())
}

/// Edge of the cmma tiles the simulated devices register (16x16x16).
const CMMA_EDGE: u32 = 16;
/// H100 / H200: 227 KiB of shared memory per block (opt-in), 32 lanes per plane.
pub const H200_SHARED_MEMORY: usize = 227 * 1024;
pub const H200_PLANE_SIZE: u32 = 32;
/// MI300X: 64 KiB of LDS, wave64.
pub const MI300X_SHARED_MEMORY: usize = 64 * 1024;
pub const MI300X_PLANE_SIZE: u32 = 64;

/// `base` turned into another device for the planner: its plane size, shared memory, the
/// storage types the C++ runtimes register (bf16, u8), and 16x16x16 cmma with f32 accumulation
/// for `cmma_dtypes` only (the base device's own cmma configs are dropped: on CUDA it registers
/// bf16 too).
pub fn simulated_device(
    base: &cubecl::ir::DeviceProperties,
    plane_size: u32,
    shared_memory: usize,
    cmma_dtypes: &[FloatKind],
) -> cubecl::ir::DeviceProperties {
    use burn_flash_attn_kernels::plan::elem_type;
    use cubecl::ir::{ElemType, FloatKind as IrFloatKind, features::MmaConfig};

    let mut props = base.clone();
    props.hardware.plane_size_min = plane_size;
    props.hardware.plane_size_max = plane_size;
    props.hardware.max_shared_memory_size = shared_memory;
    cubecl_cpp::register_supported_types(&mut props);
    props.features.matmul.cmma.clear();
    for &dtype in cmma_dtypes {
        let elem = elem_type(dtype).into();
        props.features.matmul.cmma.insert(MmaConfig {
            a_type: elem,
            b_type: elem,
            cd_type: ElemType::Float(IrFloatKind::F32).into(),
            m: CMMA_EDGE,
            k: CMMA_EDGE,
            n: CMMA_EDGE,
        });
    }
    props
}

/// An H200 (f16 and bf16 cmma, and the register-level 16x8x16 mma) built on `base`.
pub fn h200(base: &cubecl::ir::DeviceProperties) -> cubecl::ir::DeviceProperties {
    use burn_flash_attn_kernels::plan::elem_type;
    use cubecl::ir::{ElemType, FloatKind as IrFloatKind, features::MmaConfig};

    let dtypes = [FloatKind::F16, FloatKind::BF16];
    let mut props = simulated_device(base, H200_PLANE_SIZE, H200_SHARED_MEMORY, &dtypes);
    // sm_90 copies global to shared memory asynchronously (cp.async): the planner streams by it.
    props.features.copy_async = true;
    // Plane shuffles, votes and `__syncwarp`, as CubeCL's CUDA runtime registers them.
    props.features.plane.insert(cubecl::ir::features::Plane::Ops);
    props.features.plane.insert(cubecl::ir::features::Plane::Sync);
    // And adds 1, 2 and 4 f32 per atomic request (the one-pass backward's dQ), as CubeCL's CUDA
    // runtime registers them there.
    for width in [1, 2, 4] {
        let f32_atomic = cubecl::ir::Type::new(cubecl::ir::StorageType::Atomic(ElemType::Float(IrFloatKind::F32)));
        props.register_atomic_type_usage(
            f32_atomic.with_vector_size(width),
            cubecl::ir::features::AtomicUsage::Add | cubecl::ir::features::AtomicUsage::LoadStore,
        );
    }
    props.features.matmul.mma.clear();
    for dtype in dtypes {
        let elem = elem_type(dtype).into();
        props.features.matmul.mma.insert(MmaConfig {
            a_type: elem,
            b_type: elem,
            cd_type: ElemType::Float(IrFloatKind::F32).into(),
            m: 16,
            n: 8,
            k: 16,
        });
    }
    props
}

/// An MI300X with `hip-rocwmma` (f16 cmma only: bf16 does not compile) built on `base`.
pub fn mi300x(base: &cubecl::ir::DeviceProperties) -> cubecl::ir::DeviceProperties {
    let mut props = simulated_device(base, MI300X_PLANE_SIZE, MI300X_SHARED_MEMORY, &[FloatKind::F16]);
    // Plane shuffles and votes but no plane sync, as CubeCL's HIP runtime registers them.
    props.features.plane.insert(cubecl::ir::features::Plane::Ops);
    props.features.plane.remove(cubecl::ir::features::Plane::Sync);
    props
}
