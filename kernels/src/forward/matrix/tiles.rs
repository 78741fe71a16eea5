//! The matrix forward's shared-memory tiles and the plane-level steps on them: the tiles'
//! allocation, `S = Q K^T` into shared memory, O's rescale through the staging tile, `O += P V`
//! in the fragments, and O's staging (see the module above for the whole block's order).
use cubecl::prelude::*;

use crate::config::{CMMA_ALIGN, MATRIX_TILE, MatrixConfig};
use crate::primitives::row_reduce::sync_units;
use crate::primitives::row_stream::{RowStream, row_stream};
use crate::primitives::tile_io::{HeadView, load_rows};
use crate::primitives::tile_mma::{TileLayout, TileMma, zero_tiles};

use super::super::unit_rows::UnitRole;

/// Shared-memory tiles of one cube (`T`: the tiles' type), the plane's O fragments and the
/// next key/value block on its way (`F` in vectors of `N`).
#[derive(CubeType)]
pub(crate) struct Tiles<F: Float, T: Float, Mm: TileMma, N: Size> {
    /// `[block_q, head_stride]` in T, loaded once, zero-padded.
    pub(super) q: SharedMemory<T>,
    /// `[block_kv, head_stride]` in T, one key block, zero-padded.
    pub(super) k: SharedMemory<T>,
    /// `[block_kv, val_stride]` in T, one value block, zero-padded.
    pub(super) v: SharedMemory<T>,
    /// `[block_q, score_stride]` f32: raw `q · k` of the current block. Without plane shuffles
    /// `s[MatrixConfig::rescale_flag]` is the cube's rescale flag for the block once the logits
    /// are read (see `MatrixStep::attend`).
    pub(super) s: SharedMemory<f32>,
    /// `[block_q, prob_stride]` in T: the probabilities, A operand of `P V`.
    pub(super) p: SharedMemory<T>,
    /// `[block_q, out_stride]` f32: where O's fragments pass through when a row's running
    /// max moves (the rescale) and at the end; with `MatrixConfig::shared_stage` the `s` tile.
    pub(super) o_stage: SharedMemory<f32>,
    /// One f32 per unit: partial row maxima.
    pub(super) partial_max: SharedMemory<f32>,
    /// One f32 per unit: partial row sums.
    pub(super) partial_sum: SharedMemory<f32>,
    /// This plane's rows of O, `row_tiles` rows of `val_dim_tile / 16` accumulator tiles
    /// (tile (r, n) at `r val_dim_tile / 16 + n`), unnormalized (kept against the rows' running
    /// maxima), across every key/value block.
    pub(super) o: Sequence<Mm::Acc>,
    /// K and V rows on their way to `k` and `v`: with `MatrixConfig::prefetch`, the next
    /// block's, in flight while this one computes.
    pub(super) kv: RowStream<F, N>,
}

