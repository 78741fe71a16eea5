//! The one-pass mma dK/dV kernel's dQ share: each plane stores its dS^T (16 key rows x
//! `block_q` query columns, rounded to the input type as dK's product uses it) into one of two
//! shared buffers (by the query block's parity), and in the next block pair's step (or after
//! the last one) the planes compute the pair's `dS K` (`[block_q, head_dim]`) from that buffer
//! and the K tile, 16 rows x 16 columns per work item, and add it to the f32 accumulator with
//! atomic adds of 1, 2 or 4 adjacent columns per request (`config.dq_width`,
//! [`crate::backward::dq_sink`]):
//! ```text
//! dS^T regs --Pair stores--> ds buffer b % 2 [block_kv keys][block_q queries]
//!                                      |  ldmatrix.trans (A = dS, rows = queries)
//!   dQ_acc[q_start.., :] += dS K  <----+  K tile by columns (B)
//! ```
//! Deferring the share to the next step needs no cube sync of its own: the stream's cube-wide
//! wait that ends a block pair makes every plane's dS^T visible, and the buffer is written
//! again only after the wait that ends the next one. A plane that finishes its dK/dV products
//! early goes on to the share while the others still compute.
use cubecl::prelude::*;

use crate::backward::config::MmaGradientConfig;
use crate::backward::dq_sink::{DqSink, Quad};
use crate::primitives::mma::{
    ACC_REGS, BOTTOM_ROW, Lane, Pair, TILE_M, TILE_N, load_a_transposed, load_b_by_cols,
    mma_tile_pair, offset_index, zero_accumulators,
};

/// Where this lane's pair of accumulator tile `j`, row half `h` goes in the dS^T tile: key row
/// `plane_row + group + 8h`, query columns `8j + 2 quad` and `+ 1`; an [`offset_index`], so
/// that the stores take the tile's and row half's offset as their immediate.
#[cube]
fn ds_pair_index(
    plane_row: u32,
    lane: Lane,
    #[comptime] j: u32,
    #[comptime] h: u32,
    #[comptime] config: MmaGradientConfig,
) -> usize {
    let stride = comptime!(config.ds_tile_row_pairs());
    let base = (plane_row + lane.group) * stride + lane.quad;
    offset_index(base, comptime!(h * BOTTOM_ROW * stride + j * (TILE_N / 2))) as usize
}

/// Stores this plane's dS^T (accumulators `dst`, 16 key rows x `block_q` query columns) into
/// the dS^T tile from row `plane_row` (the buffer's first row plus the plane's), rounded to `F`
/// as the dK product rounds it.
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

/// The first row of query block `q_block`'s dS^T buffer in the one-pass dS^T tile.
#[cube]
pub(super) fn ds_buffer_row(q_block: u32, #[comptime] config: MmaGradientConfig) -> u32 {
    (q_block % 2) * config.block_kv
}

/// Work items a plane runs together (see [`add_dq_share`]): two at head dims up to 64 (all of
/// the plane's items there); at 128 the plane's four items in two pairs, as four at once
/// spilled twice the bytes of one at a time (316 against 156, offline SASS for sm_90a).
const JOINT_ITEMS: u32 = 2;

