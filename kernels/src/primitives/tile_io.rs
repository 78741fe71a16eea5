//! Tiles between strided global tensors and shared memory.
//!
//! Global tensors are `[batch, num_heads, seq, dim]` with arbitrary strides (Burn hands over
//! transposed or broadcast views); a [`HeadView`] addresses one (batch, head) of them.
//! [`load_rows`] reads rows in 16-byte vectors where the launcher found them laid out for it
//! ([`load_width`]), and one element at a time otherwise.
use cubecl::prelude::*;

use super::chunk_io::{ChunkView, fetch_rows};
use crate::plan::rows_in_vectors;
use crate::problem::FloatKind;

/// Bytes of one vector load of [`load_rows`]: 8 f16/bf16 or 4 f32 elements, the widest a
/// CUDA or HIP thread reads in one instruction.
pub const LOAD_BYTES: usize = 16;

/// The vector width (elements) [`load_rows`] reads `tensors` of `dtype` in on `client`: a
/// [`LOAD_BYTES`] vector where the plan `allowed` it, the runtime is CUDA or HIP and every
/// tensor's rows are contiguous whole vectors ([`rows_in_vectors`]); 1 otherwise (WGPU, whose
/// vectors hold at most 4 elements and whose shared memory cannot be viewed in other widths;
/// strided or offset views; the scalar stand-in, which runs on WGPU, is never allowed).
pub fn load_width<R: Runtime>(
    client: &ComputeClient<R>,
    dtype: FloatKind,
    allowed: bool,
    tensors: &[&TensorBinding<R>],
) -> usize {
    let runtime = R::name(client);
    let width = LOAD_BYTES / dtype.size();
    let native = runtime.starts_with("cuda") || runtime.starts_with("hip");
    if allowed && native && rows_in_vectors(dtype, width, tensors) { width } else { 1 }
}

/// One (batch, head) of a rank-4 tensor: element `(row, col)` is at
/// `base + row * row_stride + col * col_stride`.
#[derive(CubeType, Clone, Copy)]
pub struct HeadView {
    pub base: usize,
    pub row_stride: usize,
    pub col_stride: usize,
    /// Rows in bounds (`seq`).
    pub rows: u32,
}

/// The view of `(batch, head)` in `tensor`.
#[cube]
pub fn head_view<E: CubePrimitive>(tensor: &Tensor<E>, batch: u32, head: u32) -> HeadView {
    HeadView {
        base: batch as usize * tensor.stride(0) + head as usize * tensor.stride(1),
        row_stride: tensor.stride(2),
        col_stride: tensor.stride(3),
        rows: tensor.shape(2) as u32,
    }
}

/// Copies rows `[first_row, first_row + rows)` and columns `[0, cols)` of `view` into `tile`
/// (row-major, `tile_cols` per row), cooperatively over `units` units. Rows past the end of the
/// tensor and columns `[cols, tile_cols)` are written as 0: a zero K row or V row is harmless
/// where garbage could be NaN, and NaN * 0 is still NaN.
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn load_tile<E: CubePrimitive, S: Numeric>(
    tensor: &Tensor<E>,
    view: &HeadView,
    tile: &mut Slice<S, ReadWrite>,
    first_row: u32,
    #[comptime] rows: u32,
    #[comptime] cols: u32,
    #[comptime] tile_cols: u32,
    #[comptime] units: u32,
) {
    let total = comptime!(rows * tile_cols);
    let mut index = UNIT_POS;
    while index < total {
        let row = index / tile_cols;
        let col = index % tile_cols;
        let global_row = first_row + row;
        let mut value = S::from_int(0);
        if global_row < view.rows && col < cols {
            let at =
                view.base + global_row as usize * view.row_stride + col as usize * view.col_stride;
            value = S::cast_from(tensor[at]);
        }
        tile[index as usize] = value;
        index += units;
    }
}

/// Copies rows `[first_row, first_row + rows)` and columns `[0, cols)` of `view` into `tile`
/// (`stride` elements per row, the first `dim_tile` of them data: columns `[cols, dim_tile)`
/// and rows past the tensor are written as 0, as [`load_tile`] does), over `units` units.
///
/// With vectors of one element (`N` = 1) this is [`load_tile`]: one element per unit and step,
/// any strides. Wider (the launcher checked with [`load_width`] that rows are whole vectors),
/// each unit first loads all of its vectors of the tile into registers, so that they are in
/// flight together, then stores them: [`fetch_rows_ahead`], then [`commit_rows`], which a
/// kernel may also call apart, one block ahead (see there).
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn load_rows<E: Float, S: Float, N: Size>(
    tensor: &Tensor<Vector<E, N>>,
    view: &HeadView,
    tile: &mut Slice<S, ReadWrite>,
    first_row: u32,
    #[comptime] rows: u32,
    #[comptime] cols: u32,
    #[comptime] dim_tile: u32,
    #[comptime] stride: u32,
    #[comptime] units: u32,
    #[comptime] whole: bool,
) {
    let mut staged = rows_in_flight::<E, N>(tensor, rows, dim_tile, units);
    fetch_rows_ahead::<E, N>(tensor, view, &mut staged, first_row, rows, cols, dim_tile, units);
    commit_rows::<E, S, N>(
        tensor, view, &staged, tile, first_row, rows, cols, dim_tile, stride, units, whole,
    );
}

