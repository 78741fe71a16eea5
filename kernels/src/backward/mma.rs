//! The mma backward path: dK/dV and dQ on register-level `mma` (see
//! [`crate::primitives::mma`] for the fragment layout), FlashAttention-2's Algorithm 2.
//!
//! Both kernels give each plane 16 rows of the outer block and keep its gradient accumulators
//! in registers; the inner block streams through shared memory in 16-byte chunks.
//!
//! dK/dV (outer: key/value rows, inner: query blocks). Per query block, for the plane's 16
//! key rows, everything transposed so that the key row is the accumulator row:
//! ```text
//! S^T  = K Q^T        P^T = exp(S^T - lse)       (lse, delta per column)
//! dP^T = V dO^T       dS^T = P^T ∘ (dP^T - delta) ∘ softcap'
//! dV  += P^T dO       dK  += dS^T Q              (P^T, dS^T: accumulators reused as A)
//! ```
//! dQ (outer: query rows, inner: key/value blocks):
//! ```text
//! S = Q K^T   P = exp(S - lse)   dP = dO V^T   dS = P ∘ (dP - delta) ∘ softcap'   dQ += dS K
//! ```
//! dK and dQ are multiplied by `scale` once, when written. Every sum runs in a fixed order
//! (no atomics): reruns are bit-identical. P and dS are rounded to the input type before their
//! products, as FA-2 does (and as the tolerance rule's plain implementation does).
use cubecl::prelude::*;

use crate::config::{MATRIX_TILE, MMA_CHUNK};
use crate::forward::score_tensors;
use crate::primitives::block_range::{
    first_query_row, kv_block_range_full_rows, pair_needs_masked_pass,
};
use crate::primitives::mma::{
    ACC_REGS, BOTTOM_ROW, ChunkView, LANES, Lane, Pair, TILE_N, accumulate_product, chunk_tile,
    chunk_view, fetch_rows, lane, product_with_rows, staging, store_accumulator_row, store_rows,
    zero_accumulators,
};
use crate::primitives::precise_math::exp_f32;
use crate::primitives::score::{
    ScoreParams, ScoreTensors, is_masked_logit, scaled_logit, score, softcap_derivative,
};
use crate::problem::AttentionProblem;

use super::block_pair::row_stat;
use super::config::{BackwardConfig, BackwardKernel};
use super::{GradientInputs, score_params};

/// Launches the mma dK/dV kernel. The caller has checked the shapes and that q, k, v, d_out
/// load in chunks of [`MMA_CHUNK`] elements.
pub fn flash_attention_backward_dkdv_mma<R: Runtime, F: Float, M: Int>(
    client: &ComputeClient<R>,
    problem: &AttentionProblem,
    inputs: GradientInputs<R>,
    dk: TensorBinding<R>,
    dv: TensorBinding<R>,
    config: BackwardConfig,
) {
    debug_assert_eq!(config.kernel, BackwardKernel::KeyValue);
    let kv_blocks = problem.seq_kv.div_ceil(config.block_kv as usize) as u32;
    let args = inputs.into_args(client);
    // SAFETY: shapes, strides and chunking were validated against the problem; global reads
    // are bounds-checked per row, writes against seq_kv and the dims.
    unsafe {
        dkdv_mma_kernel::launch_unchecked::<F, M, R>(
            client,
            CubeCount::Static(kv_blocks, problem.heads_total() as u32, 1),
            CubeDim::new_2d(LANES, config.block_kv / MATRIX_TILE),
            MMA_CHUNK as usize,
            args.q,
            args.k,
            args.v,
            args.d_out,
            args.lse,
            args.delta,
            args.mask,
            args.bias,
            dk.into_tensor_arg(),
            dv.into_tensor_arg(),
            score_params(problem),
            config,
        )
    }
}

