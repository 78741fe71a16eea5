//! Device-free CUDA source generation for the CUDA-only kernel paths (matrix, mma): a kernel
//! expanded for simulated H200 properties and compiled to CUDA C++ by cubecl's own compiler,
//! as cubecl-cuda's runtime would before handing it to nvrtc.
use cubecl::prelude::*;
use cubecl_cpp::cuda::CudaDialect;
use cubecl_cpp::cuda::mma::CudaWmmaCompiler;
use cubecl_cpp::shared::{CompilationOptions, CppCompiler, CppSupportedFeatures};
use cubecl_runtime::kernel::KernelTask;

/// The CUDA C++ of `kernel` and the dynamic shared memory it declares, in bytes, unchecked as
/// `launch_unchecked` compiles it (checked indexing adds a clamp and a select to every load,
/// which changes registers and instruction counts). Compilation
/// options as cubecl-cuda's runtime sets them (plane size 32, fast math on).
pub fn cuda_source<K: CubeKernel>(kernel: K) -> (String, usize) {
    let task = KernelTask::<CppCompiler<CudaDialect<CudaWmmaCompiler>>, _>::new(kernel);
    let options = CompilationOptions {
        warp_size: super::runtime::H200_PLANE_SIZE,
        supports_features: CppSupportedFeatures {
            fast_math: true,
            ..Default::default()
        },
    };
    let compiled = cubecl::CubeTask::compile(
        &task,
        &mut Default::default(),
        &options,
        ExecutionMode::Unchecked,
        AddressType::U32.unsigned_type(),
    )
    .expect("CUDA compilation of a kernel");
    let shared = compiled.repr.as_ref().map(|r| r.shared_memory_size()).unwrap_or(0);
    (compiled.source, shared)
}

/// Kernel settings of a launch with `cube_dim`, 32-bit addresses.
pub fn settings(cube_dim: CubeDim) -> KernelSettings {
    KernelSettings::default()
        .cube_dim(cube_dim)
        .address_type(AddressType::U32)
}

/// Writes `source` to `$FLASH_DUMP_DIR/name` when that variable is set (e.g. to compile the
/// sources with nvcc).
pub fn dump(name: &str, source: &str) {
    if let Ok(dir) = std::env::var("FLASH_DUMP_DIR") {
        std::fs::write(format!("{dir}/{name}"), source).expect("dump the CUDA source");
    }
}

/// What every generated kernel must be (`what` names it in a failure): free of `#error`, within
/// an H200's shared memory, and declaring exactly the shared memory its planner counted.
pub fn assert_fits_the_plan(what: &str, source: &str, shared: usize, planned: usize) {
    assert!(!source.contains("#error"), "{what}: #error in the source");
    assert!(shared <= super::H200_SHARED_MEMORY, "{what}: {shared} bytes of shared memory");
    assert_eq!(shared, planned, "{what}: planner's shared memory estimate");
}
