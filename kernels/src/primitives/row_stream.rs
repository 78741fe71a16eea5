//! How the matrix kernels stream the rows of two tensors (K and V, or Q and dO) block by block
//! into one shared tile each, with the next block's loads in flight while the current one
//! computes (`prefetch`): each unit fetches its 16-byte vectors of block `b + 1` into registers
//! right after block `b` is in shared memory, and stores them once every unit is done with
//! block `b`. One buffer per tile (the matrix kernels' tiles fill what an MI300X's 64 KiB
//! hold), so the price is registers ([`crate::plan::MATRIX_PREFETCH_REGISTERS`]). Off by
//! default ([`crate::plan::MATRIX_PREFETCH`]: measured slower on an H100): each block is then
//! loaded when it is needed, one tensor at a time (all of a unit's loads of one tile in flight
//! together, then its stores).
//!
//! Protocol of block `b` of `span` (the caller's loop, every unit of the cube):
//! ```text
//!   stream_block(b)   b's rows -> tiles (fetched now where not ahead)
//!   sync_cube()
//!   stream_ahead(b)   b + 1's loads issued (with prefetch, where b + 1 < span.end)
//!   ... compute on the tiles ...
//!   sync_cube()       (every unit is done with b's tiles)
//! ```
//! Without vectors (`N` = 1: WGPU, strided views, the scalar stand-in) nothing is held in
//! registers: `stream_block` reads the rows element-wise ([`super::tile_io::load_tile`]).
use cubecl::prelude::*;

use super::block_stream::BlockSpan;
use super::tile_io::{HeadView, commit_rows, fetch_rows_ahead, head_view, rows_in_flight};

/// Columns of one streamed tensor and its tile: `cols` of data (exact), `dim_tile` of them in
/// the tile (padded with zeros), `stride` elements per tile row.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct RowCols {
    pub cols: u32,
    pub dim_tile: u32,
    pub stride: u32,
}

impl RowCols {
    pub fn new(cols: u32, dim_tile: u32, stride: u32) -> Self {
        RowCols { cols, dim_tile, stride }
    }
}

/// The shape of a [`RowStream`]: blocks of `rows` rows of two tensors over `units` units,
/// stored as vectors where `whole` (the tiles have the tensors' type), fetched one block ahead
/// with `prefetch`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct RowStreamShape {
    pub rows: u32,
    pub first: RowCols,
    pub second: RowCols,
    pub units: u32,
    pub whole: bool,
    pub prefetch: bool,
}

/// The two tensors a stream reads, with their views for this cube's (batch, head).
#[derive(CubeType)]
pub struct RowSource<E: Float, N: Size> {
    pub first: Tensor<Vector<E, N>>,
    pub first_view: HeadView,
    pub second: Tensor<Vector<E, N>>,
    pub second_view: HeadView,
}

/// The source of two tensors' rows of `(batch, head)`.
#[cube]
pub fn row_source<E: Float, N: Size>(
    first: &Tensor<Vector<E, N>>,
    second: &Tensor<Vector<E, N>>,
    batch: u32,
    head: u32,
) -> RowSource<E, N> {
    RowSource::<E, N> {
        first: *first,
        first_view: head_view(first, batch, head),
        second: *second,
        second_view: head_view(second, batch, head),
    }
}

/// One block of both tensors in registers ([`rows_in_flight`]).
#[derive(CubeType)]
pub struct RowStream<E: Float, N: Size> {
    first: Array<Vector<E, N>>,
    second: Array<Vector<E, N>>,
}

/// The registers of a stream of tensors read in vectors like `tensor`'s.
#[cube]
pub fn row_stream<E: Float, N: Size>(
    tensor: &Tensor<Vector<E, N>>,
    #[comptime] shape: RowStreamShape,
) -> RowStream<E, N> {
    let (rows, units) = comptime!((shape.rows, shape.units));
    let (a_tile, b_tile) = comptime!((shape.first.dim_tile, shape.second.dim_tile));
    RowStream::<E, N> {
        first: rows_in_flight::<E, N>(tensor, rows, a_tile, units),
        second: rows_in_flight::<E, N>(tensor, rows, b_tile, units),
    }
}

