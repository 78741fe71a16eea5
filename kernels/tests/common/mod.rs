//! Helpers shared by the kernel tests (forward and backward): the test runtime and client,
//! seeded random data, uploads of any f64 data as any element type with any strides, and
//! read-back of any tensor as f64 in logical row-major order.
#![allow(dead_code)]

use burn_flash_attn_kernels::problem::{FloatKind, MaskKind};
use burn_flash_attn_kernels::reference::Precision;
use cubecl::prelude::*;
use cubecl::server::Handle;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub mod cuda_codegen;

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
    simulated_device(base, MI300X_PLANE_SIZE, MI300X_SHARED_MEMORY, &[FloatKind::F16])
}

/// Element type of a device tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elem {
    Float(FloatKind),
    Mask(MaskKind),
}

impl Elem {
    pub fn size(self) -> usize {
        match self {
            Elem::Float(kind) => kind.size(),
            Elem::Mask(MaskKind::U8) => 1,
            Elem::Mask(MaskKind::U32) => 4,
        }
    }

    fn encode(self, values: &[f64]) -> Vec<u8> {
        match self {
            Elem::Float(FloatKind::F16) => values
                .iter()
                .flat_map(|&x| half::f16::from_f64(x).to_le_bytes())
                .collect(),
            Elem::Float(FloatKind::BF16) => values
                .iter()
                .flat_map(|&x| half::bf16::from_f64(x).to_le_bytes())
                .collect(),
            Elem::Float(FloatKind::F32) => values
                .iter()
                .flat_map(|&x| (x as f32).to_le_bytes())
                .collect(),
            Elem::Mask(MaskKind::U8) => values.iter().map(|&x| x as u8).collect(),
            Elem::Mask(MaskKind::U32) => values
                .iter()
                .flat_map(|&x| (x as u32).to_le_bytes())
                .collect(),
        }
    }

    fn decode(self, bytes: &[u8]) -> Vec<f64> {
        match self {
            Elem::Float(FloatKind::F16) => bytes
                .chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f64())
                .collect(),
            Elem::Float(FloatKind::BF16) => bytes
                .chunks_exact(2)
                .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f64())
                .collect(),
            Elem::Float(FloatKind::F32) => bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64)
                .collect(),
            Elem::Mask(MaskKind::U8) => bytes.iter().map(|&b| b as f64).collect(),
            Elem::Mask(MaskKind::U32) => bytes
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64)
                .collect(),
        }
    }
}

/// The [`Precision`] of the plain implementation in a float kind.
pub fn precision(kind: FloatKind) -> Precision {
    match kind {
        FloatKind::F16 => Precision::F16,
        FloatKind::BF16 => Precision::BF16,
        FloatKind::F32 => Precision::F32,
    }
}

/// How a tensor is laid out in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// Row-major, no gaps.
    Contiguous,
    /// Dimensions stored in `order` (outermost first; `[0, 2, 1, 3]` is Burn's
    /// `[b, s, h, d] -> [b, h, s, d]` transpose view), each innermost row followed by `pad`
    /// unused elements.
    Strided { order: Vec<usize>, pad: usize },
}

impl Layout {
    /// The `[b, s, h, d]` storage of a `[b, h, s, d]` tensor, rows padded: a transposed,
    /// non-contiguous view.
    pub fn transposed_padded() -> Self {
        Layout::Strided {
            order: vec![0, 2, 1, 3],
            pad: 3,
        }
    }

    /// Strides (in elements) and the number of elements of storage for `shape`.
    pub fn strides(&self, shape: &[usize]) -> (Vec<usize>, usize) {
        let (order, pad): (Vec<usize>, usize) = match self {
            Layout::Contiguous => ((0..shape.len()).collect(), 0),
            Layout::Strided { order, pad } => (order.clone(), *pad),
        };
        let mut strides = vec![0; shape.len()];
        let mut step = 1;
        for (position, &dim) in order.iter().enumerate().rev() {
            strides[dim] = step;
            let extent = if position == order.len() - 1 {
                shape[dim] + pad
            } else {
                shape[dim]
            };
            step *= extent;
        }
        (strides, step)
    }
}

