//! The mma dK/dV kernel (see the parent module); with [`MmaGradientConfig::atomic_dq`] it is
//! the one-pass kernel, which also adds each block pair's dQ share ([`super::dq_share`]).
use cubecl::prelude::*;

use core::marker::PhantomData;

use crate::config::MATRIX_TILE;
use crate::primitives::block_range::{causal_end, pair_needs_masked_pass, query_block_span};
use crate::primitives::block_stream::{BlockBody, BlockSpan, stream_blocks};
use crate::primitives::chunk_io::{chunk_view, copy_rows};
use crate::primitives::mma::{Lane, Pair, TILE_N, lane, zero_accumulators};
use crate::primitives::pair_stream::{PairSource, PairStream};
use crate::primitives::score::{ScoreParams, ScoreTensors, score_tensors};
use crate::primitives::tile_io::{StatView, stat_view};

use super::dkdv_block::accumulate_dkdv;
use super::dq_share::{add_dq_share, ds_buffer_row, store_ds_rows};
use super::query_stats::{QueryStats, fetch_stats, store_stats};
use super::chunked_grads::write_dkdv_chunked;
use super::{PairTiles, pair_tiles, write_rows};
use crate::backward::config::MmaGradientConfig;
use crate::backward::dq_sink::DqSink;

