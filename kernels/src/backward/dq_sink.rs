//! The one-pass backward's dQ (FlashAttention-2's schedule): the dK/dV kernel, which already
//! has dS and K of each block pair (the portable kernel in its shared f32 tiles; the mma kernel
//! dS in registers, which it stores to a shared tile for this, see [`super::mma`]'s dK/dV), also
//! adds each pair's `dS K` into an f32 `[batch, num_heads, seq_q, head_dim]` accumulator with
//! atomic adds, and
//! [`launch_finish_dq`] writes `dq = scale * accumulator` in the input dtype: 5 products per
//! pair (S, dP, dV, dK, dQ) where the two-kernel backward recomputes S and dP in its dQ kernel
//! (7). The order in which the key/value blocks' shares arrive varies from run to run, so dQ
//! does too (in its last bits); dK and dV do not. Opt-in (`plan::DqAccumulation::Atomic`): on
//! the H200 the mma one pass measured 0.73-0.84x the two-kernel backward at head dims 32 and 64,
//! where its atomic adds hold L2 at 81 % of its peak, and 0.94-1.01x at 128 (2026-12-03,
//! 2b9b810, benches/RESULTS.md).
//!
//! Which kernel variant accumulates is a type, [`DqSink`]: [`AtomicDq`] binds the accumulator
//! as `Atomic<f32>` (a device needs f32 atomic add for it), [`NoDq`] as plain f32 and adds
//! nothing, so the two-kernel path's dK/dV kernel never declares an atomic float buffer (which a
//! WGPU device without `SHADER_FLOAT32_ATOMIC` would refuse).
use cubecl::prelude::*;

use super::contiguous_scratch;
use super::elementwise::{UNITS, cube_count, element_index, offset, split_index};

/// Where the dK/dV kernel's per-pair dQ shares go.
#[cube]
pub trait DqSink: Send + Sync + 'static {
    /// The accumulator's element as the kernel binds it.
    type Acc: CubePrimitive;
    /// `acc[index] += value`.
    fn add(acc: &mut Tensor<Self::Acc>, index: usize, value: f32);
}

/// The one-pass backward: f32 atomic adds into the accumulator.
pub struct AtomicDq;

/// The two-kernel backward: no accumulator (a 1-element f32 stand-in is bound), nothing added.
pub struct NoDq;

#[cube]
impl DqSink for AtomicDq {
    type Acc = Atomic<f32>;
    fn add(acc: &mut Tensor<Atomic<f32>>, index: usize, value: f32) {
        acc[index].fetch_add(value);
    }
}

#[cube]
impl DqSink for NoDq {
    type Acc = f32;
    fn add(_acc: &mut Tensor<f32>, _index: usize, _value: f32) {}
}

/// A contiguous f32 `shape` tensor of zeros: the accumulator of one backward launch.
pub(crate) fn zeroed_accumulator<R: Runtime>(client: &ComputeClient<R>, shape: [usize; 4]) -> TensorBinding<R> {
    let total: usize = shape.iter().product();
    let acc = contiguous_scratch(client, &shape, size_of::<f32>());
    // SAFETY: every write is bounds-checked against the tensor's length.
    unsafe {
        fill_zero::launch_unchecked::<R>(client, cube_count(total), CubeDim::new_1d(UNITS), acc.clone().into_tensor_arg())
    }
    acc
}

/// `dq = F(scale * acc)` for every element (`dq` of any strides, `acc` contiguous, same shape).
pub(crate) fn launch_finish_dq<R: Runtime, F: Float>(
    client: &ComputeClient<R>,
    acc: TensorBinding<R>,
    dq: TensorBinding<R>,
    scale: f32,
) {
    let total: usize = dq.shape.iter().product();
    // SAFETY: `acc` and `dq` have the problem's query shape (checked by the backward launcher);
    // every access is bounds-checked against `total`.
    unsafe {
        finish_dq::launch_unchecked::<F, R>(
            client,
            cube_count(total),
            CubeDim::new_1d(UNITS),
            acc.into_tensor_arg(),
            dq.into_tensor_arg(),
            scale,
        )
    }
}

#[cube(launch_unchecked)]
fn fill_zero(acc: &mut Tensor<f32>) {
    let index = element_index();
    if index < acc.len() {
        acc[index] = 0.0f32;
    }
}

#[cube(launch_unchecked)]
fn finish_dq<F: Float>(acc: &Tensor<f32>, dq: &mut Tensor<F>, scale: f32) {
    let index = element_index();
    if index < acc.len() {
        let (b, h, s, d) = split_index(index, dq);
        dq[offset(dq, b, h, s, d)] = F::cast_from(acc[index] * scale);
    }
}
