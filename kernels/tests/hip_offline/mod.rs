//! A device-free HIP "runtime": a `ComputeClient` that carries the DeviceProperties cubecl-hip
//! would read from an MI300X (gfx942), and nothing else. It lets the kernels expand (`define()`)
//! and compile to HIP C++ through `CppCompiler<HipDialect<_>>` exactly as `HipContext` does
//! before it hands the source to hiprtc, with no GPU and no ROCm installed. Every data-path
//! method of the server is unreachable: nothing is ever launched.
//!
//! The properties mirror `cubecl-hip-0.10.0/src/runtime.rs` (`HipServer::init`), with the
//! MI300X's constants in place of `hipGetDeviceProperties` results. `M` is the matrix-core
//! compiler: [`Intrinsics`] is cubecl-hip's default (no cmma on gfx9), [`RocWmma`] is what the
//! `hip-rocwmma` feature selects.
#![allow(dead_code)]

pub mod checks;
pub mod sources;
pub mod variants;

use core::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};

use cubecl::bytes::Bytes;
use cubecl::device::{Device, DeviceId, DeviceService, ServerUtilitiesHandle};
use cubecl::future::DynFut;
use cubecl::ir::{
    AddressType, ContiguousElements, DeviceProperties, HardwareProperties, MatrixLayout,
    MemoryDeviceProperties, MmaProperties, VectorSize, features::Plane,
};
use cubecl::prelude::*;
use cubecl::profile::{ProfileDuration, TimingMethod};
use cubecl::server::{
    Binding, CopyDescriptor, IoError, KernelArguments, ProfileError, ProfilingToken,
    ServerCommunication, ServerError, ServerUtilities,
};
use cubecl::stream_id::StreamId;
use cubecl::zspace::{Shape, Strides};
use cubecl::{CubeTask, ir::TargetProperties};
use cubecl_cpp::hip::{HipDialect, arch::AMDArchitecture, mma::contiguous_elements_rdna3};
use cubecl_cpp::register_supported_types;
use cubecl_cpp::shared::{
    Architecture, CompilationOptions, CppCompiler, CppSupportedFeatures, DialectWmmaCompiler,
    register_mma_features, register_scaled_mma_features, register_wmma_features,
};
use cubecl_runtime::allocator::PitchedMemoryLayoutPolicy;
use cubecl_runtime::kernel::KernelTask;
use cubecl_runtime::logging::ServerLogger;
use cubecl_runtime::memory_management::{ManagedMemoryHandle, MemoryAllocationMode, MemoryUsage};
use cubecl_runtime::server::ComputeServer;
use cubecl_runtime::storage::{ComputeStorage, ManagedResource, StorageHandle, StorageId};

pub use cubecl_cpp::hip::mma::{RocWmmaCompiler as RocWmma, WmmaIntrinsicCompiler as Intrinsics};

/// The MI300X's architecture name, as `hipDeviceProp_t::gcnArchName` reports it.
pub const GFX942: &str = "gfx942";
/// LDS per workgroup on CDNA3 (`hipDeviceAttributeMaxSharedMemoryPerBlock`).
pub const MI300X_LDS_BYTES: usize = 64 * 1024;
/// Work-items per workgroup on CDNA3 (`hipDeviceAttributeMaxThreadsPerBlock`).
const MI300X_MAX_UNITS_PER_CUBE: u32 = 1024;
/// `cubecl_hip::device::AMD_MAX_BINDINGS`.
const AMD_MAX_BINDINGS: u32 = 1024;
/// Byte alignment of device allocations (`hipDeviceProp_t::textureAlignment` on CDNA3).
const MI300X_ALIGNMENT: u64 = 256;
/// 192 GiB of HBM3, a quarter of it per page as cubecl-hip sets it.
const MI300X_MAX_PAGE_BYTES: u64 = 192 * (1 << 30) / 4;
/// Edge of the smallest cmma tile cubecl-hip advertises when any is registered.
const MIN_TENSOR_CORE_DIM: u32 = 16;
/// Bits per load cubecl-hip declares (`load_width`), whatever the device.
const LOAD_WIDTH_BITS: u32 = 128;
/// The same in bytes: the widest load contiguous rows are read in.
pub const GFX942_LOAD_BYTES: usize = LOAD_WIDTH_BITS as usize / 8;

/// A matrix-core compiler of cubecl's HIP dialect.
pub trait MatrixCores:
    DialectWmmaCompiler<HipDialect<Self>> + Default + Clone + core::fmt::Debug + Send + Sync + 'static
{
}
impl<M> MatrixCores for M where
    M: DialectWmmaCompiler<HipDialect<M>>
        + Default
        + Clone
        + core::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

pub type OfflineCompiler<M> = CppCompiler<HipDialect<M>>;

