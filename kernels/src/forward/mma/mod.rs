//! The mma forward path: FA-2's own recipe on register-level `mma` (see
//! [`crate::primitives::mma`] for the fragment layout).
//!
//! One cube per (query block, batch * head), `block_q / 16` planes of 32 lanes; plane `w` owns
//! query rows `[16w, 16w + 16)` of the block, lane `l` rows `group = l / 4` and `group + 8` of
//! them. Per key/value block:
//! 1. `S = Q K^T` into accumulators (Q's A fragments loaded once, K's B fragments by `ldmatrix`);
//! 2. logits through [`score`], the online softmax of both rows on the accumulators (row maxima
//!    over the four lanes of a row group by `plane_shuffle_xor`; row sums stay per lane until
//!    the end), O rescaled by `alpha` in registers;
//! 3. `O += P V`, P being the cast accumulators of step 1 (never leaving registers), V's B
//!    fragments by transposing `ldmatrix`.
//!
//! The next block's K and V are fetched from global memory into registers (16-byte loads)
//! while this block computes, and stored to shared memory between two cube syncs.
//!
//! Needs (checked by `heuristics`): the manual MMA config, plane size 32, head_dim and
//! val_dim multiples of 8 up to 128, and (checked by the launcher) q, k, v whose rows are
//! contiguous 16-byte chunks. Control flow is uniform across the cube.
use cubecl::prelude::*;

use crate::config::{FlashConfig, MATRIX_TILE, MMA_CHUNK};
use crate::primitives::block_range::{KvBlockRange, kv_block_range};
use crate::primitives::chunk_io::{ChunkView, chunk_tile, chunk_view, copy_rows, staging};
use crate::primitives::mma::{
    A_REGS, ACC_REGS, BOTTOM_ROW, LANES, Lane, Pair, TILE_M, TILE_N, accumulate_product, lane,
    load_a, load_b_by_rows, mma_tile_pair, quad_max, quad_sum, zero_accumulators,
};
use crate::primitives::online_softmax::OnlineSoftmax;
use crate::primitives::score::{MASKED_LOGIT, ScoreParams, ScoreParamsLaunch, ScoreTensors, score};

use super::{ForwardArgs, score_tensors};
use io::{Staged, stage_block, store_block, write_row};

mod io;

/// Launches the mma kernel. The caller has validated the problem, checked the device and
/// that q, k, v load in chunks of `chunk` elements.
pub(crate) fn launch<R: Runtime, F: Float, M: Int>(
    client: &ComputeClient<R>,
    args: ForwardArgs<R>,
    params: ScoreParamsLaunch<R>,
    config: FlashConfig,
    cube_count: CubeCount,
    chunk: usize,
) {
    let cube_dim = CubeDim::new_2d(LANES, config.num_planes());
    // SAFETY: shapes and strides were validated against the problem and the chunking; global
    // reads are bounds-checked per row, writes against seq_q / val_dim.
    unsafe {
        flash_attention_forward_mma_kernel::launch_unchecked::<F, M, R>(
            client, cube_count, cube_dim, chunk, args.q, args.k, args.v, args.mask, args.bias,
            args.o, args.lse, params, config,
        )
    }
}

/// Shared-memory tiles of one cube, in chunks, rows padded by one chunk.
#[derive(CubeType)]
struct Tiles<F: Float, N: Size> {
    /// `[block_q, head stride]`: read once into Q fragments.
    q: SharedMemory<Vector<F, N>>,
    /// `[block_kv, head stride]`: one key block.
    k: SharedMemory<Vector<F, N>>,
    /// `[block_kv, val stride]`: one value block.
    v: SharedMemory<Vector<F, N>>,
}