/// The one-pass backward's share of a block pair, its dS^T in the buffer from tile row `ds_row`:
/// `dQ_acc[q_start + i, c] += Σ_k dS[i, k] K[k, c]` for the block's query rows `i` (before
/// seq_q) and columns `c < head_dim`, by the sink's atomic adds of `config.dq_width` adjacent
/// columns per request ([`add_item`]). Work item `w` is 16 query rows (row tile
/// `w % row_tiles`) by 16 columns (step `w / row_tiles`), plane `p` takes
/// `w = p, p + planes, ...`; each runs over the block's keys in 16-key steps. dS is 0 for keys
/// past seq_kv (the masked pass) and K's rows there are zeros, so the keys need no bound.
///
/// Where the planes are a multiple of the row tiles and share the items evenly (the default
/// blocks: 4 planes x 2 row tiles at head dims up to 64, 8 x 4 above), every item of a plane
/// has the same row tile: the plane runs its items [`JOINT_ITEMS`] at a time, one dS fragment
/// per key step feeding each item's K fragment, their accumulators independent chains of mma (all planes
/// reach this step together, after the cube sync, so a plane working through its items one
/// dependent chain at a time leaves the tensor cores idle on the mma latency). Otherwise the
/// items run one after the other.
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
    ds_row: u32,
    batch: u32,
    head: u32,
    q_start: u32,
    seq_q: u32,
    lane: Lane,
    #[comptime] config: MmaGradientConfig,
) {
    let row_tiles = comptime!(config.block_q / TILE_M);
    let items = comptime!(row_tiles * config.mma_head_steps());
    let planes = comptime!(config.planes());
    let base = batch as usize * dq_acc.stride(0) + head as usize * dq_acc.stride(1);
    if comptime!(planes.is_multiple_of(row_tiles) && items.is_multiple_of(planes)) {
        // This plane's items: row tile `UNIT_POS_Y % row_tiles`, steps `first_step + i
        // step_stride` for i < per_plane, taken `joint` at a time (item i of a group in
        // accumulator tiles 2i and 2i + 1).
        let per_plane = comptime!(items / planes);
        let joint = comptime!(if per_plane.is_multiple_of(JOINT_ITEMS) {
            JOINT_ITEMS
        } else {
            1
        });
        let step_stride = comptime!(planes / row_tiles);
        let row_tile = UNIT_POS_Y % row_tiles;
        let first_step = UNIT_POS_Y / row_tiles;
        let q_row = q_start + row_tile * TILE_M;
        if comptime!(per_plane == joint) {
            add_group::<F, D, N>(
                dq_acc, ds_tile, k_tile, ds_row, base, q_row, row_tile, first_step, seq_q, lane,
                joint, config,
            );
        } else {
            // A loop whose trip count the compiler cannot see (it starts at this plane's step),
            // so that it does not unroll it: at head dim 128 the two groups unrolled into the
            // block's body spilled 296 bytes against 156 (offline SASS for sm_90a).
            let mut group_step = first_step;
            while group_step < comptime!(config.mma_head_steps()) {
                add_group::<F, D, N>(
                    dq_acc, ds_tile, k_tile, ds_row, base, q_row, row_tile, group_step, seq_q,
                    lane, joint, config,
                );
                group_step += comptime!(joint * step_stride);
            }
        }
    } else {
        let mut item = UNIT_POS_Y;
        while item < items {
            let (row_tile, step) = (item % row_tiles, item / row_tiles);
            add_group::<F, D, N>(
                dq_acc,
                ds_tile,
                k_tile,
                ds_row,
                base,
                q_start + row_tile * TILE_M,
                row_tile,
                step,
                seq_q,
                lane,
                1u32,
                config,
            );
            item += planes;
        }
    }
}

/// `joint` work items of row tile `row_tile` (query rows from `q_row`), at 16-column steps
/// `first_step + i planes / row_tiles`: one dS fragment per key step, one K fragment and one
/// pair of accumulator tiles per item.
#[cube]
#[allow(clippy::too_many_arguments)]
fn add_group<F: Float, D: DqSink, N: Size>(
    dq_acc: &mut Tensor<D::Acc>,
    ds_tile: &SharedMemory<Pair<F>>,
    k_tile: &SharedMemory<Vector<F, N>>,
    ds_row: u32,
    base: usize,
    q_row: u32,
    row_tile: u32,
    first_step: u32,
    seq_q: u32,
    lane: Lane,
    #[comptime] joint: u32,
    #[comptime] config: MmaGradientConfig,
) {
    let step_stride = comptime!(config.planes() / (config.block_q / TILE_M));
    let ds_stride = comptime!(config.ds_tile_row_pairs());
    let hs = comptime!(config.mma_head_stride());
    let mut shares = zero_accumulators(comptime!(2 * joint));
    #[unroll]
    for kk in 0..comptime!(config.block_kv / TILE_M) {
        let row_offset = comptime!(kk * TILE_M);
        let a = load_a_transposed::<F>(ds_tile, ds_row, row_offset, row_tile * 2, ds_stride);
        #[unroll]
        for i in 0..joint {
            let step = first_step + i * step_stride;
            let b = load_b_by_cols::<F, N>(k_tile, 0u32, comptime!(kk * TILE_M), hs, step);
            mma_tile_pair::<F>(&a, &b, &mut shares, comptime!(i));
        }
    }
    #[unroll]
    for i in 0..joint {
        add_item::<D>(
            dq_acc,
            &shares,
            base,
            q_row,
            first_step + i * step_stride,
            seq_q,
            lane,
            comptime!(i),
            config,
        );
    }
}

