//! The one-pass backward's dQ (FlashAttention-2's schedule): the dK/dV kernel, which already
//! has dS and K of each block pair (the portable kernel in its shared f32 tiles; the mma kernel
//! dS in registers, which it stores to a shared tile for this, see [`super::mma`]'s dK/dV), also
//! adds each pair's `dS K` into an f32 `[batch, num_heads, seq_q, head_dim]` accumulator with
//! atomic adds, and
//! [`launch_finish_dq`] writes `dq = scale * accumulator` in the input dtype: 5 products per
//! pair (S, dP, dV, dK, dQ) where the two-kernel backward recomputes S and dP in its dQ kernel
//! (7). The order in which the key/value blocks' shares arrive varies from run to run, so dQ
//! does too (in its last bits); dK and dV do not. The planner takes it by default on the mma
//! path from [`crate::plan::backward::ONE_PASS_MIN_KEYS`] keys (forward + backward 1.03-1.16x
//! the two-kernel backward's speed there on the H200; 0.87-0.97x below, where dQ keeps its
//! kernel), and wherever `plan::DqAccumulation::Atomic` is asked for;
//! [`crate::plan::Tuning::deterministic`] keeps dQ's kernel everywhere.
//!
//! Which kernel variant accumulates is a type, [`DqSink`]: [`AtomicDq`] binds the accumulator
//! as `Atomic<f32>` (a device needs f32 atomic add for it); [`AtomicDqPairs`] and
//! [`AtomicDqQuads`] as vectors of 2 and 4 f32 (`Atomic<Vector<f32, 2 or 4>>`: one request adds
//! that many adjacent columns, `red.global.add.v2.f32` / `.v4.f32` on CUDA sm_90, which cuts
//! the L2 atomic requests by 2 and 4; the mma kernel's lanes hold their accumulators in column
//! pairs, see [`super::mma`]'s dQ share), [`NoDq`] as plain f32 and adds nothing, so the
//! two-kernel path's dK/dV kernel never declares an atomic float buffer (which a WGPU device
//! without `SHADER_FLOAT32_ATOMIC` would refuse).
use cubecl::prelude::*;

use super::contiguous_scratch;
use crate::checks::stand_in;
use super::elementwise::{
    UNITS, cube_count, element_index, offset, row_block, row_block_grid, split_index,
};
use crate::plan::rows_in_vectors;
use crate::problem::FloatKind;
use crate::primitives::mma::Pair;

/// Four f32, the widest atomic add request ([`AtomicDqQuads`]).
pub type Quad<E> = Vector<E, Const<4>>;

/// Where the dK/dV kernel's per-pair dQ shares go. Indices are in f32 elements of the
/// accumulator; every method is correct whatever the sink (a narrower sink splits a wide add
/// into several requests), so a kernel may use any of them.
#[cube]
pub trait DqSink: Send + Sync + 'static {
    /// The accumulator's element as the kernel binds it.
    type Acc: CubePrimitive;
    /// `acc[index] += value`.
    fn add(acc: &mut Tensor<Self::Acc>, index: usize, value: f32);
    /// `acc[index + i] += value[i]` for i < 2 (`index` even).
    fn add_pair(acc: &mut Tensor<Self::Acc>, index: usize, value: Pair<f32>);
    /// `acc[4 quad + i] += value[i]` for i < 4: `quad` counts groups of four elements, so that
    /// the quad sink indexes its vectors without a division (a kernel's `index / 4` of a 32-bit
    /// sum costs a shift per request, the sum not being known to stay a multiple of 4).
    fn add_quad(acc: &mut Tensor<Self::Acc>, quad: usize, value: Quad<f32>);
}

/// The one-pass backward: f32 atomic adds into the accumulator, one element per request.
pub struct AtomicDq;

/// The one-pass backward on devices with f32 pair atomic add
/// ([`crate::plan::DeviceCaps::has_atomic_f32_add_of`] 2): one request per two adjacent
/// elements. The accumulator is bound as pairs (it is contiguous with a last dimension that is
/// a multiple of 8 on the mma path: every pair and quad is aligned).
pub struct AtomicDqPairs;

/// As [`AtomicDqPairs`], four adjacent elements per request.
pub struct AtomicDqQuads;

/// The two-kernel backward: no accumulator (a 1-element f32 stand-in is bound), nothing added.
pub struct NoDq;

