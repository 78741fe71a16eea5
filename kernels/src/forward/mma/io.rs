//! The mma forward's output: the normalized O rows and the log-sum-exp, written at the end,
//! element by element from the accumulators ([`write_rows`]) or through the shared Q tile in
//! 16-byte chunks ([`write_rows_chunked`]).
use cubecl::prelude::*;

use crate::config::MmaConfig;
use crate::primitives::chunked_out::{copy_plane_rows, stage_accumulator_row};
use crate::primitives::mma::{
    BOTTOM_ROW, Lane, Pair, TILE_M, TILE_N, quad_sum, store_accumulator_row,
};
use crate::primitives::online_softmax::OnlineSoftmax;
use crate::primitives::score::ScoreParams;

use super::rows::Rows;

/// The finished statistics of this lane's row `i` (see [`Rows`]): the four lanes of its row
/// group hold partial sums, summed here; with `fold_scale` the running max (a raw dot) is
/// scaled, so that the log-sum-exp is of the logits.
#[cube]
fn finished_row(
    rows: &Rows,
    params: &ScoreParams,
    #[comptime] i: u32,
    #[comptime] config: MmaConfig,
) -> OnlineSoftmax {
    let mut softmax = rows.softmax(i);
    softmax.row_sum = quad_sum(softmax.row_sum);
    if comptime!(config.score.fold_scale) {
        softmax.row_max *= params.scale;
    }
    softmax
}

/// The factor a finished row's accumulators are multiplied by.
#[cube]
fn normalizer(softmax: &OnlineSoftmax, #[comptime] config: MmaConfig) -> f32 {
    if comptime!(config.quiet_softmax) {
        softmax.quiet_normalizer(false)
    } else {
        softmax.normalizer()
    }
}

/// Writes the log-sum-exp of `row` (the caller picks one lane per row and bounds the row).
#[cube]
fn write_lse(
    lse: &mut Tensor<f32>,
    softmax: &OnlineSoftmax,
    batch: u32,
    head: u32,
    row: u32,
    #[comptime] config: MmaConfig,
) {
    let at = batch as usize * lse.stride(0)
        + head as usize * lse.stride(1)
        + row as usize * lse.stride(2);
    lse[at] = if comptime!(config.quiet_softmax) {
        softmax.quiet_lse(false)
    } else {
        softmax.lse(false)
    };
}

/// Normalizes and writes this lane's rows of O (rows `first_row + 16 t` and `+ 8` of row tile
/// `t`) element by element from the accumulators, and their log-sum-exps from the first lane
/// of each row group.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn write_rows<F: Float>(
    o: &mut Tensor<F>,
    lse: &mut Tensor<f32>,
    rows: &Rows,
    params: &ScoreParams,
    batch: u32,
    head: u32,
    first_row: u32,
    lane: Lane,
    #[comptime] config: MmaConfig,
) {
    let val_tiles = comptime!(config.val_dim_tile() / TILE_N);
    #[unroll]
    for t in 0..comptime!(config.mma_row_tiles()) {
        #[unroll]
        for half in 0..2u32 {
            let softmax = finished_row(rows, params, comptime!(t * 2 + half), config);
            let row = first_row + t * TILE_M + half * BOTTOM_ROW;
            if row < params.seq_q {
                let base = batch as usize * o.stride(0) + head as usize * o.stride(1);
                store_accumulator_row::<F>(
                    o,
                    &rows.acc,
                    base,
                    row,
                    lane,
                    normalizer(&softmax, config),
                    comptime!(t * val_tiles),
                    half,
                    config.val_dim,
                );
                if lane.quad == 0 {
                    write_lse(lse, &softmax, batch, head, row, config);
                }
            }
        }
    }
}

/// Writes this plane's rows of O (from `first_row - group` on, `first_row` being this lane's
/// first) through its own rows of the shared Q tile, which no other plane reads
/// ([`crate::primitives::chunked_out`]): each lane stores its normalized accumulator pairs,
/// rounded to `F`, and the log-sum-exps from the first lane of each row group; after a plane
/// sync the plane copies its rows to `o` in 16-byte chunks. Needs
/// [`MmaConfig::mma_chunked_output`] and o's rows contiguous whole chunks (the launcher's check).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn write_rows_chunked<F: Float, N: Size>(
    o: &mut Tensor<F>,
    lse: &mut Tensor<f32>,
    q_tile: &mut SharedMemory<Vector<F, N>>,
    rows: &Rows,
    params: &ScoreParams,
    batch: u32,
    head: u32,
    first_row: u32,
    plane_row: u32,
    lane: Lane,
    #[comptime] config: MmaConfig,
) {
    let val_tiles = comptime!(config.val_dim_tile() / TILE_N);
    let stride = comptime!(config.mma_head_stride());
    #[unroll]
    for t in 0..comptime!(config.mma_row_tiles()) {
        #[unroll]
        for half in 0..2u32 {
            let softmax = finished_row(rows, params, comptime!(t * 2 + half), config);
            let factor = Pair::<f32>::new(normalizer(&softmax, config));
            let offset = t * TILE_M + half * BOTTOM_ROW;
            stage_accumulator_row::<F, N>(
                q_tile,
                &rows.acc,
                plane_row + lane.group + offset,
                lane,
                factor,
                comptime!(t * val_tiles),
                half,
                val_tiles,
                stride,
            );
            let row = first_row + offset;
            if row < params.seq_q && lane.quad == 0 {
                // (lse's strides read in each row's branch: read once before, ptxas hoists
                // them above the key/value loop, which took head dim 32's forward from 168 to
                // 176 registers, a cube fewer per SM; offline SASS for sm_90a.)
                write_lse(lse, &softmax, batch, head, row, config);
            }
        }
    }
    sync_plane();
    // (From `first_row`, which the key/value loop keeps: kept through the loop as well, the
    // query block's start cost head dim 32's causal forward 20 bytes of spills, offline SASS.)
    let plane_first_row = first_row - lane.group;
    // A plane whose rows all lie past seq_q writes nothing.
    if plane_first_row < params.seq_q {
        // o's rows hold val_dim elements, a whole number of chunks (a need of the mma path).
        copy_plane_rows::<F, N>(
            o,
            q_tile,
            batch,
            head,
            plane_first_row,
            params.seq_q,
            plane_row,
            lane,
            config.plane_rows,
            config.val_dim,
            stride,
        );
    }
}
