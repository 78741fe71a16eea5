//! What the planner knows of a device: its properties as the kernels may use them.
//!
//! Reference devices: lavapipe (32 KiB shared memory, no cmma, plane size 8), MI300X (64 KiB
//! LDS, wave64, cmma only with `hip-rocwmma` and only f16), H100/H200 (227 KiB, cmma and the
//! register-level mma for f16/bf16, plane size 32).

use cubecl::ir::features::{AtomicUsage, MmaConfig, Plane};
use cubecl::ir::{DeviceProperties, ElemType, FloatKind as IrFloatKind, HardwareProperties, StorageType};
use cubecl::prelude::*;

use crate::config::MATRIX_TILE;
use crate::error::FlashError;
use crate::primitives::mma::{LANES, TILE_M, TILE_N};
use crate::problem::{AttentionProblem, FloatKind, MaskKind};

/// The manual MMA shape of the mma paths (m16n8k16, PTX fragment layout).
const MMA_SHAPE: (u32, u32, u32) = (TILE_M, TILE_N, TILE_M);
/// The plane size the PTX m16n8k16 fragment layout assumes.
pub(crate) const MMA_PLANE_SIZE: u32 = LANES;

/// A device's properties as the planner uses them. Build it from a client
/// ([`DeviceCaps::of`]) or, to plan for a device that is not here (tests, the MI300X plans),
/// from properties and the runtime's name ([`DeviceCaps::new`]).
#[derive(Debug, Clone, Copy)]
pub struct DeviceCaps<'a> {
    props: &'a DeviceProperties,
    /// The runtime registers bf16 cmma that does not compile (HIP with rocWMMA, see
    /// [`DeviceCaps::new`]): the planner treats it as absent.
    bf16_cmma_broken: bool,
}

impl<'a> DeviceCaps<'a> {
    /// The capabilities of `client`'s device.
    pub fn of<R: Runtime>(client: &'a ComputeClient<R>) -> Self {
        Self::new(client.properties(), R::name(client))
    }

    /// The capabilities of a device with `props` on the runtime named `runtime`
    /// (`Runtime::name`). cubecl-hip with `hip-rocwmma` registers bf16 16x16x16 cmma, but its
    /// bf16 fragments do not compile (rocWMMA has no `PackTraits<__hip_bfloat16>`; docs/HIP.md):
    /// on HIP runtimes those configs count as absent, so bf16 takes the portable path there.
    /// Nothing is copied: planning borrows the properties.
    pub fn new(props: &'a DeviceProperties, runtime: &str) -> Self {
        Self { props, bf16_cmma_broken: runtime.starts_with("hip") }
    }

    /// The properties the plans are made from (as the runtime reports them; see
    /// [`DeviceCaps::has_matrix_units`] for the cmma configs the planner ignores).
    pub fn properties(&self) -> &DeviceProperties {
        self.props
    }

    /// Shared memory of one cube, in bytes.
    pub fn shared_memory(&self) -> usize {
        self.props.hardware.max_shared_memory_size
    }

    /// Units of one cube, at most.
    pub fn max_units(&self) -> u32 {
        self.props.hardware.max_units_per_cube
    }

    /// Units of one plane (the largest the device may use).
    pub fn plane_size(&self) -> u32 {
        self.props.hardware.plane_size_max
    }

    /// Whether plane operations (shuffles, votes) exist: CUDA and HIP register them, WGPU only
    /// on GPU adapters with subgroups (not lavapipe).
    pub fn has_plane_ops(&self) -> bool {
        self.props.features.plane.contains(Plane::Ops)
    }

    /// Whether a plane can synchronize alone (`sync_plane`): CUDA (`__syncwarp`) and Vulkan;
    /// not HIP, where CubeCL 0.10 has no plane sync.
    pub fn has_plane_sync(&self) -> bool {
        self.props.features.plane.contains(Plane::Sync)
    }

    /// Whether `cp.async` copies into shared memory exist (the mma paths' streams).
    pub fn copy_async(&self) -> bool {
        self.props.features.copy_async
    }

    /// Whether the device adds to f32 in global memory atomically (the one-pass backward's dQ,
    /// [`crate::plan::DqAccumulation::Atomic`]): CUDA and HIP do; WGPU where the adapter has
    /// `SHADER_FLOAT32_ATOMIC` (lavapipe does).
    pub fn has_atomic_f32_add(&self) -> bool {
        self.has_atomic_f32_add_of(1)
    }

    /// Whether the device adds `width` adjacent f32 (aligned to `4 width` bytes) in global memory
    /// with one atomic request: 1 wherever [`Self::has_atomic_f32_add`]; 2 and 4 where CubeCL
    /// registers them (CUDA sm_90 and later: `red.global.add.v2.f32` / `.v4.f32`). The one-pass
    /// mma backward adds dQ in such vectors ([`crate::backward::dq_sink`]), fewer L2 atomic
    /// requests.
    pub fn has_atomic_f32_add_of(&self, width: u32) -> bool {
        atomic_f32_add_of(self.props, width)
    }

