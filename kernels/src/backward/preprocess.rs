//! Backward preprocessing: `delta = rowsum(d_out ∘ o)`, the per-row term of the softmax
//! gradient `dS = P ∘ (dP - delta)` (FlashAttention-2, Algorithm 2, line 4).
use cubecl::prelude::*;

use crate::error::FlashError;
use crate::problem::AttentionProblem;

/// Units that share one row: each sums every `LANES_PER_ROW`-th column, then the lanes meet in a
/// shared-memory tree. 32 lanes cover a 256-wide row in 8 steps; a power of two for the tree.
const LANES_PER_ROW: usize = 32;
/// Rows per cube: 4 × 32 = 128 units, within every runtime's cube limit (wgpu guarantees 256).
const ROWS_PER_CUBE: usize = 4;

/// Computes `delta[b, h, i] = Σ_c d_out[b, h, i, c] · o[b, h, i, c]` in f32.
///
/// `o` and `d_out` are `[batch, num_heads, seq_q, val_dim]` with any strides; `delta` is an f32
/// `[batch, num_heads, seq_q]` tensor (any strides). Every element of `delta` is written.
///
/// # Important
///
/// The sum runs in a fixed order (strided lane sums, then a fixed tree), so reruns are
/// bit-identical.
pub fn flash_attention_backward_preprocess<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    problem: &AttentionProblem,
    o: TensorBinding<R>,
    d_out: TensorBinding<R>,
    delta: TensorBinding<R>,
) -> Result<(), FlashError> {
    problem.validate()?;
    let rows = problem.heads_total() * problem.seq_q;
    let cube_count = CubeCount::new_1d(rows.div_ceil(ROWS_PER_CUBE) as u32);
    let cube_dim = CubeDim::new_2d(LANES_PER_ROW as u32, ROWS_PER_CUBE as u32);
    // SAFETY: every access below is guarded by the row bound and `val_dim` from the tensors'
    // own shapes.
    unsafe {
        flash_attention_backward_preprocess_kernel::launch_unchecked::<F, R>(
            client,
            cube_count,
            cube_dim,
            o.into_tensor_arg(),
            d_out.into_tensor_arg(),
            delta.into_tensor_arg(),
        );
    }
    Ok(())
}

#[cube(launch_unchecked)]
fn flash_attention_backward_preprocess_kernel<F: Float>(
    o: &Tensor<F>,
    d_out: &Tensor<F>,
    delta: &mut Tensor<f32>,
) {
    let lane = UNIT_POS_X as usize;
    let row_in_cube = UNIT_POS_Y as usize;
    let num_heads = o.shape(1);
    let seq_q = o.shape(2);
    let val_dim = o.shape(3);
    let rows = o.shape(0) * num_heads * seq_q;
    let row = CUBE_POS_X as usize * ROWS_PER_CUBE + row_in_cube;

    // Step 1: each lane sums its strided share of the row. Rows past the end contribute 0 but
    // still take part in the barriers below.
    let mut partial = 0.0f32;
    if row < rows {
        let i = row % seq_q;
        let head = (row / seq_q) % num_heads;
        let batch = row / (seq_q * num_heads);
        let o_row = batch * o.stride(0) + head * o.stride(1) + i * o.stride(2);
        let d_out_row = batch * d_out.stride(0) + head * d_out.stride(1) + i * d_out.stride(2);
        let mut c = lane;
        while c < val_dim {
            partial += f32::cast_from(o[o_row + c * o.stride(3)])
                * f32::cast_from(d_out[d_out_row + c * d_out.stride(3)]);
            c += LANES_PER_ROW;
        }
    }

    // Step 2: a tree over the row's lanes in shared memory (no plane ops: wave64 and lavapipe).
    let mut lanes_sum = SharedMemory::<f32>::new(LANES_PER_ROW * ROWS_PER_CUBE);
    let slot = row_in_cube * LANES_PER_ROW;
    lanes_sum[slot + lane] = partial;
    sync_cube();
    // CUBE_DIM_X (= LANES_PER_ROW) is a runtime value: a comptime one could not be halved.
    let mut active = CUBE_DIM_X as usize / 2;
    while active > 0 {
        if lane < active {
            lanes_sum[slot + lane] = lanes_sum[slot + lane] + lanes_sum[slot + lane + active];
        }
        sync_cube();
        active /= 2;
    }

    // Step 3: lane 0 writes the row.
    if lane == 0 && row < rows {
        let i = row % seq_q;
        let head = (row / seq_q) % num_heads;
        let batch = row / (seq_q * num_heads);
        delta[batch * delta.stride(0) + head * delta.stride(1) + i * delta.stride(2)] =
            lanes_sum[slot];
    }
}