/// The registers that hold one unit's vectors of a `[rows, dim_tile]` tile of `tensor` between
/// [`fetch_rows_ahead`] and [`commit_rows`] (one unused element where `N` = 1: nothing is
/// fetched ahead then).
#[cube]
pub fn rows_in_flight<E: Float, N: Size>(
    tensor: &Tensor<Vector<E, N>>,
    #[comptime] rows: u32,
    #[comptime] dim_tile: u32,
    #[comptime] units: u32,
) -> Array<Vector<E, N>> {
    let width = tensor.vector_size();
    let count = comptime!(if width == 1 {
        1usize
    } else {
        (rows * (dim_tile / width as u32)).div_ceil(units) as usize
    });
    Array::<Vector<E, N>>::new(count)
}

/// The first half of [`load_rows`]: this unit's vectors of rows `[first_row, first_row +
/// rows)` into `staged` (zeros past the tensor and in the padding), all in flight together.
/// Nothing where `N` = 1 ([`commit_rows`] then reads the tensor itself). A kernel that fetches
/// its next block here before it computes the current one hides the loads' latency behind that
/// work, at the price of the registers ([`rows_in_flight`]).
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn fetch_rows_ahead<E: Float, N: Size>(
    tensor: &Tensor<Vector<E, N>>,
    view: &HeadView,
    staged: &mut Array<Vector<E, N>>,
    first_row: u32,
    #[comptime] rows: u32,
    #[comptime] cols: u32,
    #[comptime] dim_tile: u32,
    #[comptime] units: u32,
) {
    let width = tensor.vector_size();
    if comptime!(width > 1) {
        let w = comptime!(width as u32);
        comptime! {
            assert!(cols.is_multiple_of(w) && dim_tile.is_multiple_of(w), "rows of whole vectors");
        }
        let vectors_view = ChunkView {
            base: view.base / width,
            row_stride: view.row_stride / width,
            rows: view.rows,
        };
        // The mma paths' register staging, vectors per tile row and per tensor row.
        fetch_rows::<E, N>(
            tensor,
            &vectors_view,
            staged,
            first_row,
            rows,
            comptime!(cols / w),
            comptime!(dim_tile / w),
            units,
        );
    }
}

/// The second half of [`load_rows`]: stores what [`fetch_rows_ahead`] fetched of rows
/// `[first_row, first_row + rows)` into `tile`, as vectors where the tile has the tensor's type
/// (`whole`: `stride` and `dim_tile` are multiples of the width), element by element, converted,
/// where it does not (f32 tiles of bf16 inputs; the row padding past `dim_tile` is then left as
/// it is: no fragment reads it). Where `N` = 1 it reads the rows now ([`load_tile`]).
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn commit_rows<E: Float, S: Float, N: Size>(
    tensor: &Tensor<Vector<E, N>>,
    view: &HeadView,
    staged: &Array<Vector<E, N>>,
    tile: &mut Slice<S, ReadWrite>,
    first_row: u32,
    #[comptime] rows: u32,
    #[comptime] cols: u32,
    #[comptime] dim_tile: u32,
    #[comptime] stride: u32,
    #[comptime] units: u32,
    #[comptime] whole: bool,
) {
    let width = tensor.vector_size();
    if comptime!(width == 1) {
        load_tile::<Vector<E, N>, S>(tensor, view, tile, first_row, rows, cols, stride, units);
    } else {
        let w = comptime!(width as u32);
        let row_vectors = comptime!(dim_tile / w);
        let total = comptime!(rows * row_vectors);
        let steps = comptime!(total.div_ceil(units));
        if comptime!(whole) {
            let mut vectors = tile.into_vectorized().with_vector_size::<N>();
            #[unroll]
            for i in 0..steps {
                let index = UNIT_POS + i * units;
                if index < total {
                    let at = (index / row_vectors) * comptime!(stride / w) + index % row_vectors;
                    vectors[at as usize] = Vector::<S, N>::cast_from(staged[i as usize]);
                }
            }
        } else {
            #[unroll]
            for i in 0..steps {
                let index = UNIT_POS + i * units;
                if index < total {
                    let at = (index / row_vectors) * stride + (index % row_vectors) * w;
                    let value = staged[i as usize];
                    #[unroll]
                    for e in 0..w {
                        tile[(at + e) as usize] = S::cast_from(value[e as usize]);
                    }
                }
            }
        }
    }
}

/// Where one (batch, head)'s rows of an f32 `[batch, heads, seq]` tensor (the lse or delta)
/// sit: read once, before a loop that reads a row per iteration ([`view_row_stat`]), so that
/// the loop reads no shape or strides.
#[derive(CubeType, Clone, Copy)]
pub struct StatView {
    pub base: usize,
    pub stride: usize,
    pub rows: u32,
}

/// The [`StatView`] of `(batch, head)`'s rows of `stat`.
#[cube]
pub fn stat_view(stat: &Tensor<f32>, batch: u32, head: u32) -> StatView {
    StatView {
        base: batch as usize * stat.stride(0) + head as usize * stat.stride(1),
        stride: stat.stride(2),
        rows: stat.shape(2) as u32,
    }
}

/// Value `row` of the rows `view` places in `stat` (the lse or delta of a query row), 0 past
/// the end.
#[cube]
pub fn view_row_stat(stat: &Tensor<f32>, view: &StatView, row: u32) -> f32 {
    let mut value = 0.0f32;
    if row < view.rows {
        value = stat[view.base + row as usize * view.stride];
    }
    value
}

/// Value `row` of an f32 `[batch, heads, seq]` tensor (the lse or delta of a query row), 0 past
/// the end.
#[cube]
pub fn row_stat(stat: &Tensor<f32>, batch: u32, head: u32, row: u32) -> f32 {
    view_row_stat(stat, &stat_view(stat, batch, head), row)
}
