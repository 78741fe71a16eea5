//! Backward preprocessing: `delta = rowsum(d_out ∘ o)`, the per-row term of the softmax
//! gradient `dS = P ∘ (dP - delta)` (FlashAttention-2, Algorithm 2, line 4).
//!
//! One cube takes `rows` consecutive query rows of one (batch, head): its units first copy
//! both tensors' rows into shared memory, vector `u`, `u + UNITS`, ... of the block each, so
//! that neighbouring units read neighbouring vectors of a row (whole rows back to back where
//! the tensor is contiguous); then unit `r < rows` sums row `r` out of shared memory.
//!
//! ```text
//!   o, d_out rows           shared tiles (row stride odd)        delta
//!   i0 [v0 v1 .. vC-1] ---> [v0 v1 .. vC-1 | pad]  -- unit 0 --> delta[i0]
//!   i1 [v0 v1 .. vC-1] ---> [v0 v1 .. vC-1 | pad]  -- unit 1 --> delta[i1]
//!   ...  copied by all units, vector u by unit u mod UNITS
//! ```
//!
//! Each unit reading its own row straight from global memory (one row of 128 bytes a unit at
//! head dim 64, bf16) ran at about a quarter of the H200's memory bandwidth
//! (benches/RESULTS.md, 2026-12-04: 0.11 ms for the 134 MB of o and d_out at (16,16,2048,64)).
use cubecl::prelude::*;

use super::elementwise::{row_block, row_block_grid};
use crate::error::FlashError;
use crate::plan::rows_in_vectors;
use crate::problem::{AttentionProblem, FloatKind};

/// Units per cube: 4 planes of 32, 2 waves of 64, 16 lavapipe planes.
pub const UNITS: u32 = 128;

/// Shared memory a cube stages its rows of o and d_out in, at most: a fraction of every
/// device's (lavapipe 32 KiB, gfx942 64 KiB), so that many cubes share a multiprocessor.
const STAGE_BYTES: usize = 16 * 1024;

/// Computes `delta[b, h, i] = Σ_c d_out[b, h, i, c] · o[b, h, i, c]` in f32.
///
/// `o` and `d_out` are `[batch, num_heads, seq_q, val_dim]` with any strides; `delta` is an f32
/// `[batch, num_heads, seq_q]` tensor (any strides). Every element of `delta` is written.
///
/// # Important
///
/// One unit sums one row sequentially over `c = 0..val_dim`, the very order in which the
/// portable gradient kernels sum `dP = dO · V`: where a row of `o` equals a row of `v` (a single
/// visible key), `dP - delta` is then exactly 0, as it is mathematically. Reruns are
/// bit-identical.
pub fn flash_attention_backward_preprocess<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    problem: &AttentionProblem,
    o: TensorBinding<R>,
    d_out: TensorBinding<R>,
    delta: TensorBinding<R>,
) -> Result<(), FlashError> {
    problem.validate()?;
    let vector_size = row_vector_size(client, problem.dtype, &[&o, &d_out]);
    let shape = PreprocessShape::new(problem.val_dim, vector_size, problem.dtype.size());
    let (row_blocks, cube_count) =
        row_block_grid(problem.heads_total(), problem.seq_q, shape.rows);
    // SAFETY: every global access below is guarded by the (batch, head) and row bounds, columns
    // run over `row_chunks` vectors of `vector_size`, which divides val_dim, every row stride
    // and both offsets; shared accesses stay inside `rows` rows of the tiles.
    unsafe {
        flash_attention_backward_preprocess_kernel::launch_unchecked::<F, R>(
            client,
            cube_count,
            CubeDim::new_1d(UNITS),
            vector_size,
            o.into_tensor_arg(),
            d_out.into_tensor_arg(),
            delta.into_tensor_arg(),
            row_blocks,
            shape.rows,
            shape.row_chunks,
        );
    }
    Ok(())
}

/// The kernel's comptime shape: `rows` query rows a cube of `row_chunks` vectors each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PreprocessShape {
    pub rows: u32,
    pub row_chunks: u32,
}

impl PreprocessShape {
    /// Rows of `val_dim` elements read in vectors of `vector_size` elements of `elem_bytes`:
    /// as many rows as the cube has units where both tiles fit [`STAGE_BYTES`], fewer (a power
    /// of two, at least one) for wide rows.
    pub fn new(val_dim: usize, vector_size: usize, elem_bytes: usize) -> Self {
        let row_chunks = (val_dim / vector_size) as u32;
        let row_bytes = 2 * tile_stride(row_chunks) as usize * vector_size * elem_bytes;
        let fitting = (STAGE_BYTES / row_bytes).clamp(1, UNITS as usize) as u32;
        PreprocessShape { rows: 1 << fitting.ilog2(), row_chunks }
    }