/// The cube's tiles with its block of Q loaded (in T, zero-padded to the tiles' head dim) and
/// this plane's O fragments zeroed.
#[cube]
pub(super) fn query_tiles<F: Float, T: Float, Mm: TileMma, N: Size>(
    q: &Tensor<Vector<F, N>>,
    q_view: &HeadView,
    q_start: u32,
    #[comptime] config: MatrixConfig,
) -> Tiles<F, T, Mm, N> {
    let units = comptime!(config.units());
    let dk = comptime!(config.head_dim_tile());
    // Lengths in elements: Q, K, V, S (with the flag's word), P, O's staging.
    let (bq, bkv, dk_stride, dv_stride) = comptime!((
        config.block_q as usize,
        config.block_kv as usize,
        config.head_stride() as usize,
        config.val_stride() as usize,
    ));
    let (s_len, p_len, o_len) = comptime!((
        config.score_tile_len() as usize,
        bq * config.prob_stride() as usize,
        bq * config.out_stride() as usize,
    ));
    let q_tile = SharedMemory::new_aligned(comptime!(bq * dk_stride), CMMA_ALIGN);
    let k = SharedMemory::new_aligned(comptime!(bkv * dk_stride), CMMA_ALIGN);
    let v = SharedMemory::new_aligned(comptime!(bkv * dv_stride), CMMA_ALIGN);
    let s = SharedMemory::new_aligned(s_len, CMMA_ALIGN);
    let p = SharedMemory::new_aligned(p_len, CMMA_ALIGN);
    // With `shared_stage` O's staging is S's tile (the same allocation), else its own.
    let o_stage = if comptime!(config.shared_stage) {
        s
    } else {
        SharedMemory::new_aligned(o_len, CMMA_ALIGN)
    };
    let mut tiles = Tiles::<F, T, Mm, N> {
        q: q_tile,
        k,
        v,
        s,
        p,
        o_stage,
        partial_max: SharedMemory::new(comptime!(config.partials() as usize)),
        partial_sum: SharedMemory::new(comptime!(config.partials() as usize)),
        o: zero_tiles::<Mm>(
            comptime!(config.row_tiles * config.val_dim_tile() / MATRIX_TILE),
            config.plane_size,
        ),
        kv: row_stream::<F, N>(q, comptime!(config.kv_stream())),
    };
    let tile = &mut tiles.q.to_slice_mut();
    let (dim, block_q, whole) = comptime!((config.head_dim, config.block_q, !config.f32_tiles));
    let stride = comptime!(config.head_stride());
    load_rows::<F, T, N>(q, q_view, tile, q_start, block_q, dim, dk, stride, units, whole);
    tiles
}

/// `S = Q K^T` for this plane's rows (from `plane_row`), stored into its rows of `s` in f32:
/// `row_tiles` rows of `block_kv / 16` accumulator tiles, and per 16 columns of the head the
/// plane's Q fragments loaded once for all of them, each K fragment once for all its row tiles.
/// K is row-major `[block_kv, dk]`, i.e. K^T column-major: tile (kk, n) at `n 16 dk_stride + 16
/// kk`.
#[cube]
pub(super) fn plane_scores<F: Float, T: Float, Mm: TileMma, N: Size>(
    tiles: &mut Tiles<F, T, Mm, N>,
    plane_row: u32,
    #[comptime] config: MatrixConfig,
) {
    let dk = comptime!(config.head_dim_tile());
    let dk_stride = comptime!(config.head_stride());
    let score_stride = comptime!(config.score_stride());
    let (row_tiles, cols) = comptime!((config.row_tiles, config.block_kv / MATRIX_TILE));
    let mut s_acc = zero_tiles::<Mm>(comptime!(row_tiles * cols), config.plane_size);
    // (The stand-in's loops stay loops: lavapipe's LLVM takes minutes over unrolled copies.)
    #[unroll(!config.stand_in)]
    for kk in 0..comptime!(dk / MATRIX_TILE) {
        let q_at = (plane_row * dk_stride + kk * MATRIX_TILE) as usize;
        Mm::execute_rows::<T>(
            &mut s_acc,
            row_tiles,
            cols,
            &tiles.q.slice(q_at, tiles.q.len()),
            TileLayout::RowMajor,
            dk_stride,
            comptime!(MATRIX_TILE * dk_stride),
            &tiles.k.slice((kk * MATRIX_TILE) as usize, tiles.k.len()),
            TileLayout::ColMajor,
            dk_stride,
            comptime!(MATRIX_TILE * dk_stride),
            config.plane_size,
        );
    }
    #[unroll]
    for r in 0..row_tiles {
        #[unroll]
        for n in 0..cols {
            let len = tiles.s.len();
            let at = (plane_row + r * MATRIX_TILE) * score_stride + n * MATRIX_TILE;
            Mm::store(
                s_acc.index((r * cols + n) as usize),
                &mut tiles.s.slice_mut(at as usize, len),
                score_stride,
                config.plane_size,
            );
        }
    }
}

