//! The mma dQ kernel (see the parent module).
use cubecl::prelude::*;

use core::marker::PhantomData;

use crate::config::{MATRIX_TILE, MMA_CHUNK};
use crate::primitives::block_range::{
    kv_block_range_full_rows, query_block_heaviest_first, rows_kv_end,
};
use crate::primitives::block_stream::{BlockBody, BlockSpan, stream_blocks};
use crate::plan::rows_in_vectors;
use crate::primitives::chunk_io::{chunk_view, copy_rows};
use crate::primitives::mma::{
    ACC_REGS, BOTTOM_ROW, LANES, Lane, Pair, TILE_N, accumulate_product, lane, product_with_rows,
    zero_accumulators,
};
use crate::primitives::pair_stream::{AsyncCopy, PairSource, PairStream, Staged};
use crate::primitives::score::{ScoreParams, ScoreTensors, score_tensors};
use crate::problem::AttentionProblem;

use super::chunked_grads::write_dq_chunked;
use super::{PairTiles, p_and_ds, pair_tiles, softmax_lse, write_rows};
use crate::backward::GradientInputs;
use crate::backward::config::{BackwardKernel, MmaGradientConfig};
use crate::primitives::score::score_params;
use crate::primitives::tile_io::row_stat;

/// Launches the mma dQ kernel (preconditions as for [`super::flash_attention_backward_dkdv_mma`]).
pub fn flash_attention_backward_dq_mma<R: Runtime, F: Float, M: Int>(
    client: &ComputeClient<R>,
    problem: &AttentionProblem,
    inputs: GradientInputs<R>,
    dq: TensorBinding<R>,
    config: MmaGradientConfig,
) {
    debug_assert_eq!(config.kernel, BackwardKernel::Query);
    if config.async_inner {
        launch::<R, F, M, AsyncCopy>(client, problem, inputs, dq, config)
    } else {
        launch::<R, F, M, Staged>(client, problem, inputs, dq, config)
    }
}