    /// Bytes of the two shared tiles with vectors of `vector_bytes`.
    pub fn shared_memory_bytes(&self, vector_bytes: usize) -> usize {
        2 * (self.rows * tile_stride(self.row_chunks)) as usize * vector_bytes
    }
}

/// Row stride of the shared tiles in vectors: odd, so that the units summing neighbouring
/// rows read 16-byte vectors in different banks.
const fn tile_stride(row_chunks: u32) -> u32 {
    row_chunks | 1
}

/// The widest load of the device that reads whole rows of every tensor (see
/// [`rows_in_vectors`]; 1 where none does): `val_dim / width` vectors a row, the summation
/// order unchanged.
fn row_vector_size<R: Runtime>(
    client: &ComputeClient<R>,
    dtype: FloatKind,
    tensors: &[&TensorBinding<R>],
) -> usize {
    client
        .io_optimized_vector_sizes(dtype.size())
        .find(|&width| rows_in_vectors(dtype, width, tensors))
        .unwrap_or(1)
}

/// Where vector `chunk` of row `row` of one (batch, head) sits in `tensor`, in vectors
/// (strides are in elements: a vectorized row is contiguous, its stride(3) 1, a scalar one
/// may have any).
#[cube]
fn vector_at<F: Float, N: Size>(
    tensor: &Tensor<Vector<F, N>>,
    base: usize,
    row: u32,
    chunk: u32,
) -> usize {
    let width = tensor.vector_size();
    base + (row as usize * tensor.stride(2) + chunk as usize * width * tensor.stride(3)) / width
}

#[cube(launch_unchecked)]
pub fn flash_attention_backward_preprocess_kernel<F: Float, N: Size>(
    o: &Tensor<Vector<F, N>>,
    d_out: &Tensor<Vector<F, N>>,
    delta: &mut Tensor<f32>,
    row_blocks: u32,
    #[comptime] rows: u32,
    #[comptime] row_chunks: u32,
) {
    let stride = comptime!(tile_stride(row_chunks));
    // Both tiles in one allocation, d_out's after o's: separate arrays would be placed in a hash
    // set's order, different in every generation of the source (see `primitives::arena`).
    let d_start = comptime!(rows * stride);
    let mut tiles = SharedMemory::<Vector<F, N>>::new(comptime!((2 * rows * stride) as usize));
    let width = o.vector_size();
    let heads = o.shape(1) as u32;
    let seq_q = o.shape(2) as u32;
    let (batch_head, first) = row_block(row_blocks, rows);
    // Cubes past the last (batch, head) (the grid's last row) skip as a whole.
    if batch_head < o.shape(0) as u32 * heads {
        let (batch, head) = (batch_head / heads, batch_head % heads);
        let o_base = (batch as usize * o.stride(0) + head as usize * o.stride(1)) / width;
        let d_base = (batch as usize * d_out.stride(0) + head as usize * d_out.stride(1)) / width;
        // Rows [first, first + rows) into the tiles, vector `index` of the block by unit
        // `index % UNITS`.
        #[unroll]
        for step in 0..comptime!((rows * row_chunks).div_ceil(UNITS)) {
            let index = UNIT_POS + step * UNITS;
            let (row, chunk) = (index / row_chunks, index % row_chunks);
            if index < rows * row_chunks && first + row < seq_q {
                let at = row * stride + chunk;
                tiles[at as usize] = o[vector_at::<F, N>(o, o_base, first + row, chunk)];
                tiles[(d_start + at) as usize] =
                    d_out[vector_at::<F, N>(d_out, d_base, first + row, chunk)];
            }
        }
        sync_cube();
        if UNIT_POS < rows && first + UNIT_POS < seq_q {
            let mut sum = 0.0f32;
            for chunk in 0..row_chunks {
                let at = UNIT_POS * stride + chunk;
                let (d, x) = (tiles[(d_start + at) as usize], tiles[at as usize]);
                #[unroll]
                for e in 0..width {
                    sum += f32::cast_from(d[e]) * f32::cast_from(x[e]);
                }
            }
            let i = (first + UNIT_POS) as usize;
            let at = batch as usize * delta.stride(0) + head as usize * delta.stride(1);
            delta[at + i * delta.stride(2)] = sum;
        }
    }
}
