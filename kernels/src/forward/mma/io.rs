//! The mma forward's global-memory traffic: the next key/value block fetched into registers
//! (16-byte loads) while the current one computes, then stored to the shared tiles; the
//! normalized O rows and the log-sum-exp written at the end.
use cubecl::prelude::*;

use crate::config::{FlashConfig, MMA_CHUNK};
use crate::primitives::chunk_io::{ChunkView, fetch_rows, store_rows};
use crate::primitives::mma::{Lane, Pair, store_accumulator_row};
use crate::primitives::online_softmax::OnlineSoftmax;

use super::Tiles;

/// The next key/value block, in flight from global memory to shared memory.
#[derive(CubeType)]
pub(super) struct Staged<F: Float, N: Size> {
    pub k: Array<Vector<F, N>>,
    pub v: Array<Vector<F, N>>,
}

/// Fetches the K and V rows of block `kv_block` into `staged`.
#[cube]
pub(super) fn stage_block<F: Float, N: Size>(
    k: &Tensor<Vector<F, N>>,
    v: &Tensor<Vector<F, N>>,
    k_view: &ChunkView,
    v_view: &ChunkView,
    staged: &mut Staged<F, N>,
    kv_block: u32,
    #[comptime] config: FlashConfig,
) {
    let units = comptime!(config.units());
    let first = kv_block * config.block_kv;
    let (head_chunks, val_chunks) = comptime!((
        config.head_dim_tile() / MMA_CHUNK,
        config.val_dim_tile() / MMA_CHUNK
    ));
    fetch_rows::<F, N>(
        k,
        k_view,
        &mut staged.k,
        first,
        config.block_kv,
        comptime!(config.head_dim / MMA_CHUNK),
        head_chunks,
        units,
    );
    fetch_rows::<F, N>(
        v,
        v_view,
        &mut staged.v,
        first,
        config.block_kv,
        comptime!(config.val_dim / MMA_CHUNK),
        val_chunks,
        units,
    );
}

/// Stores the staged K and V block into the shared tiles, from row `first_row` on (the
/// buffer it goes to).
#[cube]
pub(super) fn store_block<F: Float, N: Size>(
    staged: &Staged<F, N>,
    tiles: &mut Tiles<F, N>,
    first_row: u32,
    #[comptime] config: FlashConfig,
) {
    let units = comptime!(config.units());
    store_rows::<F, N>(
        &staged.k,
        &mut tiles.k,
        first_row,
        config.block_kv,
        comptime!(config.head_dim_tile() / MMA_CHUNK),
        config.mma_head_stride(),
        units,
    );
    store_rows::<F, N>(
        &staged.v,
        &mut tiles.v,
        first_row,
        config.block_kv,
        comptime!(config.val_dim_tile() / MMA_CHUNK),
        config.mma_val_stride(),
        units,
    );
}

/// Normalizes and writes row `row` (`half` 0: accumulator rows `group`, 1: `group + 8`, of
/// the row tile whose O accumulators start at tile `first_tile`) of O,
/// and its log-sum-exp from the first lane of the row group.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn write_row<F: Float>(
    o: &mut Tensor<F>,
    lse: &mut Tensor<f32>,
    acc: &Array<Pair<f32>>,
    softmax: &OnlineSoftmax,
    batch: u32,
    head: u32,
    row: u32,
    lane: Lane,
    #[comptime] first_tile: u32,
    #[comptime] half: u32,
    seq_q: u32,
    #[comptime] config: FlashConfig,
) {
    if row < seq_q {
        let base = batch as usize * o.stride(0) + head as usize * o.stride(1);
        let normalizer = softmax.normalizer();
        store_accumulator_row::<F>(
            o,
            acc,
            base,
            row,
            lane,
            normalizer,
            first_tile,
            half,
            config.val_dim,
        );
        if lane.quad == 0 {
            let at = batch as usize * lse.stride(0)
                + head as usize * lse.stride(1)
                + row as usize * lse.stride(2);
            lse[at] = softmax.lse(false);
        }
    }
}
