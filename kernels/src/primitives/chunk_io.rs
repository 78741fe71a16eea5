//! Chunked rows for the mma paths: tensors read and shared-memory tiles written in 16-byte
//! chunks (8 f16/bf16 elements), rows of the tiles padded by one chunk (see
//! [`super::mma`] for why), and the next block staged in registers while the current one
//! computes.
use cubecl::prelude::*;

use super::mma::TILE_M;

/// Elements of one 16-byte chunk of f16/bf16 (a global load, an `ldmatrix` row): what the mma
/// paths load, and what their inputs' rows must be made of.
pub const CHUNK: u32 = 8;

/// f16/bf16 pairs (one 32-bit word each) in a chunk: the unit of a tile stored in pairs.
pub const CHUNK_PAIRS: u32 = CHUNK / 2;

/// Chunks of a tile row that holds `dim` elements: padded to the mma tile.
pub const fn tile_chunks(dim: u32) -> u32 {
    dim.next_multiple_of(TILE_M) / CHUNK
}

/// Row stride of a chunked tile, in chunks: one chunk of padding makes it an odd multiple of
/// 16 bytes, so the 8 rows of an `ldmatrix` phase fall in 8 different bank groups.
pub const fn tile_stride(dim: u32) -> u32 {
    tile_chunks(dim) + 1
}

/// One (batch, head) of a chunked tensor: chunk `c` of row `r` is at
/// `base + r * row_stride + c` (all in chunks).
#[derive(CubeType, Clone, Copy)]
pub struct ChunkView {
    pub base: usize,
    pub row_stride: usize,
    pub rows: u32,
}

#[cube]
pub fn chunk_view<F: Float, N: Size>(
    tensor: &Tensor<Vector<F, N>>,
    batch: u32,
    head: u32,
) -> ChunkView {
    let chunk = tensor.vector_size();
    ChunkView {
        base: (batch as usize * tensor.stride(0) + head as usize * tensor.stride(1)) / chunk,
        row_stride: tensor.stride(2) / chunk,
        rows: tensor.shape(2) as u32,
    }
}

/// Loads chunks `[0, tile_chunks)` of rows `[first_row, first_row + rows)` into registers,
/// chunk `UNIT_POS + i * units` of the block into `staged[i]`. Rows past the tensor and chunks
/// `[cols, tile_chunks)` (the padding to the mma tile) are zeros.
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn fetch_rows<F: Float, N: Size>(
    tensor: &Tensor<Vector<F, N>>,
    view: &ChunkView,
    staged: &mut Array<Vector<F, N>>,
    first_row: u32,
    #[comptime] rows: u32,
    #[comptime] cols: u32,
    #[comptime] tile_chunks: u32,
    #[comptime] units: u32,
) {
    let total = comptime!(rows * tile_chunks);
    #[unroll]
    for i in 0..comptime!(total.div_ceil(units)) {
        let index = UNIT_POS + i * units;
        let row = index / tile_chunks;
        let chunk = index % tile_chunks;
        let global_row = first_row + row;
        let mut value = Vector::<F, N>::zeroed();
        if index < total && global_row < view.rows && chunk < cols {
            value = tensor[view.base + global_row as usize * view.row_stride + chunk as usize];
        }
        staged[i as usize] = value;
    }
}

/// Stores what [`fetch_rows`] loaded into a tile of `stride` chunks per row, from row
/// `first_row` of the tile on.
#[cube]
pub fn store_rows<F: Float, N: Size>(
    staged: &Array<Vector<F, N>>,
    tile: &mut SharedMemory<Vector<F, N>>,
    first_row: u32,
    #[comptime] rows: u32,
    #[comptime] tile_chunks: u32,
    #[comptime] stride: u32,
    #[comptime] units: u32,
) {
    let total = comptime!(rows * tile_chunks);
    #[unroll]
    for i in 0..comptime!(total.div_ceil(units)) {
        let index = UNIT_POS + i * units;
        if index < total {
            let row = index / tile_chunks;
            let chunk = index % tile_chunks;
            tile[((first_row + row) * stride + chunk) as usize] = staged[i as usize];
        }
    }
}

/// Copies rows `[first_row, first_row + rows)` of a chunked tensor into a tile (zeros past
/// the tensor and in the padding). The caller synchronizes.
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn copy_rows<F: Float, N: Size>(
    tensor: &Tensor<Vector<F, N>>,
    view: &ChunkView,
    tile: &mut SharedMemory<Vector<F, N>>,
    first_row: u32,
    #[comptime] rows: u32,
    #[comptime] dim: u32,
    #[comptime] stride: u32,
    #[comptime] units: u32,
) {
    let tile_chunks = comptime!(tile_chunks(dim));
    let mut staged = staging::<F, N>(rows, tile_chunks, units);
    fetch_rows::<F, N>(
        tensor,
        view,
        &mut staged,
        first_row,
        rows,
        comptime!(dim / CHUNK),
        tile_chunks,
        units,
    );
    store_rows::<F, N>(&staged, tile, 0u32, rows, tile_chunks, stride, units);
}

