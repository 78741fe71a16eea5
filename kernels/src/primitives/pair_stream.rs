//! How the next block of a streamed pair (K and V) reaches its shared tiles while the current
//! one computes, with two buffers and one cube-wide wait per block:
//! - [`Staged`]: 16-byte global loads into registers, stored into the other buffer after the
//!   block computed, then `sync_cube` (every device);
//! - [`AsyncCopy`]: `cp.async` copies straight into the other buffer, completed by an mbarrier
//!   the whole cube arrives on (CUDA, `features.copy_async`): no staging registers and no
//!   shared-memory stores in the instruction stream.
//!
//! Protocol of one block: [`PairStream::start`] the next block (into the buffer that the cube
//! finished reading before the previous wait), compute on the current one, then
//! [`PairStream::finish`]: after it, the next block is visible to every unit and every unit is
//! done with the current one.
use cubecl::prelude::barrier::{Barrier, copy_async_checked};
use cubecl::prelude::*;

use super::chunk_io::{ChunkView, PairShape, StagedPair, fetch_pair, staged_pair, store_pair};
use super::chunk_io::{CHUNK as MMA_CHUNK, tile_chunks, tile_stride};

/// The two chunked tensors a stream reads, with their views for this cube's (batch, head).
#[derive(CubeType)]
pub struct PairSource<F: Float, N: Size> {
    pub first: Tensor<Vector<F, N>>,
    pub first_view: ChunkView,
    pub second: Tensor<Vector<F, N>>,
    pub second_view: ChunkView,
}

/// Per-cube state of a stream and its two steps (see the module doc).
#[cube]
pub trait PairStream: Send + Sync + 'static {
    type State<F: Float, N: Size>: CubeType;

    fn init<F: Float, N: Size>(#[comptime] shape: PairShape) -> Self::State<F, N>;

    /// Starts loading rows `[first_row, first_row + shape.rows)` of both tensors, for tile rows
    /// `[tile_row, tile_row + shape.rows)` of the two tiles.
    fn start<F: Float, N: Size>(
        state: &mut Self::State<F, N>,
        source: &PairSource<F, N>,
        first_tile: &mut SharedMemory<Vector<F, N>>,
        second_tile: &mut SharedMemory<Vector<F, N>>,
        first_row: u32,
        tile_row: u32,
        #[comptime] shape: PairShape,
    );

    /// Completes what `start` began (if `started`) at the same tile row, and waits for the
    /// whole cube.
    fn finish<F: Float, N: Size>(
        state: &mut Self::State<F, N>,
        first_tile: &mut SharedMemory<Vector<F, N>>,
        second_tile: &mut SharedMemory<Vector<F, N>>,
        tile_row: u32,
        started: bool,
        #[comptime] shape: PairShape,
    );
}

/// Through registers (see the module doc).
pub struct Staged;

/// Through `cp.async` and an mbarrier (see the module doc).
pub struct AsyncCopy;

#[cube]
impl PairStream for Staged {
    type State<F: Float, N: Size> = StagedPair<F, N>;

    fn init<F: Float, N: Size>(#[comptime] shape: PairShape) -> StagedPair<F, N> {
        staged_pair::<F, N>(shape)
    }

    fn start<F: Float, N: Size>(
        state: &mut StagedPair<F, N>,
        source: &PairSource<F, N>,
        _first_tile: &mut SharedMemory<Vector<F, N>>,
        _second_tile: &mut SharedMemory<Vector<F, N>>,
        first_row: u32,
        _tile_row: u32,
        #[comptime] shape: PairShape,
    ) {
        fetch_pair::<F, N>(
            &source.first,
            &source.first_view,
            &source.second,
            &source.second_view,
            state,
            first_row,
            shape,
        );
    }

    fn finish<F: Float, N: Size>(
        state: &mut StagedPair<F, N>,
        first_tile: &mut SharedMemory<Vector<F, N>>,
        second_tile: &mut SharedMemory<Vector<F, N>>,
        tile_row: u32,
        started: bool,
        #[comptime] shape: PairShape,
    ) {
        if started {
            store_pair::<F, N>(state, first_tile, second_tile, tile_row, shape);
        }
        sync_cube();
    }
}

#[cube]
impl PairStream for AsyncCopy {
    type State<F: Float, N: Size> = Shared<Barrier>;

    fn init<F: Float, N: Size>(#[comptime] _shape: PairShape) -> Shared<Barrier> {
        let barrier = Barrier::shared(CUBE_DIM, UNIT_POS == 0);
        // Every unit sees the initialized barrier before arriving on it.
        sync_cube();
        barrier
    }