/// The running state of this lane's two query rows.
#[derive(CubeType)]
struct Rows {
    /// Row `group` of the plane's 16.
    top: OnlineSoftmax,
    /// Row `group + 8`.
    bottom: OnlineSoftmax,
    /// O accumulators, `val_dim_tile / 8` tiles.
    acc: Array<Pair<f32>>,
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn flash_attention_forward_mma_kernel<F: Float, M: Int, N: Size>(
    q: &Tensor<Vector<F, N>>,
    k: &Tensor<Vector<F, N>>,
    v: &Tensor<Vector<F, N>>,
    mask: &Tensor<M>,
    bias: &Tensor<F>,
    o: &mut Tensor<F>,
    lse: &mut Tensor<f32>,
    params: ScoreParams,
    #[comptime] config: FlashConfig,
) {
    let units = comptime!(config.units());
    let head_chunks = comptime!(config.head_dim_tile() / MMA_CHUNK);
    // Causal: the last query blocks see the most keys; launching them first keeps the tail
    // of the grid short (FA-2 does the same).
    let mut q_block = CUBE_POS_X;
    if comptime!(config.score.causal) {
        q_block = reversed(CUBE_POS_X, CUBE_COUNT_X);
    }
    let heads = q.shape(1) as u32;
    let (batch, head) = (CUBE_POS_Y / heads, CUBE_POS_Y % heads);
    let q_start = q_block * config.block_q;
    let plane_row = UNIT_POS_Y * MATRIX_TILE;
    let lane = lane();
    let k_view = chunk_view(k, batch, head);
    let v_view = chunk_view(v, batch, head);
    let tensors = score_tensors(mask, bias, batch, head, config.score);

    let mut tiles = Tiles::<F, N> {
        q: chunk_tile::<F, N>(config.block_q, config.mma_head_stride()),
        k: chunk_tile::<F, N>(config.block_kv, config.mma_head_stride()),
        v: chunk_tile::<F, N>(config.block_kv, config.mma_val_stride()),
    };
    let mut staged = Staged::<F, N> {
        k: staging::<F, N>(config.block_kv, head_chunks, units),
        v: staging::<F, N>(
            config.block_kv,
            comptime!(config.val_dim_tile() / MMA_CHUNK),
            units,
        ),
    };

    // Step 1: the query block into shared memory, then this plane's A fragments, once.
    copy_rows::<F, N>(
        q,
        &chunk_view(q, batch, head),
        &mut tiles.q,
        q_start,
        config.block_q,
        config.head_dim,
        config.mma_head_stride(),
        units,
    );
    sync_cube();
    let mut q_frags = Array::<Pair<F>>::new(comptime!((A_REGS * head_chunks / 2) as usize));
    #[unroll]
    for kk in 0..comptime!(head_chunks / 2) {
        let frag = load_a::<F, N>(&tiles.q, plane_row, config.mma_head_stride(), kk);
        #[unroll]
        for r in 0..A_REGS {
            q_frags[(kk * A_REGS + r) as usize] = frag[r as usize];
        }
    }

    let mut rows = Rows {
        top: OnlineSoftmax::new(),
        bottom: OnlineSoftmax::new(),
        acc: zero_accumulators(comptime!(config.val_dim_tile() / TILE_N)),
    };

    // Step 2: stream the visible key/value blocks (causal skipping, unmasked pass first).
    let range = kv_block_range(
        q_block,
        &params,
        config.block_q,
        config.block_kv,
        config.score,
    );
    if range.end > 0 {
        stage_block::<F, N>(k, v, &k_view, &v_view, &mut staged, 0u32, config);
        store_block::<F, N>(&staged, &mut tiles, config);
    }
    sync_cube();
    let first_row = q_start + plane_row + lane.group;
    for kv_block in 0..range.first_masked {
        attend_kv_block::<F, M, N>(
            k,
            v,
            mask,
            bias,
            &k_view,
            &v_view,
            &params,
            &tensors,
            &range,
            kv_block,
            first_row,
            lane,
            &q_frags,
            &mut tiles,
            &mut staged,
            &mut rows,
            config,
            false,
        );
    }
    for kv_block in range.first_masked..range.end {
        attend_kv_block::<F, M, N>(
            k,
            v,
            mask,
            bias,
            &k_view,
            &v_view,
            &params,
            &tensors,
            &range,
            kv_block,
            first_row,
            lane,
            &q_frags,
            &mut tiles,
            &mut staged,
            &mut rows,
            config,
            true,
        );
    }

    // Step 3: the four lanes of a row group hold partial row sums; sum them, normalize once,
    // write O and the log-sum-exp.
    rows.top.row_sum = quad_sum(rows.top.row_sum);
    rows.bottom.row_sum = quad_sum(rows.bottom.row_sum);
    let seq_q = params.seq_q;
    write_row::<F>(
        o, lse, &rows.acc, &rows.top, batch, head, first_row, lane, 0u32, seq_q, config,
    );
    write_row::<F>(
        o,
        lse,
        &rows.acc,
        &rows.bottom,
        batch,
        head,
        first_row + BOTTOM_ROW,
        lane,
        1u32,
        seq_q,
        config,
    );
}

/// Position `pos` of `count`, counted from the end.
#[cube]
fn reversed(pos: u32, count: u32) -> u32 {
    count - 1 - pos
}

/// One iteration of the main loop (see the module doc). `first_row` is this lane's top row
/// inside the (batch, head); `masked_pass` emits the tail / causal / mask checks.
#[cube]
#[allow(clippy::too_many_arguments)]
fn attend_kv_block<F: Float, M: Int, N: Size>(
    k: &Tensor<Vector<F, N>>,
    v: &Tensor<Vector<F, N>>,
    mask: &Tensor<M>,
    bias: &Tensor<F>,
    k_view: &ChunkView,
    v_view: &ChunkView,
    params: &ScoreParams,
    tensors: &ScoreTensors,
    range: &KvBlockRange,
    kv_block: u32,
    first_row: u32,
    lane: Lane,
    q_frags: &Array<Pair<F>>,
    tiles: &mut Tiles<F, N>,
    staged: &mut Staged<F, N>,
    rows: &mut Rows,
    #[comptime] config: FlashConfig,
    #[comptime] masked_pass: bool,
) {
    let kv_tiles = comptime!(config.block_kv / TILE_N);
    let val_tiles = comptime!(config.val_dim_tile() / TILE_N);
    let kv_start = kv_block * config.block_kv;
    let next = kv_block + 1;
    let has_next = next < range.end;

    // The next block's loads are issued now and land while this block computes.
    if has_next {
        stage_block::<F, N>(k, v, k_view, v_view, staged, next, config);
    }

    // S = Q K^T: one 16 x 8 accumulator tile per 8 keys.
    let mut s = zero_accumulators(kv_tiles);
    #[unroll]
    for kk in 0..comptime!(config.head_dim_tile() / MATRIX_TILE) {
        let mut a = Array::<Pair<F>>::new(A_REGS as usize);
        #[unroll]
        for r in 0..A_REGS {
            a[r as usize] = q_frags[(kk * A_REGS + r) as usize];
        }
        #[unroll]
        for jj in 0..comptime!(kv_tiles / 2) {
            let b = load_b_by_rows::<F, N>(&tiles.k, jj * TILE_M, config.mma_head_stride(), kk);
            mma_tile_pair::<F>(&a, &b, &mut s, jj);
        }
    }

    // Logits, then the online softmax of the top and bottom rows. Rows past seq_q compute as
    // the last row (reads stay in bounds) and are never written.
    let top_row = min(first_row, params.seq_q - 1);
    let bottom_row = min(first_row + BOTTOM_ROW, params.seq_q - 1);
    let mut top_max = f32::new(MASKED_LOGIT);
    let mut bottom_max = top_max;
    #[unroll]
    for j in 0..kv_tiles {
        let col = kv_start + j * TILE_N + lane.quad * 2;
        let mut upper = s[(j * ACC_REGS) as usize];
        let mut lower = s[(j * ACC_REGS + 1) as usize];
        #[unroll]
        for e in 0..2u32 {
            let (at, column) = (e as usize, col + e);
            upper[at] = score::<F, M>(
                upper[at],
                top_row,
                column,
                params,
                tensors,
                mask,
                bias,
                config.score,
                masked_pass,
            );
            lower[at] = score::<F, M>(
                lower[at],
                bottom_row,
                column,
                params,
                tensors,
                mask,
                bias,
                config.score,
                masked_pass,
            );
            top_max = max(top_max, upper[at]);
            bottom_max = max(bottom_max, lower[at]);
        }
        s[(j * ACC_REGS) as usize] = upper;
        s[(j * ACC_REGS + 1) as usize] = lower;
    }
    let top_alpha = rows.top.rescale(quad_max(top_max), false);
    let bottom_alpha = rows.bottom.rescale(quad_max(bottom_max), false);
    let mut top_sum = 0.0f32;
    let mut bottom_sum = 0.0f32;
    #[unroll]
    for j in 0..kv_tiles {
        let mut upper = s[(j * ACC_REGS) as usize];
        let mut lower = s[(j * ACC_REGS + 1) as usize];
        #[unroll]
        for e in 0..2u32 {
            let at = e as usize;
            upper[at] = rows.top.probability(upper[at], masked_pass, false);
            lower[at] = rows.bottom.probability(lower[at], masked_pass, false);
            top_sum += upper[at];
            bottom_sum += lower[at];
        }
        s[(j * ACC_REGS) as usize] = upper;
        s[(j * ACC_REGS + 1) as usize] = lower;
    }
    rows.top.accumulate(top_sum);
    rows.bottom.accumulate(bottom_sum);
    #[unroll]
    for j in 0..val_tiles {
        let (upper, lower) = ((j * ACC_REGS) as usize, (j * ACC_REGS + 1) as usize);
        rows.acc[upper] = rows.acc[upper] * Pair::<f32>::new(top_alpha);
        rows.acc[lower] = rows.acc[lower] * Pair::<f32>::new(bottom_alpha);
    }

    // O += P V: P of score tiles 2kk, 2kk + 1 is the A fragment of k-step kk.
    accumulate_product::<F, N>(
        &s,
        &tiles.v,
        config.mma_val_stride(),
        kv_tiles,
        comptime!(val_tiles / 2),
        &mut rows.acc,
    );

    // Every plane is done reading this block's K and V before the next block overwrites them.
    sync_cube();
    if has_next {
        store_block::<F, N>(staged, tiles, config);
    }
    sync_cube();
}