/// Issues this unit's loads of rows `[first_row, first_row + shape.rows)` of one tensor into
/// its registers.
#[cube]
fn fetch_one<E: Float, N: Size>(
    tensor: &Tensor<Vector<E, N>>,
    view: &HeadView,
    regs: &mut Array<Vector<E, N>>,
    first_row: u32,
    #[comptime] cols: RowCols,
    #[comptime] shape: RowStreamShape,
) {
    let (rows, units) = comptime!((shape.rows, shape.units));
    let (data, dim_tile) = comptime!((cols.cols, cols.dim_tile));
    fetch_rows_ahead::<E, N>(tensor, view, regs, first_row, rows, data, dim_tile, units);
}

/// Stores one tensor's fetched rows into its tile ([`commit_rows`]).
#[cube]
#[allow(clippy::too_many_arguments)]
fn commit_one<E: Float, S: Float, N: Size>(
    tensor: &Tensor<Vector<E, N>>,
    view: &HeadView,
    regs: &Array<Vector<E, N>>,
    tile: &mut SharedMemory<S>,
    first_row: u32,
    #[comptime] cols: RowCols,
    #[comptime] shape: RowStreamShape,
) {
    let (rows, units, whole) = comptime!((shape.rows, shape.units, shape.whole));
    let (data, dim_tile, stride) = comptime!((cols.cols, cols.dim_tile, cols.stride));
    let tile = &mut tile.to_slice_mut();
    commit_rows::<E, S, N>(
        tensor, view, regs, tile, first_row, rows, data, dim_tile, stride, units, whole,
    );
}

/// Issues the loads of rows `[first_row, first_row + shape.rows)` of both tensors.
#[cube]
fn fetch_both<E: Float, N: Size>(
    stream: &mut RowStream<E, N>,
    source: &RowSource<E, N>,
    first_row: u32,
    #[comptime] shape: RowStreamShape,
) {
    let (a, b) = comptime!((shape.first, shape.second));
    let (a_view, b_view) = (&source.first_view, &source.second_view);
    fetch_one::<E, N>(&source.first, a_view, &mut stream.first, first_row, a, shape);
    fetch_one::<E, N>(&source.second, b_view, &mut stream.second, first_row, b, shape);
}

/// Block `block` (rows from `block * shape.rows`) of `span` into the two tiles: with
/// `prefetch`, stored from the registers where [`stream_ahead`] fetched it (the first block is
/// fetched now); without, each tensor fetched and stored in turn, so that only one tensor's
/// block is in registers at a time. No sync: the caller's makes the tiles visible.
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn stream_block<E: Float, S: Float, N: Size>(
    stream: &mut RowStream<E, N>,
    source: &RowSource<E, N>,
    first_tile: &mut SharedMemory<S>,
    second_tile: &mut SharedMemory<S>,
    block: u32,
    span: &BlockSpan,
    #[comptime] shape: RowStreamShape,
) {
    let first_row = block * shape.rows;
    let (a, b) = comptime!((shape.first, shape.second));
    let (a_view, b_view) = (&source.first_view, &source.second_view);
    if comptime!(shape.prefetch) {
        if block == span.start {
            fetch_both::<E, N>(stream, source, first_row, shape);
        }
    } else {
        fetch_one::<E, N>(&source.first, a_view, &mut stream.first, first_row, a, shape);
    }
    commit_one::<E, S, N>(&source.first, a_view, &stream.first, first_tile, first_row, a, shape);
    if comptime!(!shape.prefetch) {
        fetch_one::<E, N>(&source.second, b_view, &mut stream.second, first_row, b, shape);
    }
    commit_one::<E, S, N>(&source.second, b_view, &stream.second, second_tile, first_row, b, shape);
}

/// With `prefetch`, issues the loads of the block after `block` where `span` has one; they
/// stay in flight while the caller computes on `block`. Call after the sync that follows
/// [`stream_block`] (the registers it stored from are free then).
#[cube]
pub fn stream_ahead<E: Float, N: Size>(
    stream: &mut RowStream<E, N>,
    source: &RowSource<E, N>,
    block: u32,
    span: &BlockSpan,
    #[comptime] shape: RowStreamShape,
) {
    // A comptime branch around a run-time one (cubecl cannot join the two conditions).
    if comptime!(shape.prefetch) {
        let next = block + 1;
        if next < span.end {
            fetch_both::<E, N>(stream, source, next * shape.rows, shape);
        }
    }
}