    /// Whether the device computes in f64 (the portable forward's f32 q·k then sums in f64).
    pub fn has_f64(&self) -> bool {
        self.props.supports_type(ElemType::Float(IrFloatKind::F64))
    }

    /// Whether bf16 reaches the matrix units only as f32 (converted exactly): the runtime's bf16
    /// cmma does not compile (HIP with rocWMMA) but it registers 16x16x16 f32 cmma (rocWMMA's
    /// f32 MFMA on gfx942). The matrix backward stages its tiles in f32 there.
    pub fn has_bf16_through_f32_cmma(&self) -> bool {
        self.bf16_cmma_broken && self.has_matrix_units(FloatKind::F32)
    }

    /// Whether the device registers a 16x16x16 cmma with `dtype` inputs and f32 accumulation.
    pub fn has_matrix_units(&self, dtype: FloatKind) -> bool {
        if dtype == FloatKind::BF16 && self.bf16_cmma_broken {
            return false;
        }
        let elem: StorageType = elem_type(dtype).into();
        self.props.features.matmul.cmma.contains(&MmaConfig {
            a_type: elem,
            b_type: elem,
            cd_type: ElemType::Float(IrFloatKind::F32).into(),
            m: MATRIX_TILE,
            k: MATRIX_TILE,
            n: MATRIX_TILE,
        })
    }

    /// Whether the device registers the manual (register-level) 16x8x16 MMA with `dtype`
    /// inputs and f32 accumulation, with the plane size of its PTX fragment layout.
    pub fn has_register_mma(&self, dtype: FloatKind) -> bool {
        let elem: StorageType = elem_type(dtype).into();
        let (m, n, k) = MMA_SHAPE;
        let hardware = &self.props.hardware;
        hardware.plane_size_max == MMA_PLANE_SIZE
            && hardware.plane_size_min == MMA_PLANE_SIZE
            && self.props.features.matmul.mma.contains(&MmaConfig {
                a_type: elem,
                b_type: elem,
                cd_type: ElemType::Float(IrFloatKind::F32).into(),
                m,
                n,
                k,
            })
    }

    /// Checks that the device can hold the problem's element types at all.
    pub fn check_types(&self, problem: &AttentionProblem) -> Result<(), FlashError> {
        if !self.props.supports_type(elem_type(problem.dtype)) {
            return Err(FlashError::Device(format!(
                "{:?} tensors are not supported",
                problem.dtype
            )));
        }
        if let Some(kind) = problem.mask
            && !self.props.supports_type(mask_elem_type(kind))
        {
            return Err(FlashError::Device(format!(
                "{kind:?} mask tensors are not supported"
            )));
        }
        Ok(())
    }

    /// Whether a cube of `units` units and `shared_memory` bytes fits the device.
    pub(crate) fn fits(&self, shared_memory: usize, units: u32) -> bool {
        cube_fits(&self.props.hardware, shared_memory, units)
    }
}

/// Whether a cube of `units` units and `shared_memory` bytes fits a device with `hardware`
/// (the launchers check their plan with it, without building a [`DeviceCaps`]).
pub(crate) fn cube_fits(hardware: &HardwareProperties, shared_memory: usize, units: u32) -> bool {
    shared_memory <= hardware.max_shared_memory_size && units <= hardware.max_units_per_cube
}

/// Whether `props` register atomic add of `width` adjacent f32 in one request (what
/// [`DeviceCaps::has_atomic_f32_add_of`] answers; the launchers check it on the raw
/// properties, see [`crate::checks::check_atomics`]).
pub(crate) fn atomic_f32_add_of(props: &DeviceProperties, width: u32) -> bool {
    let atomic = Type::new(StorageType::Atomic(ElemType::Float(IrFloatKind::F32)));
    props.atomic_type_usage(atomic.with_vector_size(width as usize)).contains(AtomicUsage::Add)
}

/// The cubecl element type of a [`FloatKind`].
pub fn elem_type(dtype: FloatKind) -> ElemType {
    match dtype {
        FloatKind::F16 => ElemType::Float(IrFloatKind::F16),
        FloatKind::BF16 => ElemType::Float(IrFloatKind::BF16),
        FloatKind::F32 => ElemType::Float(IrFloatKind::F32),
    }
}

/// The cubecl element type of a [`MaskKind`].
pub fn mask_elem_type(kind: MaskKind) -> ElemType {
    match kind {
        MaskKind::U8 => ElemType::UInt(cubecl::ir::UIntKind::U8),
        MaskKind::U32 => ElemType::UInt(cubecl::ir::UIntKind::U32),
    }
}