/// Registers for [`fetch_rows`] of `rows * tile_chunks` chunks over `units` units.
#[cube]
pub fn staging<F: Float, N: Size>(
    #[comptime] rows: u32,
    #[comptime] tile_chunks: u32,
    #[comptime] units: u32,
) -> Array<Vector<F, N>> {
    Array::<Vector<F, N>>::new(comptime!((rows * tile_chunks).div_ceil(units) as usize))
}

/// The first tile row of the buffer that holds streamed block `block`, for a tile of
/// `buffers` blocks of `rows` rows one after the other (0 with one buffer).
#[cube]
pub fn buffer_row(block: u32, #[comptime] buffers: u32, #[comptime] rows: u32) -> u32 {
    let mut row = 0u32;
    if comptime!(buffers > 1) {
        row = (block % buffers) * rows;
    }
    row
}

/// A chunked shared-memory tile of `rows` rows of `stride` chunks, 16-byte aligned.
#[cube]
pub fn chunk_tile<F: Float, N: Size>(
    #[comptime] rows: u32,
    #[comptime] stride: u32,
) -> SharedMemory<Vector<F, N>> {
    SharedMemory::<Vector<F, N>>::new_aligned(comptime!((rows * stride) as usize), 16usize)
}

/// A block of rows of two chunked tensors streamed together (K and V, or Q and dO): `rows`
/// rows, `first_dim` / `second_dim` columns (multiples of [`CHUNK`]), over `units` units.
/// Their tiles' rows are padded to the mma tile plus one chunk.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct PairShape {
    pub rows: u32,
    pub first_dim: u32,
    pub second_dim: u32,
    pub units: u32,
}

impl PairShape {
    fn first_chunks(&self) -> u32 {
        tile_chunks(self.first_dim)
    }

    fn second_chunks(&self) -> u32 {
        tile_chunks(self.second_dim)
    }
}

/// One block of a [`PairShape`] in registers, on its way to the two shared tiles.
#[derive(CubeType)]
pub struct StagedPair<F: Float, N: Size> {
    pub first: Array<Vector<F, N>>,
    pub second: Array<Vector<F, N>>,
}

#[cube]
pub fn staged_pair<F: Float, N: Size>(#[comptime] shape: PairShape) -> StagedPair<F, N> {
    StagedPair::<F, N> {
        first: staging::<F, N>(shape.rows, comptime!(shape.first_chunks()), shape.units),
        second: staging::<F, N>(shape.rows, comptime!(shape.second_chunks()), shape.units),
    }
}

/// [`fetch_rows`] of rows `[first_row, first_row + shape.rows)` of both tensors.
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn fetch_pair<F: Float, N: Size>(
    first: &Tensor<Vector<F, N>>,
    first_view: &ChunkView,
    second: &Tensor<Vector<F, N>>,
    second_view: &ChunkView,
    staged: &mut StagedPair<F, N>,
    first_row: u32,
    #[comptime] shape: PairShape,
) {
    fetch_rows::<F, N>(
        first,
        first_view,
        &mut staged.first,
        first_row,
        shape.rows,
        comptime!(shape.first_dim / CHUNK),
        comptime!(shape.first_chunks()),
        shape.units,
    );
    fetch_rows::<F, N>(
        second,
        second_view,
        &mut staged.second,
        first_row,
        shape.rows,
        comptime!(shape.second_dim / CHUNK),
        comptime!(shape.second_chunks()),
        shape.units,
    );
}

/// [`store_rows`] of a staged pair into its two tiles, from tile row `tile_row` on.
#[cube]
pub fn store_pair<F: Float, N: Size>(
    staged: &StagedPair<F, N>,
    first_tile: &mut SharedMemory<Vector<F, N>>,
    second_tile: &mut SharedMemory<Vector<F, N>>,
    tile_row: u32,
    #[comptime] shape: PairShape,
) {
    store_rows::<F, N>(
        &staged.first,
        first_tile,
        tile_row,
        shape.rows,
        comptime!(shape.first_chunks()),
        comptime!(tile_stride(shape.first_dim)),
        shape.units,
    );
    store_rows::<F, N>(
        &staged.second,
        second_tile,
        tile_row,
        shape.rows,
        comptime!(shape.second_chunks()),
        comptime!(tile_stride(shape.second_dim)),
        shape.units,
    );
}
