//! Accumulator rows out through shared memory: each lane of a plane stores its accumulator
//! pairs, rounded to the output type, into the plane's own rows of a chunked tile, and after a
//! plane sync the plane copies those rows to the tensor in 16-byte chunks, the tensor's strides
//! read once. What the mma kernels write at their end, instead of a 2-byte store per element
//! whose address waits on the strides ([`super::mma::store_accumulator_row`]).
//! ```text
//! accumulators --x factor, pairs--> tile rows [tile_row, tile_row + rows)   (the plane's own)
//!                                      | 16-byte chunks, lane l: l, l + 32, ...
//!          out rows [first_row, first_row + rows) <--+ (rows before rows_end)
//! ```
use cubecl::prelude::*;

use super::chunk_io::{CHUNK, CHUNK_PAIRS};
use super::mma::{ACC_REGS, BOTTOM_ROW, LANES, Lane, Pair, TILE_N};

/// Stores this lane's pairs of one accumulator row (`half` 0: the lane's row `group`, 1:
/// `group + 8`) of `tiles` accumulator tiles from `first_tile`, times `factor` and rounded to
/// `F`, into row `tile_row` of a chunked tile whose rows are `stride` chunks apart (an odd
/// number of 16-byte chunks: the 32 lanes' 4-byte stores fall in 32 banks).
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn stage_accumulator_row<F: Float, N: Size>(
    tile: &mut SharedMemory<Vector<F, N>>,
    acc: &Array<Pair<f32>>,
    tile_row: u32,
    lane: Lane,
    factor: Pair<f32>,
    #[comptime] first_tile: u32,
    #[comptime] half: u32,
    #[comptime] tiles: u32,
    #[comptime] stride: u32,
) {
    let tile_pairs = comptime!(TILE_N / 2);
    let mut pairs = tile.to_slice_mut().with_vector_size::<Const<2>>();
    let at = tile_row * comptime!(stride * CHUNK_PAIRS) + lane.quad;
    #[unroll]
    for j in 0..tiles {
        let pair = acc[((first_tile + j) * ACC_REGS + half) as usize];
        pairs[(at + j * tile_pairs) as usize] = Pair::<F>::cast_from(pair * factor);
    }
}

/// [`stage_accumulator_row`] of both of this lane's rows of one 16-row accumulator tile whose
/// first row is tile row `tile_row`, `factor` the same for every row.
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn stage_accumulator_rows<F: Float, N: Size>(
    tile: &mut SharedMemory<Vector<F, N>>,
    acc: &Array<Pair<f32>>,
    tile_row: u32,
    lane: Lane,
    factor: Pair<f32>,
    #[comptime] tiles: u32,
    #[comptime] stride: u32,
) {
    #[unroll]
    for half in 0..2u32 {
        let row = tile_row + lane.group + half * BOTTOM_ROW;
        stage_accumulator_row::<F, N>(tile, acc, row, lane, factor, 0u32, half, tiles, stride);
    }
}

/// Copies `rows` rows of `dim` elements (a whole number of chunks) from tile row `tile_row` of a
/// plane's chunked tile (rows `stride` chunks apart) to rows `first_row..` of (`batch`, `head`)
/// of `out` (rows contiguous whole chunks: the launcher's check), rows at or past `rows_end` not
/// written: lane `l` copies chunks `l, l + 32, ...` of the rows, a row's chunks from consecutive
/// lanes. After the plane's stores of those rows and a plane sync.
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn copy_plane_rows<F: Float, N: Size>(
    out: &mut Tensor<F>,
    tile: &SharedMemory<Vector<F, N>>,
    batch: u32,
    head: u32,
    first_row: u32,
    rows_end: u32,
    tile_row: u32,
    lane: Lane,
    #[comptime] rows: u32,
    #[comptime] dim: u32,
    #[comptime] stride: u32,
) {
    let row_chunks = comptime!(dim / CHUNK);
    let total = comptime!(rows * row_chunks);
    let base = (batch as usize * out.stride(0) + head as usize * out.stride(1)) / CHUNK as usize;
    let row_stride = out.stride(2) / CHUNK as usize;
    let mut chunks = out.to_slice_mut().into_vectorized().with_vector_size::<N>();
    #[unroll]
    for s in 0..comptime!(total.div_ceil(LANES)) {
        let index = lane.id + s * LANES;
        let (r, c) = (index / row_chunks, index % row_chunks);
        let row = first_row + r;
        // (`index < total` holds in every lane where the lanes share the chunks evenly.)
        let in_plane = comptime!(total.is_multiple_of(LANES)) || index < total;
        if in_plane && row < rows_end {
            chunks[base + row as usize * row_stride + c as usize] =
                tile[((tile_row + r) * stride + c) as usize];
        }
    }
}
