//! The mma gradient kernels' gradients out through shared memory in 16-byte chunks
//! (`MmaGradientConfig::chunked_output`, [`crate::primitives::chunked_out`]): each plane stages
//! its accumulator rows in its own rows of a tile it is done with, then copies them out.
use cubecl::prelude::*;

use crate::backward::config::MmaGradientConfig;
use crate::config::MATRIX_TILE;
use crate::primitives::chunked_out::{copy_plane_rows, stage_accumulator_rows};
use crate::primitives::mma::{Lane, Pair, TILE_N};
use crate::primitives::score::ScoreParams;

use super::PairTiles;

/// dK (times the scale) and dV through this plane's own rows of the K and V tiles, out in
/// 16-byte chunks ([`crate::primitives::chunked_out`]; `config.chunked_output`, dk's and dv's
/// rows contiguous whole chunks). A plane's products read only its own K and V rows, but the one
/// pass's dQ shares read every plane's K rows: there every plane is done with them first.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn write_dkdv_chunked<F: Float, N: Size>(
    dk: &mut Tensor<F>,
    dv: &mut Tensor<F>,
    tiles: &mut PairTiles<F, N>,
    dk_acc: &Array<Pair<f32>>,
    dv_acc: &Array<Pair<f32>>,
    params: &ScoreParams,
    batch: u32,
    head: u32,
    kv_start: u32,
    plane_row: u32,
    lane: Lane,
    #[comptime] config: MmaGradientConfig,
) {
    let (head_tiles, val_tiles) = comptime!((
        config.head_dim.next_multiple_of(MATRIX_TILE) / TILE_N,
        config.val_dim.next_multiple_of(MATRIX_TILE) / TILE_N,
    ));
    let (head_stride, val_stride) = comptime!((config.mma_head_stride(), config.mma_val_stride()));
    let (dk_factor, dv_factor) = (Pair::<f32>::new(params.scale), Pair::<f32>::new(1.0f32));
    if comptime!(config.atomic_dq) {
        sync_cube();
    }
    stage_accumulator_rows::<F, N>(
        &mut tiles.k, dk_acc, plane_row, lane, dk_factor, head_tiles, head_stride,
    );
    stage_accumulator_rows::<F, N>(
        &mut tiles.v, dv_acc, plane_row, lane, dv_factor, val_tiles, val_stride,
    );
    sync_plane();
    let first_row = kv_start + plane_row;
    // A plane whose rows all lie past seq_kv writes nothing.
    if first_row < params.seq_kv {
        copy_plane_rows::<F, N>(
            dk, &tiles.k, batch, head, first_row, params.seq_kv, plane_row, lane, MATRIX_TILE,
            config.head_dim, head_stride,
        );
        copy_plane_rows::<F, N>(
            dv, &tiles.v, batch, head, first_row, params.seq_kv, plane_row, lane, MATRIX_TILE,
            config.val_dim, val_stride,
        );
    }
}

/// dQ (times the scale) through this plane's own rows of the Q tile, which no other plane reads,
/// out in 16-byte chunks (`config.chunked_output`, dq's rows contiguous whole chunks).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn write_dq_chunked<F: Float, N: Size>(
    dq: &mut Tensor<F>,
    q_tile: &mut SharedMemory<Vector<F, N>>,
    dq_acc: &Array<Pair<f32>>,
    params: &ScoreParams,
    batch: u32,
    head: u32,
    q_start: u32,
    plane_row: u32,
    lane: Lane,
    #[comptime] config: MmaGradientConfig,
) {
    let head_tiles = comptime!(config.head_dim.next_multiple_of(MATRIX_TILE) / TILE_N);
    let stride = comptime!(config.mma_head_stride());
    let factor = Pair::<f32>::new(params.scale);
    stage_accumulator_rows::<F, N>(q_tile, dq_acc, plane_row, lane, factor, head_tiles, stride);
    sync_plane();
    let first_row = q_start + plane_row;
    // A plane whose rows all lie past seq_q writes nothing.
    if first_row < params.seq_q {
        copy_plane_rows::<F, N>(
            dq, q_tile, batch, head, first_row, params.seq_q, plane_row, lane, MATRIX_TILE,
            config.head_dim, stride,
        );
    }
}
