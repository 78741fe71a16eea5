//! The one-pass backward's dQ (FlashAttention-2's schedule): the dK/dV kernel, which already
//! holds dS and K of each block pair in shared memory, also adds each pair's `dS K` into an
//! f32 `[batch, num_heads, seq_q, head_dim]` accumulator with atomic adds, and
//! [`launch_finish_dq`] writes `dq = scale * accumulator` in the input dtype: 5 products per
//! pair (S, dP, dV, dK, dQ) where the two-kernel backward recomputes S and dP in its dQ kernel
//! (7). The order in which the key/value blocks' shares arrive varies from run to run, so dQ
//! does too (in its last bits); dK and dV do not.
//!
//! Which kernel variant accumulates is a type, [`DqSink`]: [`AtomicDq`] binds the accumulator
//! as `Atomic<f32>` (a device needs f32 atomic add for it), [`NoDq`] as plain f32 and adds
//! nothing, so the two-kernel path's dK/dV kernel never declares an atomic float buffer (which a
//! WGPU device without `SHADER_FLOAT32_ATOMIC` would refuse).
use cubecl::prelude::*;

/// Threads per cube of the fill and finish kernels.
const UNITS: u32 = 256;
/// Cubes along x of the fill and finish kernels (y takes the rest: more than 65535 cubes).
const CUBES_X: u32 = 1024;

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

/// The two-kernel backward: no accumulator (a 1-element stand-in is bound), nothing added.
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

/// Cubes covering `total` elements, one unit each.
fn cube_count(total: usize) -> CubeCount {
    let cubes = total.div_ceil(UNITS as usize) as u32;
    CubeCount::Static(cubes.min(CUBES_X), cubes.div_ceil(CUBES_X), 1)
}

/// A contiguous f32 `shape` tensor of zeros: the accumulator of one backward launch.
pub(crate) fn zeroed_accumulator<R: Runtime>(client: &ComputeClient<R>, shape: [usize; 4]) -> TensorBinding<R> {
    let total: usize = shape.iter().product();
    let strides = [shape[1] * shape[2] * shape[3], shape[2] * shape[3], shape[3], 1];
    // SAFETY: a contiguous buffer of exactly `total` f32.
    let acc = unsafe {
        TensorBinding::<R>::from_raw_parts(client.empty(total * size_of::<f32>()), strides.into(), shape.into())
    };
    // SAFETY: every write is bounds-checked against the tensor's length.
    unsafe {
        fill_zero::launch_unchecked::<R>(client, cube_count(total), CubeDim::new_1d(UNITS), acc.clone().into_tensor_arg())
    }
    acc
}

/// The accumulator the two-kernel dK/dV kernel binds and never touches.
pub(crate) fn stand_in<R: Runtime>(client: &ComputeClient<R>) -> TensorBinding<R> {
    // SAFETY: one f32, never read or written.
    unsafe { TensorBinding::<R>::from_raw_parts(client.empty(size_of::<f32>()), [1, 1, 1, 1].into(), [1, 1, 1, 1].into()) }
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

/// This unit's element of the fill and finish kernels.
#[cube]
fn element_index() -> usize {
    let cube = CUBE_POS_Y as usize * CUBE_COUNT_X as usize + CUBE_POS_X as usize;
    cube * UNITS as usize + UNIT_POS as usize
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
        let (heads, seq, dim) = (dq.shape(1), dq.shape(2), dq.shape(3));
        let d = index % dim;
        let s = (index / dim) % seq;
        let h = (index / (dim * seq)) % heads;
        let b = index / (dim * seq * heads);
        dq[b * dq.stride(0) + h * dq.stride(1) + s * dq.stride(2) + d * dq.stride(3)] =
            F::cast_from(acc[index] * scale);
    }
}