/// Launches the mma dQ kernel (same preconditions).
pub fn flash_attention_backward_dq_mma<R: Runtime, F: Float, M: Int>(
    client: &ComputeClient<R>,
    problem: &AttentionProblem,
    inputs: GradientInputs<R>,
    dq: TensorBinding<R>,
    config: BackwardConfig,
) {
    debug_assert_eq!(config.kernel, BackwardKernel::Query);
    let q_blocks = problem.seq_q.div_ceil(config.block_q as usize) as u32;
    let args = inputs.into_args(client);
    // SAFETY: as for dK/dV.
    unsafe {
        dq_mma_kernel::launch_unchecked::<F, M, R>(
            client,
            CubeCount::Static(q_blocks, problem.heads_total() as u32, 1),
            CubeDim::new_2d(LANES, config.block_q / MATRIX_TILE),
            MMA_CHUNK as usize,
            args.q,
            args.k,
            args.v,
            args.d_out,
            args.lse,
            args.delta,
            args.mask,
            args.bias,
            dq.into_tensor_arg(),
            score_params(problem),
            config,
        )
    }
}

/// The chunked shared-memory tiles of one block pair.
#[derive(CubeType)]
struct PairTiles<F: Float, N: Size> {
    /// `[block_q, head stride]`.
    q: SharedMemory<Vector<F, N>>,
    /// `[block_q, val stride]`.
    d_out: SharedMemory<Vector<F, N>>,
    /// `[block_kv, head stride]`.
    k: SharedMemory<Vector<F, N>>,
    /// `[block_kv, val stride]`.
    v: SharedMemory<Vector<F, N>>,
}

#[cube]
fn pair_tiles<F: Float, N: Size>(#[comptime] config: BackwardConfig) -> PairTiles<F, N> {
    PairTiles::<F, N> {
        q: chunk_tile::<F, N>(config.block_q, config.mma_head_stride()),
        d_out: chunk_tile::<F, N>(config.block_q, config.mma_val_stride()),
        k: chunk_tile::<F, N>(config.block_kv, config.mma_head_stride()),
        v: chunk_tile::<F, N>(config.block_kv, config.mma_val_stride()),
    }
}

/// Copies rows `[first_row, first_row + rows)` of a chunked tensor into a tile (zeros past
/// the tensor and in the padding). The caller synchronizes.
#[cube]
#[allow(clippy::too_many_arguments)]
fn copy_rows<F: Float, N: Size>(
    tensor: &Tensor<Vector<F, N>>,
    view: &ChunkView,
    tile: &mut SharedMemory<Vector<F, N>>,
    first_row: u32,
    #[comptime] rows: u32,
    #[comptime] dim: u32,
    #[comptime] stride: u32,
    #[comptime] units: u32,
) {
    let tile_chunks = comptime!(dim.next_multiple_of(MATRIX_TILE) / MMA_CHUNK);
    let mut staged = staging::<F, N>(rows, tile_chunks, units);
    fetch_rows::<F, N>(
        tensor,
        view,
        &mut staged,
        first_row,
        rows,
        comptime!(dim / MMA_CHUNK),
        tile_chunks,
        units,
    );
    store_rows::<F, N>(&staged, tile, rows, tile_chunks, stride, units);
}