#[cube]
impl DqSink for AtomicDq {
    type Acc = Atomic<f32>;
    fn add(acc: &mut Tensor<Atomic<f32>>, index: usize, value: f32) {
        acc[index].fetch_add(value);
    }
    fn add_pair(acc: &mut Tensor<Atomic<f32>>, index: usize, value: Pair<f32>) {
        #[unroll]
        for i in 0..2usize {
            acc[index + i].fetch_add(value[i]);
        }
    }
    fn add_quad(acc: &mut Tensor<Atomic<f32>>, quad: usize, value: Quad<f32>) {
        #[unroll]
        for i in 0..4usize {
            acc[quad * 4 + i].fetch_add(value[i]);
        }
    }
}

#[cube]
impl DqSink for AtomicDqPairs {
    type Acc = Atomic<Pair<f32>>;
    fn add(acc: &mut Tensor<Atomic<Pair<f32>>>, index: usize, value: f32) {
        // The element's pair, with 0 added to its neighbour.
        let mut pair = Pair::<f32>::new(0.0f32);
        pair[index % 2] = value;
        acc[index / 2].fetch_add(pair);
    }
    fn add_pair(acc: &mut Tensor<Atomic<Pair<f32>>>, index: usize, value: Pair<f32>) {
        acc[index / 2].fetch_add(value);
    }
    fn add_quad(acc: &mut Tensor<Atomic<Pair<f32>>>, quad: usize, value: Quad<f32>) {
        #[unroll]
        for i in 0..2usize {
            let mut pair = Pair::<f32>::new(0.0f32);
            pair[0] = value[2 * i];
            pair[1] = value[2 * i + 1];
            acc[quad * 2 + i].fetch_add(pair);
        }
    }
}

#[cube]
impl DqSink for AtomicDqQuads {
    type Acc = Atomic<Quad<f32>>;
    fn add(acc: &mut Tensor<Atomic<Quad<f32>>>, index: usize, value: f32) {
        let mut quad = Quad::<f32>::new(0.0f32);
        quad[index % 4] = value;
        acc[index / 4].fetch_add(quad);
    }
    fn add_pair(acc: &mut Tensor<Atomic<Quad<f32>>>, index: usize, value: Pair<f32>) {
        let mut quad = Quad::<f32>::new(0.0f32);
        quad[index % 4] = value[0];
        quad[index % 4 + 1] = value[1];
        acc[index / 4].fetch_add(quad);
    }
    fn add_quad(acc: &mut Tensor<Atomic<Quad<f32>>>, quad: usize, value: Quad<f32>) {
        acc[quad].fetch_add(value);
    }
}

#[cube]
impl DqSink for NoDq {
    type Acc = f32;
    fn add(_acc: &mut Tensor<f32>, _index: usize, _value: f32) {}
    fn add_pair(_acc: &mut Tensor<f32>, _index: usize, _value: Pair<f32>) {}
    fn add_quad(_acc: &mut Tensor<f32>, _quad: usize, _value: Quad<f32>) {}
}

/// What a dK/dV kernel without the one pass binds as its accumulator: one f32 that `NoDq`
/// never touches.
pub(crate) fn no_accumulator<R: Runtime>(client: &ComputeClient<R>) -> TensorArg<R> {
    stand_in(client, f32::as_bytes(&[0.0f32]), 4)
}

/// A contiguous f32 `shape` tensor of zeros: the accumulator of one backward launch. Zeroed 4
/// f32 per unit where the element count allows (one 16-byte store each).
pub(crate) fn zeroed_accumulator<R: Runtime>(client: &ComputeClient<R>, shape: [usize; 4]) -> TensorBinding<R> {
    let total: usize = shape.iter().product();
    let acc = contiguous_scratch(client, &shape, size_of::<f32>());
    let quads = total.is_multiple_of(4);
    let cubes = cube_count(if quads { total / 4 } else { total });
    let (dim, arg) = (CubeDim::new_1d(UNITS), acc.clone().into_tensor_arg());
    // SAFETY: every write is bounds-checked against the tensor's length (in its elements as
    // bound: quads where `total` is a multiple of 4).
    unsafe {
        if quads {
            fill_zero_quads::launch_unchecked::<R>(client, cubes, dim, arg)
        } else {
            fill_zero::launch_unchecked::<R>(client, cubes, dim, arg)
        }
    }
    acc
}

