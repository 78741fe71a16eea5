//! The mma forward's key/value loop: what it reads ([`KvInputs`]) and changes ([`KvState`])
//! across the blocks, one block's steps ([`KvBlocks`]: `S = Q K^T`, the softmax on the
//! accumulators, `O += P V`; see the module above), and the block stream's schedule.
use cubecl::prelude::*;

use core::marker::PhantomData;

use crate::config::{MATRIX_TILE, MmaConfig};
use crate::primitives::block_stream::{BlockBody, BlockSpan, Masking, StreamSchedule, Streams};
use crate::primitives::mma::{
    Lane, Pair, TILE_M, TILE_N, a_fragment, accumulate_product, load_b_by_rows, mma_tile_pair,
    zero_accumulators,
};
use crate::primitives::pair_stream::{PairSource, PairStream};
use crate::primitives::score::{ScoreParams, ScoreTensors};

use super::Tiles;
use super::rows::{Rows, query_step, query_tile_step, softmax_row_tile};

/// What the kernel only reads while it streams: the key/value tensors, mask and bias, and this
/// lane's place (`first_row`: its top row inside the (batch, head); `plane_kv_end`: where the
/// keys its plane's rows see end).
#[derive(CubeType)]
pub(super) struct KvInputs<F: Float, M: Int, N: Size> {
    /// K and V.
    pub(super) kv: PairSource<F, N>,
    pub(super) mask: Tensor<M>,
    pub(super) bias: Tensor<F>,
    pub(super) params: ScoreParams,
    pub(super) tensors: ScoreTensors,
    pub(super) plane_kv_end: u32,
    pub(super) first_row: u32,
    pub(super) plane_row: u32,
    pub(super) lane: Lane,
    pub(super) q_frags: Array<Pair<F>>,
}

/// What the key/value blocks change: the tiles, the stream, the softmax rows and O.
#[derive(CubeType)]
pub(super) struct KvState<F: Float, S: PairStream, N: Size> {
    pub(super) tiles: Tiles<F, N>,
    pub(super) stream: S::State<F, N>,
    pub(super) rows: Rows,
}

/// The forward's part of [`stream_blocks`] (see the module doc).
pub(super) struct KvBlocks<F: Float, M: Int, S: PairStream, N: Size> {
    _types: PhantomData<(F, M, S, N)>,
}

#[cube]
impl<F: Float, M: Int, S: PairStream, N: Size> BlockBody for KvBlocks<F, M, S, N> {
    type Inputs = KvInputs<F, M, N>;
    type State = KvState<F, S, N>;
    type Config = MmaConfig;

    fn start(
        inputs: &KvInputs<F, M, N>,
        state: &mut KvState<F, S, N>,
        block: u32,
        tile_row: u32,
        #[comptime] config: MmaConfig,
    ) {
        S::start::<F, N>(
            &mut state.stream,
            &inputs.kv,
            &mut state.tiles.k,
            &mut state.tiles.v,
            block * config.block_kv,
            tile_row,
            comptime!(config.mma_kv_pair()),
        );
    }

    fn finish(
        _inputs: &KvInputs<F, M, N>,
        state: &mut KvState<F, S, N>,
        tile_row: u32,
        started: bool,
        #[comptime] config: MmaConfig,
    ) {
        S::finish::<F, N>(
            &mut state.stream,
            &mut state.tiles.k,
            &mut state.tiles.v,
            tile_row,
            started,
            comptime!(config.mma_kv_pair()),
        );
    }

    fn needs_masked(
        _inputs: &KvInputs<F, M, N>,
        span: &BlockSpan,
        block: u32,
        #[comptime] _config: MmaConfig,
    ) -> bool {
        // (Not asked: the forward's passes are split, `Masking::Split`.)
        block >= span.first_masked
    }