/// P and dS of one score entry from its raw dot product, its dP, and its row's lse and
/// delta; both exactly 0 where masked (and for rows that see nothing: lse = f32::MAX).
#[cube]
#[allow(clippy::too_many_arguments)]
fn p_and_ds<F: Float, M: Int>(
    dot: f32,
    dp: f32,
    row_lse: f32,
    row_delta: f32,
    row: u32,
    col: u32,
    params: &ScoreParams,
    tensors: &ScoreTensors,
    mask: &Tensor<M>,
    bias: &Tensor<F>,
    #[comptime] config: BackwardConfig,
    #[comptime] masked_pass: bool,
) -> (f32, f32) {
    let logit = score::<F, M>(
        dot,
        row,
        col,
        params,
        tensors,
        mask,
        bias,
        config.score,
        masked_pass,
    );
    let mut p = exp_f32(logit - row_lse, false);
    if comptime!(masked_pass) {
        p = select(is_masked_logit(logit), 0.0f32, p);
    }
    let capped = scaled_logit(dot, params, config.score);
    let ds = p * (dp - row_delta) * softcap_derivative(capped, params, config.score);
    (p, ds)
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn dkdv_mma_kernel<F: Float, M: Int, N: Size>(
    q: &Tensor<Vector<F, N>>,
    k: &Tensor<Vector<F, N>>,
    v: &Tensor<Vector<F, N>>,
    d_out: &Tensor<Vector<F, N>>,
    lse: &Tensor<f32>,
    delta: &Tensor<f32>,
    mask: &Tensor<M>,
    bias: &Tensor<F>,
    dk: &mut Tensor<F>,
    dv: &mut Tensor<F>,
    params: ScoreParams,
    #[comptime] config: BackwardConfig,
) {
    let units = comptime!(config.block_kv / MATRIX_TILE * LANES);
    let heads = q.shape(1) as u32;
    let (batch, head) = (CUBE_POS_Y / heads, CUBE_POS_Y % heads);
    let kv_start = CUBE_POS_X * config.block_kv;
    let plane_row = UNIT_POS_Y * MATRIX_TILE;
    let lane = lane();
    let tensors = score_tensors(mask, bias, batch, head, config.score);
    let q_view = chunk_view(q, batch, head);
    let d_out_view = chunk_view(d_out, batch, head);
    let mut tiles = pair_tiles::<F, N>(config);
    let mut lse_tile = SharedMemory::<f32>::new(config.block_q as usize);
    let mut delta_tile = SharedMemory::<f32>::new(config.block_q as usize);
    let head_tiles = comptime!(config.head_dim.next_multiple_of(MATRIX_TILE) / TILE_N);
    let val_tiles = comptime!(config.val_dim.next_multiple_of(MATRIX_TILE) / TILE_N);
    let mut dk_acc = zero_accumulators(head_tiles);
    let mut dv_acc = zero_accumulators(val_tiles);

    // Step 1: K and V of this block, once; the first query block's sync makes them visible.
    copy_rows::<F, N>(
        k,
        &chunk_view(k, batch, head),
        &mut tiles.k,
        kv_start,
        config.block_kv,
        config.head_dim,
        config.mma_head_stride(),
        units,
    );
    copy_rows::<F, N>(
        v,
        &chunk_view(v, batch, head),
        &mut tiles.v,
        kv_start,
        config.block_kv,
        config.val_dim,
        config.mma_val_stride(),
        units,
    );

    // Step 2: the query blocks that see this block (causal: none above the diagonal).
    let first_row = first_query_row(kv_start, &params, config.score);
    let q_blocks = params.seq_q.div_ceil(config.block_q);
    for q_block in first_row / config.block_q..q_blocks {
        let q_start = q_block * config.block_q;
        copy_rows::<F, N>(
            q,
            &q_view,
            &mut tiles.q,
            q_start,
            config.block_q,
            config.head_dim,
            config.mma_head_stride(),
            units,
        );
        copy_rows::<F, N>(
            d_out,
            &d_out_view,
            &mut tiles.d_out,
            q_start,
            config.block_q,
            config.val_dim,
            config.mma_val_stride(),
            units,
        );
        if UNIT_POS < config.block_q {
            lse_tile[UNIT_POS as usize] = row_stat(lse, batch, head, q_start + UNIT_POS);
            delta_tile[UNIT_POS as usize] = row_stat(delta, batch, head, q_start + UNIT_POS);
        }
        sync_cube();
        // A uniform branch: every unit of the cube takes the same pass.
        let (block_q, block_kv) = (config.block_q, config.block_kv);
        if pair_needs_masked_pass(q_start, kv_start, &params, block_q, block_kv, config.score) {
            accumulate_dkdv::<F, M, N>(
                mask,
                bias,
                &params,
                &tensors,
                &tiles,
                &lse_tile,
                &delta_tile,
                q_start,
                kv_start + plane_row + lane.group,
                plane_row,
                lane,
                &mut dk_acc,
                &mut dv_acc,
                config,
                true,
            );
        } else {
            accumulate_dkdv::<F, M, N>(
                mask,
                bias,
                &params,
                &tensors,
                &tiles,
                &lse_tile,
                &delta_tile,
                q_start,
                kv_start + plane_row + lane.group,
                plane_row,
                lane,
                &mut dk_acc,
                &mut dv_acc,
                config,
                false,
            );
        }
        sync_cube();
    }

    // Step 3: dK = scale * Σ dS^T Q and dV = Σ P^T dO, rows past seq_kv not written.
    let row = kv_start + plane_row + lane.group;
    write_rows::<F>(
        dk,
        &dk_acc,
        batch,
        head,
        row,
        lane,
        params.seq_kv,
        params.scale,
        config.head_dim,
    );
    write_rows::<F>(
        dv,
        &dv_acc,
        batch,
        head,
        row,
        lane,
        params.seq_kv,
        1.0f32,
        config.val_dim,
    );
}

/// One query block of the dK/dV kernel for this plane's 16 key rows (`key_row`: this lane's
/// first, inside the (batch, head)).
#[cube]
#[allow(clippy::too_many_arguments)]
fn accumulate_dkdv<F: Float, M: Int, N: Size>(
    mask: &Tensor<M>,
    bias: &Tensor<F>,
    params: &ScoreParams,
    tensors: &ScoreTensors,
    tiles: &PairTiles<F, N>,
    lse_tile: &SharedMemory<f32>,
    delta_tile: &SharedMemory<f32>,
    q_start: u32,
    key_row: u32,
    plane_row: u32,
    lane: Lane,
    dk_acc: &mut Array<Pair<f32>>,
    dv_acc: &mut Array<Pair<f32>>,
    #[comptime] config: BackwardConfig,
    #[comptime] masked_pass: bool,
) {
    let q_tiles = comptime!(config.block_q / TILE_N);
    let (head_steps, val_steps) = comptime!((config.mma_head_steps(), config.mma_val_steps()));
    // S^T = K Q^T and dP^T = V dO^T, one 16 x 8 tile per 8 query rows.
    let (hs, vs) = comptime!((config.mma_head_stride(), config.mma_val_stride()));
    let mut st = product_with_rows::<F, N>(&tiles.k, plane_row, &tiles.q, hs, head_steps, q_tiles);
    let mut dpt =
        product_with_rows::<F, N>(&tiles.v, plane_row, &tiles.d_out, vs, val_steps, q_tiles);
    // P^T into st, dS^T into dpt. Entry (key row, query column): score(row = query, col = key).
    #[unroll]
    for j in 0..q_tiles {
        #[unroll]
        for h in 0..2u32 {
            let at = (j * ACC_REGS + h) as usize;
            let mut p = st[at];
            let mut ds = dpt[at];
            #[unroll]
            for e in 0..2u32 {
                let local = j * TILE_N + lane.quad * 2 + e;
                let (pe, dse) = p_and_ds::<F, M>(
                    p[e as usize],
                    ds[e as usize],
                    lse_tile[local as usize],
                    delta_tile[local as usize],
                    q_start + local,
                    key_row + h * BOTTOM_ROW,
                    params,
                    tensors,
                    mask,
                    bias,
                    config,
                    masked_pass,
                );
                p[e as usize] = pe;
                ds[e as usize] = dse;
            }
            st[at] = p;
            dpt[at] = ds;
        }
    }
    // dV += P^T dO, dK += dS^T Q: k runs over the block's query rows.
    accumulate_product::<F, N>(&st, &tiles.d_out, vs, q_tiles, val_steps, dv_acc);
    accumulate_product::<F, N>(&dpt, &tiles.q, hs, q_tiles, head_steps, dk_acc);
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn dq_mma_kernel<F: Float, M: Int, N: Size>(
    q: &Tensor<Vector<F, N>>,
    k: &Tensor<Vector<F, N>>,
    v: &Tensor<Vector<F, N>>,
    d_out: &Tensor<Vector<F, N>>,
    lse: &Tensor<f32>,
    delta: &Tensor<f32>,
    mask: &Tensor<M>,
    bias: &Tensor<F>,
    dq: &mut Tensor<F>,
    params: ScoreParams,
    #[comptime] config: BackwardConfig,
) {
    let units = comptime!(config.block_q / MATRIX_TILE * LANES);
    let heads = q.shape(1) as u32;
    let (batch, head) = (CUBE_POS_Y / heads, CUBE_POS_Y % heads);
    let q_block = CUBE_POS_X;
    let q_start = q_block * config.block_q;
    let plane_row = UNIT_POS_Y * MATRIX_TILE;
    let lane = lane();
    let tensors = score_tensors(mask, bias, batch, head, config.score);
    let k_view = chunk_view(k, batch, head);
    let v_view = chunk_view(v, batch, head);
    let mut tiles = pair_tiles::<F, N>(config);
    let head_tiles = comptime!(config.head_dim.next_multiple_of(MATRIX_TILE) / TILE_N);
    let mut dq_acc = zero_accumulators(head_tiles);

    // Step 1: Q and dO of this block, once, and this lane's two rows' lse and delta.
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
    copy_rows::<F, N>(
        d_out,
        &chunk_view(d_out, batch, head),
        &mut tiles.d_out,
        q_start,
        config.block_q,
        config.val_dim,
        config.mma_val_stride(),
        units,
    );
    let row = q_start + plane_row + lane.group;
    let stats = RowStats {
        top_lse: row_stat(lse, batch, head, row),
        bottom_lse: row_stat(lse, batch, head, row + BOTTOM_ROW),
        top_delta: row_stat(delta, batch, head, row),
        bottom_delta: row_stat(delta, batch, head, row + BOTTOM_ROW),
    };

    // Step 2: the visible key/value blocks, unmasked pass first. A partial query block takes
    // the masked pass everywhere: its rows past seq_q must not read the mask or bias.
    let range = kv_block_range_full_rows(
        q_block,
        &params,
        config.block_q,
        config.block_kv,
        config.score,
    );
    for kv_block in 0..range.first_masked {
        let kv_start = kv_block * config.block_kv;
        copy_rows::<F, N>(
            k,
            &k_view,
            &mut tiles.k,
            kv_start,
            config.block_kv,
            config.head_dim,
            config.mma_head_stride(),
            units,
        );
        copy_rows::<F, N>(
            v,
            &v_view,
            &mut tiles.v,
            kv_start,
            config.block_kv,
            config.val_dim,
            config.mma_val_stride(),
            units,
        );
        sync_cube();
        accumulate_dq::<F, M, N>(
            mask,
            bias,
            &params,
            &tensors,
            &tiles,
            &stats,
            kv_start,
            row,
            plane_row,
            lane,
            &mut dq_acc,
            config,
            false,
        );
        sync_cube();
    }
    for kv_block in range.first_masked..range.end {
        let kv_start = kv_block * config.block_kv;
        copy_rows::<F, N>(
            k,
            &k_view,
            &mut tiles.k,
            kv_start,
            config.block_kv,
            config.head_dim,
            config.mma_head_stride(),
            units,
        );
        copy_rows::<F, N>(
            v,
            &v_view,
            &mut tiles.v,
            kv_start,
            config.block_kv,
            config.val_dim,
            config.mma_val_stride(),
            units,
        );
        sync_cube();
        accumulate_dq::<F, M, N>(
            mask,
            bias,
            &params,
            &tensors,
            &tiles,
            &stats,
            kv_start,
            row,
            plane_row,
            lane,
            &mut dq_acc,
            config,
            true,
        );
        sync_cube();
    }

    // Step 3: dQ = scale * Σ dS K, rows past seq_q not written; rows that see no key at all
    // (causal with seq_q > seq_kv) write zeros.
    write_rows::<F>(
        dq,
        &dq_acc,
        batch,
        head,
        row,
        lane,
        params.seq_q,
        params.scale,
        config.head_dim,
    );
}

/// The lse and delta of this lane's two query rows.
#[derive(CubeType, Clone, Copy)]
struct RowStats {
    top_lse: f32,
    bottom_lse: f32,
    top_delta: f32,
    bottom_delta: f32,
}

/// One key/value block of the dQ kernel for this plane's 16 query rows (`query_row`: this
/// lane's first, inside the (batch, head)).
#[cube]
#[allow(clippy::too_many_arguments)]
fn accumulate_dq<F: Float, M: Int, N: Size>(
    mask: &Tensor<M>,
    bias: &Tensor<F>,
    params: &ScoreParams,
    tensors: &ScoreTensors,
    tiles: &PairTiles<F, N>,
    stats: &RowStats,
    kv_start: u32,
    query_row: u32,
    plane_row: u32,
    lane: Lane,
    dq_acc: &mut Array<Pair<f32>>,
    #[comptime] config: BackwardConfig,
    #[comptime] masked_pass: bool,
) {
    let kv_tiles = comptime!(config.block_kv / TILE_N);
    let (head_steps, val_steps) = comptime!((config.mma_head_steps(), config.mma_val_steps()));
    // S = Q K^T and dP = dO V^T, one 16 x 8 tile per 8 keys.
    let (hs, vs) = comptime!((config.mma_head_stride(), config.mma_val_stride()));
    let s = product_with_rows::<F, N>(&tiles.q, plane_row, &tiles.k, hs, head_steps, kv_tiles);
    let mut dp =
        product_with_rows::<F, N>(&tiles.d_out, plane_row, &tiles.v, vs, val_steps, kv_tiles);
    // dS into dp.
    #[unroll]
    for j in 0..kv_tiles {
        #[unroll]
        for h in 0..2u32 {
            let at = (j * ACC_REGS + h) as usize;
            let (row_lse, row_delta) = if h == 0 {
                (stats.top_lse, stats.top_delta)
            } else {
                (stats.bottom_lse, stats.bottom_delta)
            };
            let dot = s[at];
            let mut ds = dp[at];
            #[unroll]
            for e in 0..2u32 {
                let col = kv_start + j * TILE_N + lane.quad * 2 + e;
                let (_, dse) = p_and_ds::<F, M>(
                    dot[e as usize],
                    ds[e as usize],
                    row_lse,
                    row_delta,
                    query_row + h * BOTTOM_ROW,
                    col,
                    params,
                    tensors,
                    mask,
                    bias,
                    config,
                    masked_pass,
                );
                ds[e as usize] = dse;
            }
            dp[at] = ds;
        }
    }
    // dQ += dS K: k runs over the block's keys.
    accumulate_product::<F, N>(&dp, &tiles.k, hs, kv_tiles, head_steps, dq_acc);
}

/// Writes this lane's two rows (`row`, `row + 8`) of a gradient accumulated as `dim / 8`
/// tiles, times `factor`; rows at or past `rows` and columns past `dim` are not written.
#[cube]
#[allow(clippy::too_many_arguments)]
fn write_rows<F: Float>(
    out: &mut Tensor<F>,
    acc: &Array<Pair<f32>>,
    batch: u32,
    head: u32,
    row: u32,
    lane: Lane,
    rows: u32,
    factor: f32,
    #[comptime] dim: u32,
) {
    let base = batch as usize * out.stride(0) + head as usize * out.stride(1);
    if row < rows {
        store_accumulator_row::<F>(out, acc, base, row, lane, factor, 0u32, dim);
    }
    if row + BOTTOM_ROW < rows {
        store_accumulator_row::<F>(out, acc, base, row + BOTTOM_ROW, lane, factor, 1u32, dim);
    }
}
