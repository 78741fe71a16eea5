//! How the portable and matrix forward kernels split a query row across units: a unit's
//! place ([`UnitRole`]), the softmax step of one key/value block over the row's units, and the
//! final write of its O columns and the row's log-sum-exp. (The mma path keeps rows in
//! registers instead: see [`super::mma`].)
use cubecl::prelude::*;

use crate::primitives::online_softmax::OnlineSoftmax;
use crate::primitives::row_reduce::{row_max, row_sum};

/// Normalizes this unit's O columns `lane + c * lanes` (c < `cols`, column < `val_dim`) of
/// query row `row` once, writes them, and writes the row's lse from lane 0.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_outputs<F: Float>(
    o: &mut Tensor<F>,
    lse: &mut Tensor<f32>,
    acc: &Array<f32>,
    softmax: &OnlineSoftmax,
    batch: u32,
    head: u32,
    row: u32,
    lane: u32,
    #[comptime] lanes: u32,
    #[comptime] val_dim: u32,
    #[comptime] cols: u32,
    #[comptime] precise: bool,
) {
    let normalizer = softmax.normalizer();
    let o_row =
        batch as usize * o.stride(0) + head as usize * o.stride(1) + row as usize * o.stride(2);
    #[unroll]
    for c in 0..cols {
        let col = lane + c * lanes;
        if col < val_dim {
            o[o_row + col as usize * o.stride(3)] = F::cast_from(acc[c as usize] * normalizer);
        }
    }
    if lane == 0 {
        let at = batch as usize * lse.stride(0)
            + head as usize * lse.stride(1)
            + row as usize * lse.stride(2);
        lse[at] = softmax.lse(precise);
    }
}

/// Where a unit sits in the cube (both paths): unit `UNIT_POS` owns query row
/// `UNIT_POS / units_per_row` of the block, as lane `UNIT_POS % units_per_row` of that row.
#[derive(CubeType, Clone, Copy)]
pub(crate) struct UnitRole {
    /// Row inside the query block.
    pub row: u32,
    /// Index among the units of that row.
    pub lane: u32,
    /// Row inside the (batch, head), clamped to `seq_q - 1`: rows past the end compute as the
    /// last row (so every read is in bounds) and are never written.
    pub read_row: u32,
}

#[cube]
pub(crate) fn unit_role(q_start: u32, seq_q: u32, #[comptime] units_per_row: u32) -> UnitRole {
    let row = UNIT_POS / units_per_row;
    UnitRole {
        row,
        lane: UNIT_POS % units_per_row,
        read_row: min(q_start + row, seq_q - 1),
    }
}

/// The softmax step of one key/value block for this unit's logits (its columns
/// `lane + t * lanes` of row `role.row`): new row max, `alpha`, P written to `p_tile` (row
/// stride `p_cols`, element type of the next product), row sum. Returns `alpha`, by which the
/// caller rescales its O accumulators. Synchronizes the cube; P is visible to all units after.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn softmax_block<P: Float>(
    logits: &Array<f32>,
    softmax: &mut OnlineSoftmax,
    p_tile: &mut SharedMemory<P>,
    partial_max: &mut SharedMemory<f32>,
    partial_sum: &mut SharedMemory<f32>,
    role: UnitRole,
    #[comptime] cols_per_unit: u32,
    #[comptime] lanes: u32,
    #[comptime] p_cols: u32,
    #[comptime] masked_pass: bool,
    #[comptime] precise: bool,
) -> f32 {
    let mut local_max = logits[0];
    #[unroll]
    for t in 1..cols_per_unit {
        local_max = max(local_max, logits[t as usize]);
    }
    let block_max = row_max(partial_max, local_max, role.row, role.lane, lanes);
    let alpha = softmax.rescale(block_max, precise);
    let p_row = (role.row * p_cols) as usize;
    let mut local_sum = 0.0f32;
    #[unroll]
    for t in 0..cols_per_unit {
        let p = softmax.probability(logits[t as usize], masked_pass, precise);
        p_tile[p_row + (role.lane + t * lanes) as usize] = P::cast_from(p);
        local_sum += p;
    }
    let block_sum = row_sum(partial_sum, local_sum, role.row, role.lane, lanes);
    softmax.accumulate(block_sum);
    alpha
}
