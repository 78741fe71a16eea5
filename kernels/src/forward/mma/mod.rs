//! The mma forward path: FA-2's own recipe on register-level `mma` (see
//! [`crate::primitives::mma`] for the fragment layout).
//!
//! One cube per (query block, batch * head), planes of 32 lanes; plane `w` owns one or two
//! 16-row tiles of the block (16 or 32 rows per plane), lane `l` rows `group = l / 4` and
//! `group + 8` of each tile. Per key/value block:
//! 1. `S = Q K^T` into accumulators (Q's A fragments loaded once, K's B fragments by `ldmatrix`,
//!    each feeding every row tile);
//! 2. logits through [`crate::primitives::score::score`] (raw dots where the scale folds into
//!    the exponential: `fold_scale`, P = 2^(dot scale log2 e - shift), one fma and one
//!    `ex2` per entry), the online softmax of both rows on the accumulators (row maxima
//!    over the four lanes of a row group by `plane_shuffle_xor`; row sums stay per lane until
//!    the end), O rescaled by `alpha` in registers;
//! 3. `O += P V`, P being the cast accumulators of step 1 (never leaving registers), V's B
//!    fragments by transposing `ldmatrix`.
//!
//! After the last block each row is normalized once and written with its log-sum-exp
//! ([`io`]): element by element from the accumulators, or (`config.chunked_output`) through the
//! plane's own rows of the Q tile and out in 16-byte chunks.
//!
//! The next block's K and V are started while this block computes
//! ([`crate::primitives::pair_stream`]): by `cp.async` straight into the other of two buffers
//! (`config.async_kv`, completed by one mbarrier wait per block), or through registers
//! (16-byte loads) stored after the compute, with one buffer between two cube syncs (every
//! plane done reading the block before it is overwritten, and the new one visible) or with
//! two buffers (`config.kv_buffers`) into the other one before a single sync (the block it
//! overwrites was last read before the previous sync).
//!
//! Needs (checked by `plan`): the manual MMA config, plane size 32, head_dim and
//! val_dim multiples of 8 up to 128, and (checked by the launcher) q, k, v whose rows are
//! contiguous 16-byte chunks. Control flow is uniform across the cube.
use cubecl::prelude::*;

use crate::config::MmaConfig;
use crate::primitives::block_range::{kv_block_range, query_block_heaviest_first, rows_kv_end};
use crate::primitives::block_stream::stream_blocks;
use crate::primitives::chunk_io::{buffer_row, chunk_tile, chunk_view, copy_rows};
use crate::primitives::mma::{LANES, TILE_N, lane};
use crate::primitives::pair_stream::{AsyncCopy, PairSource, PairStream, Staged};
use crate::primitives::score::{ScoreParams, ScoreParamsLaunch, score_tensors};

use super::ForwardArgs;
use blocks::{KvBlocks, KvInputs, KvState};
use io::{write_rows, write_rows_chunked};
use rows::{Rows, query_fragments};

mod blocks;
mod io;
mod rows;

/// Launches the mma kernel. The caller has validated the problem, checked the device and
/// that q, k, v load in chunks of `chunk` elements.
pub(crate) fn launch<R: Runtime, F: Float, M: Int>(
    client: &ComputeClient<R>,
    args: ForwardArgs<R>,
    params: ScoreParamsLaunch<R>,
    config: MmaConfig,
    cube_count: CubeCount,
    chunk: usize,
) {
    let cube_dim = CubeDim::new_2d(LANES, config.num_planes());
    // SAFETY: shapes and strides were validated against the problem and the chunking; global
    // reads are bounds-checked per row, writes against seq_q / val_dim.
    unsafe {
        if config.async_kv {
            flash_attention_forward_mma_kernel::launch_unchecked::<F, M, AsyncCopy, R>(
                client,
                cube_count,
                cube_dim,
                chunk,
                args.q,
                args.k,
                args.v,
                args.mask,
                args.bias,
                args.slopes,
                args.o,
                args.lse,
                params,
                config,
            )
        } else {
            flash_attention_forward_mma_kernel::launch_unchecked::<F, M, Staged, R>(
                client,
                cube_count,
                cube_dim,
                chunk,
                args.q,
                args.k,
                args.v,
                args.mask,
                args.bias,
                args.slopes,
                args.o,
                args.lse,
                params,
                config,
            )
        }
    }
}

/// Shared-memory tiles of one cube, in chunks, rows padded by one chunk.
#[derive(CubeType)]
struct Tiles<F: Float, N: Size> {
    /// `[block_q, head stride]`: read once into Q fragments.
    q: SharedMemory<Vector<F, N>>,
    /// `[kv_buffers * block_kv, head stride]`: one key block per buffer.
    k: SharedMemory<Vector<F, N>>,
    /// `[kv_buffers * block_kv, val stride]`: one value block per buffer.
    v: SharedMemory<Vector<F, N>>,
}

