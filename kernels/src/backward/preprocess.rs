//! Backward preprocessing: `delta = rowsum(d_out ∘ o)`, the per-row term of the softmax
//! gradient `dS = P ∘ (dP - delta)` (FlashAttention-2, Algorithm 2, line 4).
use cubecl::prelude::*;

use crate::error::FlashError;
use crate::plan::rows_in_vectors;
use crate::problem::{AttentionProblem, FloatKind};

/// Rows per cube, one unit per row: 4 planes of 32, 2 waves of 64, 16 lavapipe planes.
pub const ROWS_PER_CUBE: u32 = 128;

/// Computes `delta[b, h, i] = Σ_c d_out[b, h, i, c] · o[b, h, i, c]` in f32.
///
/// `o` and `d_out` are `[batch, num_heads, seq_q, val_dim]` with any strides; `delta` is an f32
/// `[batch, num_heads, seq_q]` tensor (any strides). Every element of `delta` is written.
///
/// # Important
///
/// One unit sums one row sequentially over `c = 0..val_dim`, the very order in which the
/// gradient kernels sum `dP = dO · V`: where a row of `o` equals a row of `v` (a single visible
/// key), `dP - delta` is then exactly 0, as it is mathematically. Reruns are bit-identical.
pub fn flash_attention_backward_preprocess<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    problem: &AttentionProblem,
    o: TensorBinding<R>,
    d_out: TensorBinding<R>,
    delta: TensorBinding<R>,
) -> Result<(), FlashError> {
    problem.validate()?;
    let rows = problem.heads_total() * problem.seq_q;
    let cube_count = CubeCount::new_1d(rows.div_ceil(ROWS_PER_CUBE as usize) as u32);
    let cube_dim = CubeDim::new_1d(ROWS_PER_CUBE);
    let vector_size = row_vector_size(client, problem.dtype, &[&o, &d_out]);
    // SAFETY: every access below is guarded by the row bound and `val_dim` from the tensors'
    // own shapes; `vector_size` divides val_dim, every row stride and both offsets.
    unsafe {
        flash_attention_backward_preprocess_kernel::launch_unchecked::<F, R>(
            client,
            cube_count,
            cube_dim,
            vector_size,
            o.into_tensor_arg(),
            d_out.into_tensor_arg(),
            delta.into_tensor_arg(),
        );
    }
    Ok(())
}

/// The widest load of the device that reads whole rows of every tensor (see
/// [`rows_in_vectors`]; 1 where none does): one unit then issues `val_dim / width` loads a
/// row instead of `val_dim` scalar ones, the summation order unchanged.
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

#[cube(launch_unchecked)]
pub fn flash_attention_backward_preprocess_kernel<F: Float, N: Size>(
    o: &Tensor<Vector<F, N>>,
    d_out: &Tensor<Vector<F, N>>,
    delta: &mut Tensor<f32>,
) {
    let width = o.vector_size();
    let num_heads = o.shape(1);
    let seq_q = o.shape(2);
    let row = ABSOLUTE_POS;
    if row < o.shape(0) * num_heads * seq_q {
        let i = row % seq_q;
        let head = (row / seq_q) % num_heads;
        let batch = row / (seq_q * num_heads);
        // Shapes and strides in elements, indices in vectors (a vectorized row is contiguous:
        // its stride(3) is 1, one vector).
        let o_row = (batch * o.stride(0) + head * o.stride(1) + i * o.stride(2)) / width;
        let d_out_row =
            (batch * d_out.stride(0) + head * d_out.stride(1) + i * d_out.stride(2)) / width;
        let mut sum = 0.0f32;
        for c in 0..o.shape(3) / width {
            let d = d_out[d_out_row + c * d_out.stride(3)];
            let x = o[o_row + c * o.stride(3)];
            #[unroll]
            for e in 0..width {
                sum += f32::cast_from(d[e]) * f32::cast_from(x[e]);
            }
        }
        delta[batch * delta.stride(0) + head * delta.stride(1) + i * delta.stride(2)] = sum;
    }
}