/// The properties cubecl-hip registers for `arch_name`, with the MI300X's sizes.
pub fn gfx942_properties<M: MatrixCores>(arch_name: &str) -> DeviceProperties {
    let arch = AMDArchitecture::parse(arch_name).expect("a known AMD architecture");
    let wmma =
        <HipDialect<M> as DialectWmmaCompiler<HipDialect<M>>>::supported_wmma_combinations(&arch);
    let mma =
        <HipDialect<M> as DialectWmmaCompiler<HipDialect<M>>>::supported_mma_combinations(&arch);
    let scaled =
        <HipDialect<M> as DialectWmmaCompiler<HipDialect<M>>>::supported_scaled_mma_combinations(
            &arch,
        );
    let hardware = HardwareProperties {
        load_width: LOAD_WIDTH_BITS,
        plane_size_min: arch.warp_size(),
        plane_size_max: arch.warp_size(),
        max_bindings: AMD_MAX_BINDINGS,
        max_shared_memory_size: MI300X_LDS_BYTES,
        max_cube_count: cubecl_max_cube_count(),
        max_units_per_cube: MI300X_MAX_UNITS_PER_CUBE,
        max_cube_dim: (
            MI300X_MAX_UNITS_PER_CUBE,
            MI300X_MAX_UNITS_PER_CUBE,
            MI300X_MAX_UNITS_PER_CUBE,
        ),
        num_streaming_multiprocessors: None,
        num_tensor_cores: None,
        min_tensor_cores_dim: (!wmma.is_empty()).then_some(MIN_TENSOR_CORE_DIM),
        num_cpu_cores: None,
        max_vector_size: VectorSize::MAX,
    };
    let memory = MemoryDeviceProperties {
        max_page_size: MI300X_MAX_PAGE_BYTES,
        alignment: MI300X_ALIGNMENT,
    };
    let mut props =
        DeviceProperties::new(Default::default(), memory, hardware, TimingMethod::System);
    register_supported_types(&mut props);
    props.features.memory_reinterpret = true;
    props.features.alignment = true;
    props.features.plane.insert(Plane::Ops);
    props.features.plane.insert(Plane::NonUniformControlFlow);
    register_wmma_features(wmma, &mut props);
    register_mma_features(mma, &mut props);
    register_scaled_mma_features(scaled, &mut props);
    props
}

/// `HipRuntime::max_cube_count()`.
fn cubecl_max_cube_count() -> (u32, u32, u32) {
    (i32::MAX as u32, u16::MAX as u32, u16::MAX as u32)
}

/// The options `HipServer::init` compiles with.
pub fn compilation_options(arch_name: &str) -> CompilationOptions {
    let arch = AMDArchitecture::parse(arch_name).expect("a known AMD architecture");
    CompilationOptions {
        warp_size: arch.warp_size(),
        supports_features: CppSupportedFeatures {
            fast_math: true,
            ..Default::default()
        },
    }
}

/// What the compiler produced for one kernel.
pub struct HipSource {
    /// The HIP C++ hiprtc would receive.
    pub source: String,
    /// Dynamic shared memory (bytes) `HipContext` would pass at launch.
    pub shared_memory_bytes: usize,
    /// Work-items per workgroup.
    pub cube_size: u32,
}

/// The device-free runtime.
#[derive(Debug, Clone, Default)]
pub struct OfflineHip<M>(PhantomData<M>);

impl<M: MatrixCores> OfflineHip<M> {
    /// A client that carries only the properties of `arch_name` (no device behind it).
    pub fn client_for(arch_name: &str) -> ComputeClient<Self> {
        static NEXT_DEVICE: AtomicU16 = AtomicU16::new(0);
        let props = gfx942_properties::<M>(arch_name);
        let logger = Arc::new(ServerLogger::default());
        let policy = PitchedMemoryLayoutPolicy::new(MI300X_ALIGNMENT as usize);
        let utilities = Arc::new(ServerUtilities::new(props, logger.clone(), (), policy));
        let device = OfflineDevice(NEXT_DEVICE.fetch_add(1, Ordering::Relaxed));
        ComputeClient::init(&device, OfflineServer::<M> { utilities, logger })
    }

    /// The path of `HipContext::compile_kernel` (cubecl-hip `context.rs`) up to, not including,
    /// `hiprtcCreateProgram`; unchecked, as the launchers launch.
    pub fn hip_source<K: CubeKernel>(kernel: K, arch_name: &str) -> Result<HipSource, String> {
        let task = KernelTask::<OfflineCompiler<M>, K>::new(kernel);
        let compiled = task
            .compile(
                &mut Default::default(),
                &compilation_options(arch_name),
                ExecutionMode::Unchecked,
                AddressType::U32.unsigned_type(),
            )
            .map_err(|error| error.to_string())?;
        let shared_memory_bytes = compiled
            .repr
            .as_ref()
            .map_or(0, |repr| repr.shared_memory_size());
        Ok(HipSource {
            source: compiled.source,
            shared_memory_bytes,
            cube_size: compiled.cube_dim.num_elems(),
        })
    }
}

impl<M: MatrixCores> Runtime for OfflineHip<M> {
    type Compiler = OfflineCompiler<M>;
    type Server = OfflineServer<M>;
    type Device = OfflineDevice;