/// The dK/dV kernel of one key/value block (`CUBE_POS_X`) of one (batch, head) (`CUBE_POS_Y`),
/// launched by the module `dkdv_launch` beside this one.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn dkdv_mma_kernel<F: Float, M: Int, S: PairStream, D: DqSink, N: Size>(
    q: &Tensor<Vector<F, N>>,
    k: &Tensor<Vector<F, N>>,
    v: &Tensor<Vector<F, N>>,
    d_out: &Tensor<Vector<F, N>>,
    lse: &Tensor<f32>,
    delta: &Tensor<f32>,
    mask: &Tensor<M>,
    bias: &Tensor<F>,
    slopes: &Tensor<f32>,
    dk: &mut Tensor<F>,
    dv: &mut Tensor<F>,
    dq_acc: &mut Tensor<D::Acc>,
    params: ScoreParams,
    #[comptime] config: MmaGradientConfig,
) {
    let units = comptime!(config.units());
    let heads = q.shape(1) as u32;
    let (batch, head) = (CUBE_POS_Y / heads, CUBE_POS_Y % heads);
    let kv_start = CUBE_POS_X * config.block_kv;
    let plane_row = UNIT_POS_Y * MATRIX_TILE;
    let lane = lane();
    let kv_head = head / (heads / k.shape(1) as u32);
    let tensors = score_tensors(mask, bias, slopes, batch, head, config.score);
    let q_view = chunk_view(q, batch, head);
    let d_out_view = chunk_view(d_out, batch, head);
    // First: a whole number of 16-byte chunks, so every tile after it stays aligned.
    let ds_tile =
        SharedMemory::<Pair<F>>::new_aligned(comptime!(config.ds_tile_pairs() as usize), 16usize);
    let mut tiles = pair_tiles::<F, N>(config);
    let stats_len = comptime!((config.buffers * config.block_q) as usize);
    let lse_tile = SharedMemory::<f32>::new(stats_len);
    let delta_tile = SharedMemory::<f32>::new(stats_len);
    let head_tiles = comptime!(config.head_dim.next_multiple_of(MATRIX_TILE) / TILE_N);
    let val_tiles = comptime!(config.val_dim.next_multiple_of(MATRIX_TILE) / TILE_N);
    let dk_acc = zero_accumulators(head_tiles);
    let dv_acc = zero_accumulators(val_tiles);

    // Step 1: K and V of this block, once; the first query block's sync makes them visible.
    copy_rows::<F, N>(
        k,
        &chunk_view(k, batch, kv_head),
        &mut tiles.k,
        kv_start,
        config.block_kv,
        config.head_dim,
        config.mma_head_stride(),
        units,
    );
    copy_rows::<F, N>(
        v,
        &chunk_view(v, batch, kv_head),
        &mut tiles.v,
        kv_start,
        config.block_kv,
        config.val_dim,
        config.mma_val_stride(),
        units,
    );

    // Step 2: the query blocks that see this block (causal: none above the diagonal), each
    // with its lse and delta (through registers, into the stats tiles beside Q and dO).
    let inputs = QueryInputs::<F, M, N> {
        q_dout: PairSource::<F, N> {
            first: *q,
            first_view: q_view,
            second: *d_out,
            second_view: d_out_view,
        },
        lse: *lse,
        lse_view: stat_view(lse, batch, head),
        delta: *delta,
        delta_view: stat_view(delta, batch, head),
        mask: *mask,
        bias: *bias,
        params,
        tensors,
        batch,
        head,
        kv_start,
        key_row: kv_start + plane_row + lane.group,
        plane_row,
        lane,
    };
    let mut state = QueryState::<F, S, D, N> {
        tiles,
        ds_tile,
        pending: NO_BLOCK,
        dq_acc: *dq_acc,
        lse_tile,
        delta_tile,
        stream: S::init::<F, N>(comptime!(config.mma_inner_pair())),
        stats: QueryStats {
            lse: 0.0f32,
            delta: 0.0f32,
        },
        dk_acc,
        dv_acc,
    };
    let span = query_block_span(
        kv_start,
        &params,
        config.block_q,
        config.block_kv,
        config.score,
    );
    stream_blocks::<QueryBlocks<F, M, S, D, N>>(&inputs, &mut state, span, config);
    if comptime!(config.atomic_dq) {
        // The last block's share: its dS^T is visible to every plane after this sync.
        sync_cube();
        if state.pending != NO_BLOCK {
            add_pending_share::<F, M, S, D, N>(&inputs, &mut state, config);
        }
    }
    let (dk_acc, dv_acc) = (state.dk_acc, state.dv_acc);

    // Step 3: dK = scale * Σ dS^T Q and dV = Σ P^T dO, rows past seq_kv not written.
    if comptime!(config.chunked_output) {
        write_dkdv_chunked::<F, N>(
            dk, dv, &mut state.tiles, &dk_acc, &dv_acc, &params, batch, head, kv_start, plane_row,
            lane, config,
        );
    } else {
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
}

/// What the dK/dV kernel only reads while it streams: the query-side tensors, mask and bias,
/// and this lane's place (`key_row`: its first key row inside the (batch, head)).
#[derive(CubeType)]
struct QueryInputs<F: Float, M: Int, N: Size> {
    /// Q and dO.
    q_dout: PairSource<F, N>,
    lse: Tensor<f32>,
    lse_view: StatView,
    delta: Tensor<f32>,
    delta_view: StatView,
    mask: Tensor<M>,
    bias: Tensor<F>,
    params: ScoreParams,
    tensors: ScoreTensors,
    batch: u32,
    head: u32,
    kv_start: u32,
    key_row: u32,
    plane_row: u32,
    lane: Lane,
}

/// What the query blocks change: the tiles (with the stats tiles and the one-pass dS^T tile),
/// the stream, the next block's stats on their way, dK and dV, and the dQ accumulator.
#[derive(CubeType)]
struct QueryState<F: Float, S: PairStream, D: DqSink, N: Size> {
    tiles: PairTiles<F, N>,
    /// One-pass only: `[2 block_kv][ds_tile_row_pairs]`, dS^T of query block `b` in rows
    /// `[(b % 2) block_kv, + block_kv)`.
    ds_tile: SharedMemory<Pair<F>>,
    /// One-pass only: the query block whose dQ share is still to add ([`NO_BLOCK`]: none).
    pending: u32,
    dq_acc: Tensor<D::Acc>,
    lse_tile: SharedMemory<f32>,
    delta_tile: SharedMemory<f32>,
    stream: S::State<F, N>,
    stats: QueryStats,
    dk_acc: Array<Pair<f32>>,
    dv_acc: Array<Pair<f32>>,
}

/// The dK/dV kernel's part of [`stream_blocks`]: the masked pass where the block pair needs
/// it ([`pair_needs_masked_pass`]).
struct QueryBlocks<F: Float, M: Int, S: PairStream, D: DqSink, N: Size> {
    _types: PhantomData<(F, M, S, D, N)>,
}

#[cube]
impl<F: Float, M: Int, S: PairStream, D: DqSink, N: Size> BlockBody for QueryBlocks<F, M, S, D, N> {
    type Inputs = QueryInputs<F, M, N>;
    type State = QueryState<F, S, D, N>;
    type Config = MmaGradientConfig;

    fn start(
        inputs: &QueryInputs<F, M, N>,
        state: &mut QueryState<F, S, D, N>,
        block: u32,
        tile_row: u32,
        #[comptime] config: MmaGradientConfig,
    ) {
        let q_start = block * config.block_q;
        S::start::<F, N>(
            &mut state.stream,
            &inputs.q_dout,
            &mut state.tiles.q,
            &mut state.tiles.d_out,
            q_start,
            tile_row,
            comptime!(config.mma_inner_pair()),
        );
        let fetched = fetch_stats(
            &inputs.lse,
            &inputs.lse_view,
            &inputs.delta,
            &inputs.delta_view,
            q_start,
            config,
        );
        state.stats.lse = fetched.lse;
        state.stats.delta = fetched.delta;
    }

    fn finish(
        _inputs: &QueryInputs<F, M, N>,
        state: &mut QueryState<F, S, D, N>,
        tile_row: u32,
        started: bool,
        #[comptime] config: MmaGradientConfig,
    ) {
        if started {
            store_stats(
                &mut state.lse_tile,
                &mut state.delta_tile,
                tile_row,
                &state.stats,
                config,
            );
        }
        S::finish::<F, N>(
            &mut state.stream,
            &mut state.tiles.q,
            &mut state.tiles.d_out,
            tile_row,
            started,
            comptime!(config.mma_inner_pair()),
        );
    }

    fn needs_masked(
        inputs: &QueryInputs<F, M, N>,
        _span: &BlockSpan,
        block: u32,
        #[comptime] config: MmaGradientConfig,
    ) -> bool {
        let (block_q, block_kv) = (config.block_q, config.block_kv);
        pair_needs_masked_pass(
            block * block_q,
            inputs.kv_start,
            &inputs.params,
            block_q,
            block_kv,
            config.score,
        )
    }

    fn compute(
        inputs: &QueryInputs<F, M, N>,
        state: &mut QueryState<F, S, D, N>,
        q_block: u32,
        tile_row: u32,
        #[comptime] config: MmaGradientConfig,
        #[comptime] masked_pass: bool,
    ) {
        let q_start = q_block * config.block_q;
        // Causal: a query block that sees none of this plane's 16 keys changes nothing for
        // them (P = dS = 0); the plane skips it (a plane-uniform branch).
        let mut needed = true;
        if comptime!(masked_pass && config.score.causal) {
            let q_last = min(q_start + config.block_q, inputs.params.seq_q) - 1;
            needed = inputs.kv_start + inputs.plane_row < causal_end(q_last, &inputs.params);
        }
        if needed {
            accumulate_dkdv::<F, M, N>(
                &inputs.mask,
                &inputs.bias,
                &inputs.params,
                &inputs.tensors,
                &state.tiles,
                &state.lse_tile,
                &state.delta_tile,
                q_start,
                tile_row,
                inputs.key_row,
                inputs.plane_row,
                inputs.lane,
                &mut state.dk_acc,
                &mut state.dv_acc,
                &mut state.ds_tile,
                config,
                masked_pass,
            );
        }
        if comptime!(config.atomic_dq) {
            // A skipped plane's keys see none of the block: its rows of dS^T are zeros.
            if !needed {
                let zeros = zero_accumulators(comptime!(config.block_q / TILE_N));
                store_ds_rows::<F>(
                    &mut state.ds_tile,
                    &zeros,
                    ds_buffer_row(q_block, config) + inputs.plane_row,
                    inputs.lane,
                    config,
                );
            }
            // The previous block's share: every plane stored its dS^T before the stream's
            // cube-wide wait that ended that block, and the buffer it sits in is next written
            // after the wait that ends this one.
            if state.pending != NO_BLOCK {
                add_pending_share::<F, M, S, D, N>(inputs, state, config);
            }
            state.pending = q_block;
        }
    }
}

/// No pending query block (the one-pass dQ share).
const NO_BLOCK: u32 = u32::MAX;

/// Adds the pending query block's dQ share (see [`add_dq_share`]).
#[cube]
fn add_pending_share<F: Float, M: Int, S: PairStream, D: DqSink, N: Size>(
    inputs: &QueryInputs<F, M, N>,
    state: &mut QueryState<F, S, D, N>,
    #[comptime] config: MmaGradientConfig,
) {
    add_dq_share::<F, D, N>(
        &mut state.dq_acc,
        &state.ds_tile,
        &state.tiles.k,
        ds_buffer_row(state.pending, config),
        inputs.batch,
        inputs.head,
        state.pending * config.block_q,
        inputs.params.seq_q,
        inputs.lane,
        config,
    );
}
