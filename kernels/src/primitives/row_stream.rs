//! How the matrix kernels stream the rows of two tensors (K and V, or Q and dO) block by block
//! into one shared tile each, with the next block's loads in flight while the current one
//! computes (`prefetch`): each unit fetches its 16-byte vectors of block `b + 1` into registers
//! right after block `b` is in shared memory, and stores them once every unit is done with
//! block `b`. One buffer per tile (the matrix kernels' tiles fill what an MI300X's 64 KiB
//! hold), so the price is registers ([`crate::plan::MATRIX_PREFETCH_REGISTERS`]).
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
use super::tile_io::{HeadView, commit_rows, fetch_rows_ahead, rows_in_flight};

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

/// Issues the loads of rows `[first_row, first_row + shape.rows)` of both tensors.
#[cube]
fn fetch<E: Float, N: Size>(
    stream: &mut RowStream<E, N>,
    source: &RowSource<E, N>,
    first_row: u32,
    #[comptime] shape: RowStreamShape,
) {
    let (rows, units) = comptime!((shape.rows, shape.units));
    let (a, b) = comptime!((shape.first, shape.second));
    let (a_cols, a_tile, b_cols, b_tile) = comptime!((a.cols, a.dim_tile, b.cols, b.dim_tile));
    let (a_view, b_view) = (&source.first_view, &source.second_view);
    let (a_regs, b_regs) = (&mut stream.first, &mut stream.second);
    fetch_rows_ahead::<E, N>(&source.first, a_view, a_regs, first_row, rows, a_cols, a_tile, units);
    fetch_rows_ahead::<E, N>(&source.second, b_view, b_regs, first_row, rows, b_cols, b_tile, units);
}

/// Block `block` (rows from `block * shape.rows`) of `span` into the two tiles: stored from
/// the registers where [`stream_ahead`] fetched it, loaded now otherwise (the first block, or
/// every block without `prefetch`). No sync: the caller's makes the tiles visible.
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
    if comptime!(shape.prefetch) {
        if block == span.start {
            fetch::<E, N>(stream, source, first_row, shape);
        }
    } else {
        fetch::<E, N>(stream, source, first_row, shape);
    }
    let (rows, units, whole) = comptime!((shape.rows, shape.units, shape.whole));
    let (a, b) = comptime!((shape.first, shape.second));
    let (a_cols, a_tile, a_stride) = comptime!((a.cols, a.dim_tile, a.stride));
    let (b_cols, b_tile, b_stride) = comptime!((b.cols, b.dim_tile, b.stride));
    commit_rows::<E, S, N>(
        &source.first,
        &source.first_view,
        &stream.first,
        &mut first_tile.to_slice_mut(),
        first_row,
        rows,
        a_cols,
        a_tile,
        a_stride,
        units,
        whole,
    );
    commit_rows::<E, S, N>(
        &source.second,
        &source.second_view,
        &stream.second,
        &mut second_tile.to_slice_mut(),
        first_row,
        rows,
        b_cols,
        b_tile,
        b_stride,
        units,
        whole,
    );
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
    if comptime!(shape.prefetch) {
        if block + 1 < span.end {
            fetch::<E, N>(stream, source, (block + 1) * shape.rows, shape);
        }
    }
}
