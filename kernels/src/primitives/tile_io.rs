//! Tiles between strided global tensors and shared memory.
//!
//! Global tensors are `[batch, num_heads, seq, dim]` with arbitrary strides (Burn hands over
//! transposed or broadcast views); a [`HeadView`] addresses one (batch, head) of them.
use cubecl::prelude::*;

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
pub fn load_tile<E: Numeric, S: Numeric>(
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
