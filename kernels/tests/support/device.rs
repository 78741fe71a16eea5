//! Device tensors: uploads of f64 data as any element type in any [`Layout`] (storage gaps
//! poisoned), outputs filled with a poison value, and read-back as f64 in logical row-major
//! order.
use burn_flash_attn_kernels::problem::{FloatKind, MaskKind};
use cubecl::prelude::*;
use cubecl::server::Handle;

use super::runtime::{Client, TestRuntime};

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

    /// Dimensions stored in `order` (outermost first), no gaps.
    pub fn permuted(order: &[usize]) -> Self {
        Layout::Strided {
            order: order.to_vec(),
            pad: 0,
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

/// Raw bytes of a tensor's storage (for bit-identical comparisons).
pub fn read_bytes(client: &Client, tensor: &DeviceTensor) -> Vec<u8> {
    client
        .read_one(tensor.handle.clone())
        .expect("device read failed")
        .to_vec()
}