fn launch<R: Runtime, F: Float, M: Int, S: PairStream>(
    client: &ComputeClient<R>,
    problem: &AttentionProblem,
    inputs: GradientInputs<R>,
    dq: TensorBinding<R>,
    config: MmaGradientConfig,
) {
    let q_blocks = problem.seq_q.div_ceil(config.block_q as usize) as u32;
    // dQ in 16-byte chunks only where its rows are contiguous whole chunks (as dK / dV's).
    let chunked = rows_in_vectors(problem.dtype, MMA_CHUNK as usize, &[&dq]);
    let config = MmaGradientConfig { chunked_output: config.chunked_output && chunked, ..config };
    let args = inputs.into_args(client);
    // SAFETY: as for dK/dV.
    unsafe {
        dq_mma_kernel::launch_unchecked::<F, M, S, R>(
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
            args.slopes,
            dq.into_tensor_arg(),
            score_params(problem),
            config,
        )
    }
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn dq_mma_kernel<F: Float, M: Int, S: PairStream, N: Size>(
    q: &Tensor<Vector<F, N>>,
    k: &Tensor<Vector<F, N>>,
    v: &Tensor<Vector<F, N>>,
    d_out: &Tensor<Vector<F, N>>,
    lse: &Tensor<f32>,
    delta: &Tensor<f32>,
    mask: &Tensor<M>,
    bias: &Tensor<F>,
    slopes: &Tensor<f32>,
    dq: &mut Tensor<F>,
    params: ScoreParams,
    #[comptime] config: MmaGradientConfig,
) {
    let units = comptime!(config.units());
    let heads = q.shape(1) as u32;
    let (batch, head) = (CUBE_POS_Y / heads, CUBE_POS_Y % heads);
    let q_block = query_block_heaviest_first(config.score.causal);
    let q_start = q_block * config.block_q;
    let plane_row = UNIT_POS_Y * MATRIX_TILE;
    let lane = lane();
    let kv_head = head / (heads / k.shape(1) as u32);
    let tensors = score_tensors(mask, bias, slopes, batch, head, config.score);
    let k_view = chunk_view(k, batch, kv_head);
    let v_view = chunk_view(v, batch, kv_head);
    let mut tiles = pair_tiles::<F, N>(config);
    let head_tiles = comptime!(config.head_dim.next_multiple_of(MATRIX_TILE) / TILE_N);
    let dq_acc = zero_accumulators(head_tiles);

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
        top_lse: softmax_lse(row_stat(lse, batch, head, row), config),
        bottom_lse: softmax_lse(row_stat(lse, batch, head, row + BOTTOM_ROW), config),
        top_delta: row_stat(delta, batch, head, row),
        bottom_delta: row_stat(delta, batch, head, row + BOTTOM_ROW),
    };

    // Step 2: the visible key/value blocks, unmasked pass first. A partial query block takes
    // the masked pass everywhere: its rows past seq_q must not read the mask or bias.
    let plane_kv_end = rows_kv_end(q_start + plane_row, MATRIX_TILE, &params, config.score);
    let range = kv_block_range_full_rows(
        q_block,
        &params,
        config.block_q,
        config.block_kv,
        config.score,
    );
    let inputs = KeyInputs::<F, M, N> {
        kv: PairSource::<F, N> {
            first: *k,
            first_view: k_view,
            second: *v,
            second_view: v_view,
        },
        mask: *mask,
        bias: *bias,
        params,
        tensors,
        stats,
        plane_kv_end,
        query_row: row,
        plane_row,
        lane,
    };
    let mut state = KeyState::<F, S, N> {
        tiles,
        stream: S::init::<F, N>(comptime!(config.mma_inner_pair())),
        dq_acc,
    };
    stream_blocks::<KeyBlocks<F, M, S, N>>(&inputs, &mut state, range, config);
    let dq_acc = state.dq_acc;

    // Step 3: dQ = scale * Σ dS K, rows past seq_q not written; rows that see no key at all
    // (causal with seq_q > seq_kv) write zeros; chunked, through the Q tile.
    if comptime!(config.chunked_output) {
        write_dq_chunked::<F, N>(
            dq, &mut state.tiles.q, &dq_acc, &params, batch, head, q_start, plane_row, lane, config,
        );
    } else {
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
}

/// The lse (as [`p_and_ds`] takes it) and delta of this lane's two query rows.
#[derive(CubeType, Clone, Copy)]
struct RowStats {
    top_lse: f32,
    bottom_lse: f32,
    top_delta: f32,
    bottom_delta: f32,
}

/// What the dQ kernel only reads while it streams: the key/value tensors, mask and bias, this
/// lane's rows' statistics and place (`query_row`: its top row inside the (batch, head);
/// `plane_kv_end`: where the keys its plane's rows see end).
#[derive(CubeType)]
struct KeyInputs<F: Float, M: Int, N: Size> {
    /// K and V.
    kv: PairSource<F, N>,
    mask: Tensor<M>,
    bias: Tensor<F>,
    params: ScoreParams,
    tensors: ScoreTensors,
    stats: RowStats,
    plane_kv_end: u32,
    query_row: u32,
    plane_row: u32,
    lane: Lane,
}

/// What the key/value blocks change: the tiles, the stream, dQ.
#[derive(CubeType)]
struct KeyState<F: Float, S: PairStream, N: Size> {
    tiles: PairTiles<F, N>,
    stream: S::State<F, N>,
    dq_acc: Array<Pair<f32>>,
}

/// The dQ kernel's part of [`stream_blocks`]: the masked pass from `span.first_masked` on.
struct KeyBlocks<F: Float, M: Int, S: PairStream, N: Size> {
    _types: PhantomData<(F, M, S, N)>,
}

#[cube]
impl<F: Float, M: Int, S: PairStream, N: Size> BlockBody for KeyBlocks<F, M, S, N> {
    type Inputs = KeyInputs<F, M, N>;
    type State = KeyState<F, S, N>;
    type Config = MmaGradientConfig;

    fn start(
        inputs: &KeyInputs<F, M, N>,
        state: &mut KeyState<F, S, N>,
        block: u32,
        tile_row: u32,
        #[comptime] config: MmaGradientConfig,
    ) {
        S::start::<F, N>(
            &mut state.stream,
            &inputs.kv,
            &mut state.tiles.k,
            &mut state.tiles.v,
            block * config.block_kv,
            tile_row,
            comptime!(config.mma_inner_pair()),
        );
    }

    fn finish(
        _inputs: &KeyInputs<F, M, N>,
        state: &mut KeyState<F, S, N>,
        tile_row: u32,
        started: bool,
        #[comptime] config: MmaGradientConfig,
    ) {
        S::finish::<F, N>(
            &mut state.stream,
            &mut state.tiles.k,
            &mut state.tiles.v,
            tile_row,
            started,
            comptime!(config.mma_inner_pair()),
        );
    }

    fn needs_masked(
        _inputs: &KeyInputs<F, M, N>,
        span: &BlockSpan,
        block: u32,
        #[comptime] _config: MmaGradientConfig,
    ) -> bool {
        block >= span.first_masked
    }

    fn compute(
        inputs: &KeyInputs<F, M, N>,
        state: &mut KeyState<F, S, N>,
        kv_block: u32,
        tile_row: u32,
        #[comptime] config: MmaGradientConfig,
        #[comptime] masked_pass: bool,
    ) {
        let kv_start = kv_block * config.block_kv;
        // (Causal: a block that this plane's 16 rows see none of changes nothing, dS = 0:
        // the plane skips it, a plane-uniform branch.)
        let mut needed = true;
        if comptime!(masked_pass) {
            needed = kv_start < inputs.plane_kv_end;
        }
        if needed {
            accumulate_dq::<F, M, N>(
                &inputs.mask,
                &inputs.bias,
                &inputs.params,
                &inputs.tensors,
                &state.tiles,
                &inputs.stats,
                kv_start,
                tile_row,
                inputs.query_row,
                inputs.plane_row,
                inputs.lane,
                &mut state.dq_acc,
                config,
                masked_pass,
            );
        }
    }
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
    tile_row: u32,
    query_row: u32,
    plane_row: u32,
    lane: Lane,
    dq_acc: &mut Array<Pair<f32>>,
    #[comptime] config: MmaGradientConfig,
    #[comptime] masked_pass: bool,
) {
    let kv_tiles = comptime!(config.block_kv / TILE_N);
    let (head_steps, val_steps) = comptime!((config.mma_head_steps(), config.mma_val_steps()));
    // S = Q K^T and dP = dO V^T, one 16 x 8 tile per 8 keys.
    let (hs, vs) = comptime!((config.mma_head_stride(), config.mma_val_stride()));
    let s = product_with_rows::<F, N>(
        &tiles.q, plane_row, &tiles.k, tile_row, hs, head_steps, kv_tiles, config.rolled_steps,
    );
    let mut dp = product_with_rows::<F, N>(
        &tiles.d_out,
        plane_row,
        &tiles.v,
        tile_row,
        vs,
        val_steps,
        kv_tiles,
        config.rolled_steps,
    );
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
    accumulate_product::<F, N>(
        &dp, &tiles.k, tile_row, hs, kv_tiles, head_steps, 1u32, dq_acc,
    );
}