    fn start<F: Float, N: Size>(
        _state: &mut Shared<Barrier>,
        source: &PairSource<F, N>,
        first_tile: &mut SharedMemory<Vector<F, N>>,
        second_tile: &mut SharedMemory<Vector<F, N>>,
        first_row: u32,
        tile_row: u32,
        #[comptime] shape: PairShape,
    ) {
        copy_rows_async::<F, N>(
            &source.first,
            &source.first_view,
            first_tile,
            first_row,
            tile_row,
            shape.rows,
            shape.first_dim,
            shape.units,
        );
        copy_rows_async::<F, N>(
            &source.second,
            &source.second_view,
            second_tile,
            first_row,
            tile_row,
            shape.rows,
            shape.second_dim,
            shape.units,
        );
    }

    fn finish<F: Float, N: Size>(
        state: &mut Shared<Barrier>,
        _first_tile: &mut SharedMemory<Vector<F, N>>,
        _second_tile: &mut SharedMemory<Vector<F, N>>,
        _tile_row: u32,
        _started: bool,
        #[comptime] _shape: PairShape,
    ) {
        // The barrier's phase completes once every unit arrived and every copy it started
        // landed (copies with nothing started complete at once).
        state.commit_copy_async();
        state.arrive_and_wait();
    }
}

/// `cp.async` of rows `[first_row, first_row + rows)` of a chunked tensor (`dim` columns) into
/// tile rows `[tile_row, ..)` of a padded tile: chunk `UNIT_POS + i * units` of the block per
/// unit, as [`super::chunk_io::fetch_rows`] splits it. Rows past the tensor and the padding to
/// the mma tile are zero-filled (a copy of 0 source bytes).
///
/// Where the units cover whole rows per step (`units` a multiple of the chunks per row: head dims
/// 16, 32, 64, 128 with 4 or 8 planes), a unit keeps its chunk column for every step: its addresses
/// are computed once per block and advanced by one row stride per step, the tile's by a constant
/// (offsets the compiler folds into the copies).
#[cube]
#[allow(clippy::too_many_arguments)]
fn copy_rows_async<F: Float, N: Size>(
    tensor: &Tensor<Vector<F, N>>,
    view: &ChunkView,
    tile: &mut SharedMemory<Vector<F, N>>,
    first_row: u32,
    tile_row: u32,
    #[comptime] rows: u32,
    #[comptime] dim: u32,
    #[comptime] units: u32,
) {
    let chunks = comptime!(tile_chunks(dim));
    let stride = comptime!(tile_stride(dim));
    let cols = comptime!(dim / MMA_CHUNK);
    let total = comptime!(rows * chunks);
    if comptime!(units.is_multiple_of(chunks)) {
        let rows_per_step = comptime!(units / chunks);
        let unit_row = UNIT_POS / chunks;
        let chunk = UNIT_POS % chunks;
        let in_cols = chunk < cols;
        let first = first_row + unit_row;
        let at = view.base + first as usize * view.row_stride + chunk as usize;
        let step = view.row_stride * rows_per_step as usize;
        let to = (tile_row + unit_row) * stride + chunk;
        #[unroll]
        for i in 0..comptime!(rows.div_ceil(rows_per_step)) {
            // Every unit has a row at every step but (when `rows_per_step` does not divide
            // `rows`) the last.
            if comptime!((i + 1) * rows_per_step <= rows) || unit_row + i * rows_per_step < rows {
                let from = at + i as usize * step;
                let len = select(first + i * rows_per_step < view.rows && in_cols, 1usize, 0usize);
                let into = (to + comptime!(i * rows_per_step * stride)) as usize;
                copy_async_checked(
                    &tensor.slice(from, from + len),
                    &mut tile.slice_mut(into, into + 1),
                    MMA_CHUNK,
                );
            }
        }
    } else {
        #[unroll]
        for i in 0..comptime!(total.div_ceil(units)) {
            let index = UNIT_POS + i * units;
            if index < total {
                let row = index / chunks;
                let chunk = index % chunks;
                let global_row = first_row + row;
                let at = view.base + global_row as usize * view.row_stride + chunk as usize;
                let len = select(global_row < view.rows && chunk < cols, 1usize, 0usize);
                let to = ((tile_row + row) * stride + chunk) as usize;
                copy_async_checked(
                    &tensor.slice(at, at + len),
                    &mut tile.slice_mut(to, to + 1),
                    MMA_CHUNK,
                );
            }
        }
    }
}