    fn compute(
        inputs: &KvInputs<F, M, N>,
        state: &mut KvState<F, S, N>,
        kv_block: u32,
        kv_row: u32,
        #[comptime] config: MmaConfig,
        #[comptime] masked_pass: bool,
    ) {
        let kv_tiles = comptime!(config.block_kv / TILE_N);
        let val_tiles = comptime!(config.val_dim_tile() / TILE_N);
        let row_tiles = comptime!(config.mma_row_tiles());

        // A straddling block fully masked for this plane's rows (causal) changes nothing: the
        // plane skips it (a plane-uniform branch) and only takes part in the copies and syncs.
        let mut needed = true;
        if comptime!(masked_pass && config.score.causal) {
            needed = kv_block * config.block_kv < inputs.plane_kv_end;
        }
        if needed {
            // S = Q K^T: one 16 x 8 accumulator tile per 8 keys and row tile (row tile t from tile
            // t kv_tiles); each K fragment feeds every row tile.
            let mut s = zero_accumulators(comptime!(row_tiles * kv_tiles));
            let head_steps = comptime!(config.head_dim_tile() / MATRIX_TILE);
            if comptime!(config.mma_q_in_registers() || !config.rolled_steps) {
                #[unroll]
                for kk in 0..head_steps {
                    let a_step = query_step::<F, N>(
                        &inputs.q_frags,
                        &state.tiles.q,
                        inputs.plane_row,
                        kk,
                        config,
                    );
                    score_step::<F, N>(&a_step, &state.tiles.k, kv_row, kk, &mut s, config);
                }
            } else {
                // Q re-read from its tile: nothing in registers is indexed by the k step, so
                // the steps may stay a loop in the source (`MmaConfig::rolled_steps`).
                for kk in 0..head_steps {
                    let a_step = query_tile_step::<F, N>(
                        &state.tiles.q,
                        inputs.plane_row,
                        kk,
                        config,
                    );
                    score_step::<F, N>(&a_step, &state.tiles.k, kv_row, kk, &mut s, config);
                }
            }

            #[unroll]
            for t in 0..row_tiles {
                softmax_row_tile::<F, M>(
                    &mut s,
                    &mut state.rows,
                    &inputs.mask,
                    &inputs.bias,
                    &inputs.params,
                    &inputs.tensors,
                    kv_block * config.block_kv,
                    inputs.first_row + t * TILE_M,
                    inputs.lane,
                    t,
                    config,
                    masked_pass,
                );
            }

            // O += P V: P of score tiles 2kk, 2kk + 1 is the A fragment of k-step kk.
            accumulate_product::<F, N>(
                &s,
                &state.tiles.v,
                kv_row,
                config.mma_val_stride(),
                kv_tiles,
                comptime!(val_tiles / 2),
                row_tiles,
                &mut state.rows.acc,
            );
        }
    }
}

/// `s += Q K^T` over the head dim's k-step `kk`: `a_step` holds the A fragments of every row
/// tile; each K fragment pair (16 keys) feeds every row tile.
#[cube]
fn score_step<F: Float, N: Size>(
    a_step: &Array<Pair<F>>,
    k_tile: &SharedMemory<Vector<F, N>>,
    kv_row: u32,
    kk: u32,
    s: &mut Array<Pair<f32>>,
    #[comptime] config: MmaConfig,
) {
    let kv_pairs = comptime!(config.block_kv / TILE_N / 2);
    let row_tiles = comptime!(config.mma_row_tiles());
    #[unroll]
    for jj in 0..kv_pairs {
        let b = load_b_by_rows::<F, N>(
            k_tile,
            kv_row,
            comptime!(jj * TILE_M),
            config.mma_head_stride(),
            kk,
        );
        #[unroll]
        for t in 0..row_tiles {
            let a = a_fragment::<F>(a_step, t);
            mma_tile_pair::<F>(&a, &b, s, comptime!(t * kv_pairs + jj));
        }
    }
}

/// One stream of key/value blocks, always prefetched: with two buffers into the other one, with
/// one through registers (stored after the block's last read); the masked pass after the
/// unmasked one, or not at all where the planner proved no block needs it; with `early_kv` the
/// kernel starts the first block itself, before it loads the query block.
impl Streams for MmaConfig {
    fn schedule(&self) -> StreamSchedule {
        StreamSchedule {
            rows: self.block_kv,
            buffers: self.kv_buffers,
            prefetch: true,
            masking: if self.never_masked { Masking::Never } else { Masking::Split },
            first_started: self.early_kv,
        }
    }
}