#[cube(launch_unchecked)]
// A comptime condition stays outside the run-time one it guards (`early_kv`): collapsed into one
// `&&`, CubeCL writes the constant into the generated test.
#[allow(clippy::too_many_arguments, clippy::collapsible_if)]
pub fn flash_attention_forward_mma_kernel<F: Float, M: Int, S: PairStream, N: Size>(
    q: &Tensor<Vector<F, N>>,
    k: &Tensor<Vector<F, N>>,
    v: &Tensor<Vector<F, N>>,
    mask: &Tensor<M>,
    bias: &Tensor<F>,
    slopes: &Tensor<f32>,
    o: &mut Tensor<F>,
    lse: &mut Tensor<f32>,
    params: ScoreParams,
    #[comptime] config: MmaConfig,
) {
    let units = comptime!(config.units());
    let row_tiles = comptime!(config.mma_row_tiles());
    let val_tiles = comptime!(config.val_dim_tile() / TILE_N);
    let q_block = query_block_heaviest_first(config.score.causal);
    let heads = q.shape(1) as u32;
    let (batch, head) = (CUBE_POS_Y / heads, CUBE_POS_Y % heads);
    let q_start = q_block * config.block_q();
    let plane_row = UNIT_POS_Y * config.plane_rows;
    let lane = lane();
    let kv_head = head / (heads / k.shape(1) as u32);
    let k_view = chunk_view(k, batch, kv_head);
    let v_view = chunk_view(v, batch, kv_head);
    let tensors = score_tensors(mask, bias, slopes, batch, head, config.score);

    let mut tiles = Tiles::<F, N> {
        q: chunk_tile::<F, N>(config.block_q(), config.mma_head_stride()),
        k: chunk_tile::<F, N>(
            comptime!(config.kv_buffers * config.block_kv),
            config.mma_head_stride(),
        ),
        v: chunk_tile::<F, N>(
            comptime!(config.kv_buffers * config.block_kv),
            config.mma_val_stride(),
        ),
    };
    let kv_pair = comptime!(config.mma_kv_pair());
    let mut stream = S::init::<F, N>(kv_pair);
    let kv = PairSource::<F, N> {
        first: *k,
        first_view: k_view,
        second: *v,
        second_view: v_view,
    };
    // The visible key/value blocks (causal skipping, unmasked pass first).
    let range = kv_block_range(
        q_block,
        &params,
        config.block_q(),
        config.block_kv,
        config.score,
    );
    // With `early_kv` the first of them is started here, its copy in flight while the query
    // block loads (`stream_blocks` then only completes it: `StreamSchedule::first_started`).
    if comptime!(config.early_kv) {
        if range.start < range.end {
            let row = buffer_row(range.start, config.kv_buffers, config.block_kv);
            S::start::<F, N>(
                &mut stream,
                &kv,
                &mut tiles.k,
                &mut tiles.v,
                range.start * config.block_kv,
                row,
                kv_pair,
            );
        }
    }

    // Step 1: the query block into shared memory, then (if they fit) this plane's A
    // fragments, once.
    copy_rows::<F, N>(
        q,
        &chunk_view(q, batch, head),
        &mut tiles.q,
        q_start,
        config.block_q(),
        config.head_dim,
        config.mma_head_stride(),
        units,
    );
    sync_cube();
    let q_frags = query_fragments::<F, N>(&tiles.q, plane_row, config);

    // Step 2: stream the visible key/value blocks.
    let plane_kv_end = rows_kv_end(
        q_start + plane_row,
        config.plane_rows,
        &params,
        config.score,
    );
    let first_row = q_start + plane_row + lane.group;
    let inputs = KvInputs::<F, M, N> {
        kv,
        mask: *mask,
        bias: *bias,
        params,
        tensors,
        plane_kv_end,
        first_row,
        plane_row,
        lane,
        q_frags,
    };
    let mut state = KvState::<F, S, N> {
        tiles,
        stream,
        rows: Rows::new(row_tiles, val_tiles),
    };
    stream_blocks::<KvBlocks<F, M, S, N>>(&inputs, &mut state, range, config);

    // Step 3: normalize once, write O and the log-sum-exp.
    if comptime!(config.mma_chunked_output()) {
        write_rows_chunked::<F, N>(
            o,
            lse,
            &mut state.tiles.q,
            &state.rows,
            &params,
            batch,
            head,
            first_row,
            plane_row,
            lane,
            config,
        );
    } else {
        write_rows::<F>(o, lse, &state.rows, &params, batch, head, first_row, lane, config);
    }
}
