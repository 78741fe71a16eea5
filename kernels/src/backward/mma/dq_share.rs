//! The one-pass mma dK/dV kernel's dQ share: each plane stores its dS^T (16 key rows x
//! `block_q` query columns, rounded to the input type as dK's product uses it) into a shared
//! tile, and after a cube sync the planes compute the pair's `dS K` (`[block_q, head_dim]`) from
//! that tile and the K tile, 16 rows x 16 columns per work item, and add it to the f32
//! accumulator with atomic adds ([`crate::backward::dq_sink`]):
//! ```text
//! dS^T regs --Pair stores--> ds tile [block_kv keys][block_q queries]
//!                                      |  ldmatrix.trans (A = dS, rows = queries)
//!   dQ_acc[q_start.., :] += dS K  <----+  K tile by columns (B)
//! ```
use cubecl::prelude::*;

use crate::backward::config::MmaGradientConfig;
use crate::backward::dq_sink::DqSink;
use crate::primitives::mma::{
    ACC_REGS, BOTTOM_ROW, Lane, Pair, TILE_M, TILE_N, load_a_transposed, load_b_by_cols, mma_tile_pair,
    zero_accumulators,
};

/// Where this lane's pair of accumulator tile `j`, row half `h` goes in the dS^T tile: key row
/// `plane_row + group + 8h`, query columns `8j + 2 quad` and `+ 1`.
#[cube]
fn ds_pair_index(plane_row: u32, lane: Lane, #[comptime] j: u32, #[comptime] h: u32, #[comptime] config: MmaGradientConfig) -> usize {
    let stride = comptime!(config.ds_tile_row_pairs());
    let key = plane_row + lane.group + h * BOTTOM_ROW;
    (key * stride + j * (TILE_N / 2) + lane.quad) as usize
}

/// Stores this plane's dS^T (accumulators `dst`, 16 key rows x `block_q` query columns) into
/// the dS^T tile, rounded to `F` as the dK product rounds it.
#[cube]
pub(super) fn store_ds_rows<F: Float>(
    ds_tile: &mut SharedMemory<Pair<F>>,
    dst: &Array<Pair<f32>>,
    plane_row: u32,
    lane: Lane,
    #[comptime] config: MmaGradientConfig,
) {
    #[unroll]
    for j in 0..comptime!(config.block_q / TILE_N) {
        #[unroll]
        for h in 0..2u32 {
            ds_tile[ds_pair_index(plane_row, lane, j, h, config)] =
                Pair::<F>::cast_from(dst[(j * ACC_REGS + h) as usize]);
        }
    }
}

/// The one-pass backward's share of this block pair: `dQ_acc[q_start + i, c] += Σ_k dS[i, k]
/// K[k, c]` for the block's query rows `i` (before seq_q) and columns `c < head_dim`, one f32
/// atomic add per element. Work item `w` is 16 query rows (row tile `w % row_tiles`) by 16
/// columns (step `w / row_tiles`), plane `p` takes `w = p, p + planes, ...`; each runs over the
/// block's keys in 16-key steps. dS is 0 for keys past seq_kv (the masked pass) and K's rows
/// there are zeros, so the keys need no bound.
///
/// `dq_acc` is the contiguous accumulator of [`crate::backward::dq_sink::zeroed_accumulator`]
/// (`[batch, num_heads, seq_q, head_dim]`): an element's place inside the (batch, head) is
/// `row * head_dim + col` with head_dim known when the kernel is built, so the work-item loop
/// reads no strides (which the kernel, at the edge of its registers, would otherwise reload
/// from the tensor metadata in every item), and where head_dim is a whole number of 16-column
/// steps no column needs a bound.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn add_dq_share<F: Float, D: DqSink, N: Size>(
    dq_acc: &mut Tensor<D::Acc>,
    ds_tile: &SharedMemory<Pair<F>>,
    k_tile: &SharedMemory<Vector<F, N>>,
    batch: u32,
    head: u32,
    q_start: u32,
    seq_q: u32,
    lane: Lane,
    #[comptime] config: MmaGradientConfig,
) {
    let row_tiles = comptime!(config.block_q / TILE_M);
    let items = comptime!(row_tiles * config.mma_head_steps());
    let ds_stride = comptime!(config.ds_tile_row_pairs());
    let hs = comptime!(config.mma_head_stride());
    let head_dim = comptime!(config.head_dim);
    // Every column of every step is inside head_dim: no column bound (all head dims the mma
    // path takes but those of 16k + 8 columns).
    let whole_steps = comptime!(config.head_dim.is_multiple_of(TILE_M));
    let base = batch as usize * dq_acc.stride(0) + head as usize * dq_acc.stride(1);
    let mut item = UNIT_POS_Y;
    while item < items {
        let (row_tile, step) = (item % row_tiles, item / row_tiles);
        let mut share = zero_accumulators(2u32);
        #[unroll]
        for kk in 0..comptime!(config.block_kv / TILE_M) {
            let a = load_a_transposed::<F>(ds_tile, kk * TILE_M, row_tile * 2, ds_stride);
            let b = load_b_by_cols::<F, N>(k_tile, kk * TILE_M, hs, step);
            mma_tile_pair::<F>(&a, &b, &mut share, 0u32);
        }
        let first_col = step * TILE_M + lane.quad * 2;
        #[unroll]
        for h in 0..2u32 {
            let row = q_start + row_tile * TILE_M + lane.group + h * BOTTOM_ROW;
            if row < seq_q {
                let at = base + row as usize * head_dim as usize + first_col as usize;
                #[unroll]
                for t in 0..2u32 {
                    let pair = share[(t * ACC_REGS + h) as usize];
                    #[unroll]
                    for e in 0..2u32 {
                        let offset = comptime!(t * TILE_N + e);
                        // A constant `true ||` where the steps are whole: no compare is emitted.
                        if whole_steps || first_col + offset < head_dim {
                            D::add(dq_acc, at + offset as usize, pair[e as usize]);
                        }
                    }
                }
            }
        }
        item += comptime!(config.planes());
    }
}