/// `dq = F(scale * acc)` for every element (`dq` of any strides, `acc` contiguous, same shape).
/// Where head_dim is a multiple of 4, a cube takes [`finish_rows`] rows of one (batch, head)
/// and each unit 4 adjacent columns of a row at a time ([`finish_dq_rows`]: one 16-byte load
/// of `acc`, one store of 4 elements where `dq`'s rows are contiguous); elsewhere one unit per
/// element, its 64-bit index split into 4 coordinates (0.23 ms for 33.5 M elements on the H200
/// at (16,16,2048,64), 5x its memory traffic's time; benches/RESULTS.md, 2026-12-04).
pub(crate) fn launch_finish_dq<R: Runtime, F: Float>(
    client: &ComputeClient<R>,
    dtype: FloatKind,
    acc: TensorBinding<R>,
    dq: TensorBinding<R>,
    scale: f32,
) {
    let [batch, heads, seq, dim] = [0, 1, 2, 3].map(|d| dq.shape[d]);
    let quads = dim / 4;
    let dim_in_quads = dim.is_multiple_of(4);
    let width = if dim_in_quads && rows_in_vectors(dtype, 4, &[&dq]) { 4 } else { 1 };
    let (acc, dq_arg) = (acc.into_tensor_arg(), dq.into_tensor_arg());
    let dim3 = CubeDim::new_1d(UNITS);
    // SAFETY: `acc` and `dq` have the problem's query shape (checked by the backward launcher);
    // every access is bounds-checked against the shape (rows, (batch, head)) or `acc`'s length.
    unsafe {
        if dim_in_quads {
            let rows = finish_rows(quads as u32);
            let (row_blocks, cubes) = row_block_grid(batch * heads, seq, rows);
            finish_dq_rows::launch_unchecked::<F, R>(
                client, cubes, dim3, width, acc, dq_arg, scale, row_blocks, rows, quads as u32,
            )
        } else {
            let cubes = cube_count(batch * heads * seq * dim);
            finish_dq::launch_unchecked::<F, R>(client, cubes, dim3, acc, dq_arg, scale)
        }
    }
}

/// Quads each unit of [`finish_dq_rows`] converts, at most.
const FINISH_QUADS_PER_UNIT: u32 = 2;

/// Rows a cube of [`finish_dq_rows`] takes for rows of `quads` quads: the most (a power of
/// two, at least one) of which each unit converts [`FINISH_QUADS_PER_UNIT`] quads or fewer.
fn finish_rows(quads: u32) -> u32 {
    let rows = (FINISH_QUADS_PER_UNIT * UNITS / quads.max(1)).max(1);
    1 << rows.ilog2()
}

#[cube(launch_unchecked)]
fn fill_zero(acc: &mut Tensor<f32>) {
    let index = element_index();
    if index < acc.len() {
        acc[index] = 0.0f32;
    }
}

#[cube(launch_unchecked)]
fn fill_zero_quads(acc: &mut Tensor<Quad<f32>>) {
    let index = element_index();
    if index < acc.len() {
        acc[index] = Quad::<f32>::new(0.0f32);
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

/// [`launch_finish_dq`] where head_dim is `4 quads`: rows `[first, first + rows)` of one
/// (batch, head), quad `index` of the block by unit `index % UNITS`. `dq` is bound in vectors
/// of 4 (contiguous rows: one store per quad) or 1 (any strides: four).
#[cube(launch_unchecked)]
fn finish_dq_rows<F: Float, N: Size>(
    acc: &Tensor<Quad<f32>>,
    dq: &mut Tensor<Vector<F, N>>,
    scale: f32,
    row_blocks: u32,
    #[comptime] rows: u32,
    #[comptime] quads: u32,
) {
    let width = dq.vector_size();
    let (heads, seq) = (dq.shape(1) as u32, dq.shape(2) as u32);
    let (batch_head, first) = row_block(row_blocks, rows);
    if batch_head < dq.shape(0) as u32 * heads {
        let (batch, head) = (batch_head / heads, batch_head % heads);
        let base = batch as usize * dq.stride(0) + head as usize * dq.stride(1);
        let acc_base = batch_head as usize * seq as usize * quads as usize;
        #[unroll]
        for step in 0..comptime!((rows * quads).div_ceil(UNITS)) {
            let index = UNIT_POS + step * UNITS;
            let (row, quad) = (first + index / quads, index % quads);
            if index < rows * quads && row < seq {
                let value = acc[acc_base + (row * quads + quad) as usize];
                let at = base + row as usize * dq.stride(2) + (4 * quad) as usize * dq.stride(3);
                if comptime!(width == 4) {
                    let mut out = Vector::<F, N>::zeroed();
                    #[unroll]
                    for c in 0..4usize {
                        out[c] = F::cast_from(value[c] * scale);
                    }
                    dq[at / 4] = out;
                } else {
                    #[unroll]
                    for c in 0..4usize {
                        let element = F::cast_from(value[c] * scale);
                        dq[at + c * dq.stride(3)] = Vector::<F, N>::new(element);
                    }
                }
            }
        }
    }
}