    fn client(_: &Self::Device) -> ComputeClient<Self> {
        unreachable!("offline: build clients with OfflineHip::client_for")
    }
    fn name(_: &ComputeClient<Self>) -> &'static str {
        "hip-offline"
    }
    fn require_array_lengths() -> bool {
        true
    }
    fn max_cube_count() -> (u32, u32, u32) {
        cubecl_max_cube_count()
    }
    fn can_read_tensor(_: &Shape, _: &Strides) -> bool {
        false
    }
    /// `HipRuntime::target_properties()`: every kernel definition reads it.
    fn target_properties() -> TargetProperties {
        TargetProperties {
            mma: MmaProperties {
                register_size_bits: 32,
                const_plane_size: 32,
                register_layout_a: MatrixLayout::RowMajor,
                register_layout_b: MatrixLayout::ColMajor,
                register_layout_acc: MatrixLayout::ColMajor,
                register_duplication_a: 2,
                register_duplication_b: 2,
                register_duplication_acc: 1,
                contiguous_elements: ContiguousElements::new(contiguous_elements_rdna3),
            },
        }
    }
    fn enumerate_devices(_: u16, _: &()) -> Vec<DeviceId> {
        Vec::new()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct OfflineDevice(u16);

impl Device for OfflineDevice {
    fn from_id(id: DeviceId) -> Self {
        OfflineDevice(id.index_id)
    }
    fn to_id(&self) -> DeviceId {
        DeviceId {
            type_id: u16::MAX,
            index_id: self.0,
        }
    }
}

/// Storage that never allocates.
pub struct NoStorage;

impl ComputeStorage for NoStorage {
    type Resource = ();
    fn alignment(&self) -> usize {
        MI300X_ALIGNMENT as usize
    }
    fn get(&mut self, _: &StorageHandle) {}
    fn alloc(&mut self, _: u64) -> Result<StorageHandle, IoError> {
        unreachable!("offline: nothing is allocated")
    }
    fn dealloc(&mut self, _: StorageId) {}
    fn flush(&mut self) {}
}

pub struct OfflineServer<M: MatrixCores> {
    utilities: Arc<ServerUtilities<Self>>,
    logger: Arc<ServerLogger>,
}

impl<M: MatrixCores> core::fmt::Debug for OfflineServer<M> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("OfflineServer")
    }
}

impl<M: MatrixCores> DeviceService for OfflineServer<M> {
    fn init(_: DeviceId) -> Self {
        unreachable!("offline: build clients with OfflineHip::client_for")
    }
    fn utilities(&self) -> ServerUtilitiesHandle {
        self.utilities.clone() as ServerUtilitiesHandle
    }
}

impl<M: MatrixCores> ServerCommunication for OfflineServer<M> {
    const SERVER_COMM_ENABLED: bool = false;
}

/// Every data-path method: the offline client only compiles.
macro_rules! offline {
    () => {
        unreachable!("offline: no device behind this client")
    };
}

impl<M: MatrixCores> ComputeServer for OfflineServer<M> {
    type Kernel = Box<dyn CubeTask<OfflineCompiler<M>>>;
    type Info = ();
    type MemoryLayoutPolicy = PitchedMemoryLayoutPolicy;
    type Storage = NoStorage;

    fn initialize_memory(&mut self, _: ManagedMemoryHandle, _: u64, _: StreamId) {
        offline!()
    }
    fn logger(&self) -> Arc<ServerLogger> {
        self.logger.clone()
    }
    fn utilities(&self) -> Arc<ServerUtilities<Self>> {
        self.utilities.clone()
    }
    fn read(
        &mut self,
        _: Vec<CopyDescriptor>,
        _: StreamId,
    ) -> DynFut<Result<Vec<Bytes>, ServerError>> {
        offline!()
    }
    fn write(&mut self, _: Vec<(CopyDescriptor, Bytes)>, _: StreamId) {
        offline!()
    }
    fn sync(&mut self, _: StreamId) -> DynFut<Result<(), ServerError>> {
        offline!()
    }
    fn get_resource(
        &mut self,
        _: Binding,
        _: StreamId,
    ) -> Result<ManagedResource<()>, ServerError> {
        offline!()
    }
    unsafe fn launch(
        &mut self,
        _: Self::Kernel,
        _: CubeCount,
        _: KernelArguments,
        _: ExecutionMode,
        _: StreamId,
    ) {
        offline!()
    }
    fn flush(&mut self, _: StreamId) -> Result<(), ServerError> {
        Ok(())
    }
    fn memory_usage(&mut self, _: StreamId) -> Result<MemoryUsage, ServerError> {
        offline!()
    }
    fn memory_cleanup(&mut self, _: StreamId) {}
    fn start_profile(&mut self, _: StreamId) -> Result<ProfilingToken, ServerError> {
        offline!()
    }
    fn end_profile(
        &mut self,
        _: StreamId,
        _: ProfilingToken,
    ) -> Result<ProfileDuration, ProfileError> {
        offline!()
    }
    fn allocation_mode(&mut self, _: MemoryAllocationMode, _: StreamId) {}
}