/// Adds one work item's 16 x 16 share (accumulator tiles `2 pair` and `2 pair + 1`: query rows
/// from `first_row`, columns of 16-column step `step`) to the accumulator at `base`, in requests
/// of `config.dq_width` f32 (see [`quad_of_lanes`] for 4).
#[cube]
#[allow(clippy::too_many_arguments)]
fn add_item<D: DqSink>(
    dq_acc: &mut Tensor<D::Acc>,
    share: &Array<Pair<f32>>,
    base: usize,
    first_row: u32,
    step: u32,
    seq_q: u32,
    lane: Lane,
    #[comptime] pair: u32,
    #[comptime] config: MmaGradientConfig,
) {
    let head_dim = comptime!(config.head_dim);
    // Every column of every step is inside head_dim: no column bound (all head dims the mma
    // path takes but those of 16k + 8 columns). Where there is one, a request's columns are all
    // inside head_dim or all past it: head_dim is a multiple of 8 on the mma path and a
    // request's first column a multiple of its width.
    let whole_steps = comptime!(config.head_dim.is_multiple_of(TILE_M));
    #[unroll]
    for h in 0..2u32 {
        let row = first_row + lane.group + h * BOTTOM_ROW;
        let left = share[((pair * 2) * ACC_REGS + h) as usize];
        let right = share[((pair * 2 + 1) * ACC_REGS + h) as usize];
        if comptime!(config.dq_width == 4) {
            // Outside the row bound: every lane of the plane takes part in the shuffle.
            let (quad, first_quad) = quad_of_lanes(left, right, lane);
            // Indexed in quads (head_dim, `base` and a step's 16 columns are whole quads), so
            // the request's address needs no division of the element index.
            let quads = comptime!(config.head_dim / 4);
            let col_quad = step * (TILE_M / 4) + first_quad;
            if row < seq_q && (whole_steps || col_quad < quads) {
                let at = base / 4 + row as usize * quads as usize + col_quad as usize;
                D::add_quad(dq_acc, at, quad);
            }
        } else if row < seq_q {
            let first_col = step * TILE_M + lane.quad * 2;
            let at = base + row as usize * head_dim as usize + first_col as usize;
            // The lane's two adjacent columns of each 8-column tile.
            if whole_steps || first_col < head_dim {
                D::add_pair(dq_acc, at, left);
            }
            if whole_steps || first_col + TILE_N < head_dim {
                D::add_pair(dq_acc, at + TILE_N as usize, right);
            }
        }
    }
}

/// Four adjacent columns of one accumulator row from the pairs two neighbouring lanes hold:
/// lanes of quads 2i and 2i + 1 (the same row group) hold columns 4i..4i+3 of the left 8-column
/// tile and of the right one, two each. They swap one pair (one shuffle of two f32 each), so
/// the even lane has the left tile's four and the odd lane the right's. Returns the four values
/// and where they start within the 16-column step, in quads (columns `4i` and `8 + 4i` are
/// quads `i` and `2 + i`).
/// ```text
/// columns      0 1 2 3 4 5 6 7 | 8 9 ...
/// quad 0 holds a a . . . . . . | b b          after: quad 0 adds 0..3 of the left tile,
/// quad 1 holds . . c c . . . . | . . d d             quad 1 adds 8..11 (b b d d)
/// ```
#[cube]
fn quad_of_lanes(left: Pair<f32>, right: Pair<f32>, lane: Lane) -> (Quad<f32>, u32) {
    let odd = lane.quad % 2 == 1;
    // The even lane gives its right pair, the odd lane its left pair.
    let given = select(odd, left, right);
    let mut taken = Pair::<f32>::new(0.0f32);
    taken[0] = plane_shuffle_xor(given[0], 1);
    taken[1] = plane_shuffle_xor(given[1], 1);
    // Even: its left pair then the neighbour's; odd: the neighbour's right pair then its own.
    let first = select(odd, taken, left);
    let second = select(odd, right, taken);
    let mut quad = Quad::<f32>::new(0.0f32);
    quad[0] = first[0];
    quad[1] = first[1];
    quad[2] = second[0];
    quad[3] = second[1];
    (quad, select(odd, TILE_N / 4, 0u32) + lane.quad / 2)
}