/// A tensor on the device, with what it takes to bind and read it.
pub struct DeviceTensor {
    pub handle: Handle,
    pub shape: Vec<usize>,
    pub strides: Vec<usize>,
    pub elem: Elem,
}

impl DeviceTensor {
    pub fn binding(&self) -> TensorBinding<TestRuntime> {
        // SAFETY: shape and strides describe storage allocated by `upload` / `filled`.
        unsafe {
            TensorBinding::from_raw_parts(
                self.handle.clone(),
                self.strides.clone().into(),
                self.shape.clone().into(),
            )
        }
    }
}

/// Logical row-major offset -> storage offset.
fn storage_index(shape: &[usize], strides: &[usize], logical: usize) -> usize {
    let mut rest = logical;
    let mut at = 0;
    for (dim, &extent) in shape.iter().enumerate().rev() {
        at += (rest % extent) * strides[dim];
        rest /= extent;
    }
    at
}

/// Uploads `values` (logical row-major, `shape`) as `elem` with `layout`. Gaps in the storage
/// are filled with a poison value (NaN, or "masked") so that reading them would show.
pub fn upload(
    client: &Client,
    values: &[f64],
    shape: &[usize],
    elem: Elem,
    layout: &Layout,
) -> DeviceTensor {
    assert_eq!(
        values.len(),
        shape.iter().product::<usize>(),
        "values do not match shape {shape:?}"
    );
    let (strides, storage_len) = layout.strides(shape);
    let gap = match elem {
        Elem::Float(_) => f64::NAN,
        Elem::Mask(_) => 1.0,
    };
    let mut storage = vec![gap; storage_len.max(1)];
    for (logical, &value) in values.iter().enumerate() {
        storage[storage_index(shape, &strides, logical)] = value;
    }
    let handle = client.create_from_slice(&elem.encode(&storage));
    DeviceTensor {
        handle,
        shape: shape.to_vec(),
        strides,
        elem,
    }
}

/// A contiguous tensor with every element `value` (outputs are poisoned this way before a
/// launch).
pub fn filled(client: &Client, shape: &[usize], elem: Elem, value: f64) -> DeviceTensor {
    let len = shape.iter().product();
    upload(client, &vec![value; len], shape, elem, &Layout::Contiguous)
}

/// Reads `tensor` back as f64, logical row-major.
pub fn read(client: &Client, tensor: &DeviceTensor) -> Vec<f64> {
    let bytes = client
        .read_one(tensor.handle.clone())
        .expect("device read failed");
    let storage = tensor.elem.decode(&bytes);
    (0..tensor.shape.iter().product())
        .map(|logical| storage[storage_index(&tensor.shape, &tensor.strides, logical)])
        .collect()
}

/// A seeded generator; the seed is printed so that a failure can be replayed.
pub fn rng(name: &str) -> (StdRng, u64) {
    let seed = std::env::var("FLASH_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    println!("{name}: seed {seed} (replay with FLASH_TEST_SEED={seed})");
    (StdRng::seed_from_u64(seed), seed)
}

/// `len` values uniform in `[-amplitude, amplitude]`, never exactly 0, rounded to `kind` so
/// that the f64 reference sees exactly what the device sees.
pub fn random_values(rng: &mut StdRng, len: usize, amplitude: f64, kind: FloatKind) -> Vec<f64> {
    (0..len)
        .map(|_| {
            let magnitude = rng.random_range(0.05..=1.0) * amplitude;
            let value = if rng.random_bool(0.5) {
                magnitude
            } else {
                -magnitude
            };
            precision(kind).round(value)
        })
        .collect()
}

/// `len` booleans, each `true` (masked) with probability `masked`.
pub fn random_mask(rng: &mut StdRng, len: usize, masked: f64) -> Vec<bool> {
    (0..len).map(|_| rng.random_bool(masked)).collect()
}
