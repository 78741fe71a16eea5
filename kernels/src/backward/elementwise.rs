//! One unit per element of a `[batch, heads, seq, dim]` tensor: the launch geometry and the
//! index arithmetic of the backward's small element-wise kernels (the grouped-query sum of
//! dK / dV, the one-pass dQ's zero fill and finish); and one cube per block of rows of one
//! (batch, head) (the preprocess, dQ's finish by rows).
use cubecl::prelude::*;

/// Units per cube.
pub(crate) const UNITS: u32 = 256;
/// Cubes along x; y takes the rest (a 1D count stops at 65535 cubes, 16.7 M elements).
const CUBES_X: u32 = 1024;

/// Cubes covering `total` elements, one unit each.
pub(crate) fn cube_count(total: usize) -> CubeCount {
    cubes_of(total.div_ceil(UNITS as usize) as u32)
}

/// `cubes` cubes, [`CUBES_X`] a row of the grid (the last row may run past `cubes`: kernels
/// check [`flat_cube`] against what they cover).
pub(crate) fn cubes_of(cubes: u32) -> CubeCount {
    CubeCount::Static(cubes.min(CUBES_X), cubes.div_ceil(CUBES_X), 1)
}

/// This cube's place in a grid of [`cubes_of`].
#[cube]
pub(crate) fn flat_cube() -> u32 {
    CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X
}

/// This unit's element (may be past the end: callers check).
#[cube]
pub(crate) fn element_index() -> usize {
    flat_cube() as usize * UNITS as usize + UNIT_POS as usize
}

/// Blocks of `rows` rows of each of `batch_heads` (batch, head) pairs of `seq` rows, one cube
/// each: the blocks per pair (the kernels' `row_blocks`, for [`row_block`]) and the grid.
pub(crate) fn row_block_grid(batch_heads: usize, seq: usize, rows: u32) -> (u32, CubeCount) {
    let row_blocks = seq.div_ceil(rows as usize) as u32;
    (row_blocks, cubes_of(batch_heads as u32 * row_blocks))
}

/// This cube's block in a grid of [`row_block_grid`]: its pair `batch * heads + head` (past
/// the last pair in the grid's last row: callers check) and its first row.
#[cube]
pub(crate) fn row_block(row_blocks: u32, #[comptime] rows: u32) -> (u32, u32) {
    let cube = flat_cube();
    (cube / row_blocks, (cube % row_blocks) * rows)
}

/// `(batch, head, row, col)` of element `index` of a contiguous tensor of `like`'s shape.
#[cube]
pub(crate) fn split_index<E: CubePrimitive>(index: usize, like: &Tensor<E>) -> (usize, usize, usize, usize) {
    let (heads, seq, dim) = (like.shape(1), like.shape(2), like.shape(3));
    let col = index % dim;
    let row = (index / dim) % seq;
    let head = (index / (dim * seq)) % heads;
    (index / (dim * seq * heads), head, row, col)
}

/// Where `(batch, head, row, col)` sits in `tensor` (any strides).
#[cube]
pub(crate) fn offset<E: CubePrimitive>(tensor: &Tensor<E>, batch: usize, head: usize, row: usize, col: usize) -> usize {
    batch * tensor.stride(0) + head * tensor.stride(1) + row * tensor.stride(2) + col * tensor.stride(3)
}