/// O = alpha O for this unit's row, through this plane's rows of the staging tile (O stays in
/// the plane's fragments, which only a round trip through shared memory can scale row by row).
/// With `plane_sync` only this plane calls it, else every plane of the cube.
#[cube]
pub(super) fn rescale_o<F: Float, T: Float, Mm: TileMma, N: Size>(
    tiles: &mut Tiles<F, T, Mm, N>,
    role: UnitRole,
    plane_row: u32,
    alpha: f32,
    #[comptime] config: MatrixConfig,
) {
    let lanes = comptime!(config.units_per_row());
    let out_stride = comptime!(config.out_stride());
    stage_o::<F, T, Mm, N>(tiles, plane_row, config.plane_sync, config);
    let at = (role.row * out_stride + role.lane) as usize;
    #[unroll]
    for c in 0..config.out_cols_per_unit() {
        let e = at + (c * lanes) as usize;
        tiles.o_stage[e] = tiles.o_stage[e] * alpha;
    }
    sync_units(config.plane_sync);
    let cols = comptime!(config.val_dim_tile() / MATRIX_TILE);
    #[unroll]
    for r in 0..config.row_tiles {
        #[unroll]
        for n in 0..cols {
            let from = ((plane_row + r * MATRIX_TILE) * out_stride + n * MATRIX_TILE) as usize;
            let len = tiles.o_stage.len();
            Mm::load(
                tiles.o.index_mut((r * cols + n) as usize),
                &tiles.o_stage.slice(from, len),
                out_stride,
                config.plane_size,
            );
        }
    }
}

/// `O += P V` for this plane's rows, in its fragments: per 16 keys, the plane's P fragments
/// loaded once for all of O's tiles, each V fragment once for all its row tiles.
#[cube]
pub(super) fn accumulate_pv<F: Float, T: Float, Mm: TileMma, N: Size>(
    tiles: &mut Tiles<F, T, Mm, N>,
    plane_row: u32,
    #[comptime] config: MatrixConfig,
) {
    let (prob_stride, dv_stride) = comptime!((config.prob_stride(), config.val_stride()));
    let dv = comptime!(config.val_dim_tile());
    #[unroll(!config.stand_in)]
    for kk in 0..comptime!(config.block_kv / MATRIX_TILE) {
        let p_at = (plane_row * prob_stride + kk * MATRIX_TILE) as usize;
        Mm::execute_rows::<T>(
            &mut tiles.o,
            config.row_tiles,
            comptime!(dv / MATRIX_TILE),
            &tiles.p.slice(p_at, tiles.p.len()),
            TileLayout::RowMajor,
            prob_stride,
            comptime!(MATRIX_TILE * prob_stride),
            &tiles.v.slice((kk * MATRIX_TILE * dv_stride) as usize, tiles.v.len()),
            TileLayout::RowMajor,
            dv_stride,
            MATRIX_TILE,
            config.plane_size,
        );
    }
}

/// Stores this plane's O fragments into its rows of the staging tile and synchronizes the
/// plane (`plane`), or the cube (every plane of it must call it then).
#[cube]
pub(super) fn stage_o<F: Float, T: Float, Mm: TileMma, N: Size>(
    tiles: &mut Tiles<F, T, Mm, N>,
    plane_row: u32,
    #[comptime] plane: bool,
    #[comptime] config: MatrixConfig,
) {
    let out_stride = comptime!(config.out_stride());
    let cols = comptime!(config.val_dim_tile() / MATRIX_TILE);
    #[unroll]
    for r in 0..config.row_tiles {
        #[unroll]
        for n in 0..cols {
            let len = tiles.o_stage.len();
            let at = (plane_row + r * MATRIX_TILE) * out_stride + n * MATRIX_TILE;
            Mm::store(
                tiles.o.index((r * cols + n) as usize),
                &mut tiles.o_stage.slice_mut(at as usize, len),
                out_stride,
                config.plane_size,
            );
        }
    }
    sync_units(plane);
}
