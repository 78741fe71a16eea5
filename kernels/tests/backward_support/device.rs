//! Strided device tensors of the backward tests: uploads in a chosen physical layout, and
//! read-backs in logical row-major order.
use burn_flash_attn_kernels::problem::FloatKind;
use cubecl::prelude::*;

use super::TestRuntime;

/// How the tensors are laid out in memory (the logical shapes never change).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    Contiguous,
    /// q, k, v, o, d_out and the gradients stored `[batch, seq, heads, dim]` (Burn's transposed
    /// views); mask and bias stored `[batch, heads, seq_kv, seq_q]`.
    Transposed,
}

/// A device tensor and what is needed to read it back.
pub struct DeviceTensor {
    pub handle: cubecl::server::Handle,
    pub shape: Vec<usize>,
    pub strides: Vec<usize>,
}

impl DeviceTensor {
    pub fn binding(&self) -> TensorBinding<TestRuntime> {
        // SAFETY: the buffer was created for exactly these shape and strides.
        unsafe {
            TensorBinding::from_raw_parts(
                self.handle.clone(),
                self.strides.clone().into(),
                self.shape.clone().into(),
            )
        }
    }
}

/// Strides of `shape` stored in the order `physical` (outermost first).
fn strides_for(shape: &[usize], physical: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; shape.len()];
    let mut step = 1;
    for &dim in physical.iter().rev() {
        strides[dim] = step;
        step *= shape[dim];
    }
    strides
}

fn logical_offsets(shape: &[usize], strides: &[usize]) -> Vec<usize> {
    let total: usize = shape.iter().product();
    (0..total)
        .map(|mut flat| {
            let mut offset = 0;
            for d in (0..shape.len()).rev() {
                offset += (flat % shape[d]) * strides[d];
                flat /= shape[d];
            }
            offset
        })
        .collect()
}

/// Which physical order a tensor role takes under a layout.
#[derive(Clone, Copy)]
pub enum Role {
    /// `[b, h, seq, dim]` tensors.
    Rows,
    /// `[b, h, seq_q, seq_kv]` tensors.
    Scores,
    /// `[b, h, seq_q]` statistics: always contiguous.
    Stats,
}

fn physical_order(layout: Layout, role: Role) -> Vec<usize> {
    match (layout, role) {
        (_, Role::Stats) => vec![0, 1, 2],
        (Layout::Contiguous, _) => vec![0, 1, 2, 3],
        (Layout::Transposed, Role::Rows) => vec![0, 2, 1, 3],
        (Layout::Transposed, Role::Scores) => vec![0, 1, 3, 2],
    }
}

/// Uploads logical row-major `values` as `E` in the layout's physical order.
pub fn upload<E: CubeElement>(
    client: &ComputeClient<TestRuntime>,
    values: &[f64],
    shape: &[usize],
    layout: Layout,
    role: Role,
    convert: impl Fn(f64) -> E,
) -> DeviceTensor {
    let strides = strides_for(shape, &physical_order(layout, role));
    let mut physical = vec![convert(0.0); values.len()];
    for (value, offset) in values.iter().zip(logical_offsets(shape, &strides)) {
        physical[offset] = convert(*value);
    }
    let handle = client.create_from_slice(E::as_bytes(&physical));
    DeviceTensor {
        handle,
        shape: shape.to_vec(),
        strides,
    }
}

/// Uploads float values in the case's dtype.
pub fn upload_float(
    client: &ComputeClient<TestRuntime>,
    dtype: FloatKind,
    values: &[f64],
    shape: &[usize],
    layout: Layout,
    role: Role,
) -> DeviceTensor {
    match dtype {
        FloatKind::F16 => upload(client, values, shape, layout, role, half::f16::from_f64),
        FloatKind::BF16 => upload(client, values, shape, layout, role, half::bf16::from_f64),
        FloatKind::F32 => upload(client, values, shape, layout, role, |x| x as f32),
    }
}

/// Reads a tensor back in logical row-major order, as f64.
pub fn read_float(
    client: &ComputeClient<TestRuntime>,
    dtype: FloatKind,
    tensor: &DeviceTensor,
) -> Vec<f64> {
    let bytes = client.read_one(tensor.handle.clone()).expect("read back");
    let physical: Vec<f64> = match dtype {
        FloatKind::F16 => half::f16::from_bytes(&bytes)
            .iter()
            .map(|x| x.to_f64())
            .collect(),
        FloatKind::BF16 => half::bf16::from_bytes(&bytes)
            .iter()
            .map(|x| x.to_f64())
            .collect(),
        FloatKind::F32 => f32::from_bytes(&bytes).iter().map(|&x| x as f64).collect(),
    };
    logical_offsets(&tensor.shape, &tensor.strides)
        .into_iter()
        .map(|at| physical[at])
        .collect()
}

/// Raw bytes of a tensor (for bit-identical comparisons).
pub fn read_bytes(client: &ComputeClient<TestRuntime>, tensor: &DeviceTensor) -> Vec<u8> {
    client
        .read_one(tensor.handle.clone())
        .expect("read back")
        .to_vec()
}
