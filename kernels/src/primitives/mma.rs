//! Register-level `mma` (CubeCL's manual MMA, m16n8k16, f32 accumulation) and the tiles it
//! reads: what the mma forward and backward kernels share.
//!
//! Fragment layout (PTX m16n8k16, 32 lanes; lane `l`, row group `g = l / 4`, `t = l % 4`):
//! ```text
//!   accumulator tile (16 x 8)     A operand (16 x 16) = two accumulator tiles side by side
//!   row g     : cols 2t, 2t+1     a[0] = tile 0, row g     a[2] = tile 1, row g
//!   row g + 8 : cols 2t, 2t+1     a[1] = tile 0, row g + 8 a[3] = tile 1, row g + 8
//!   B operand (16 x 8): b[0] = rows 2t, 2t+1 of column g; b[1] = rows 2t+8, 2t+9
//! ```
//! An accumulator array holds tile `j` at `[2j]` (row g) and `[2j + 1]` (row g + 8), so the
//! accumulators of tiles `2kk, 2kk + 1`, cast to the input type, are A fragment `kk` as they
//! stand: a product can feed the next one without leaving registers.
//!
//! Tiles live in shared memory in 8-element chunks (16 bytes of f16/bf16), rows padded by one
//! chunk: the row stride is an odd multiple of 16 bytes, so the 8 rows of an `ldmatrix` phase
//! hit 8 different bank groups.
use cubecl::cmma::{MatrixIdent, MmaDefinition};
use cubecl::prelude::*;

use super::chunk_io::CHUNK_PAIRS;

/// Two elements of a fragment register (f16/bf16 pairs in A/B, f32 pairs in accumulators).
pub type Pair<E> = Vector<E, Const<2>>;

/// Lanes of one plane (the PTX m16n8k16 layout is defined for 32).
pub const LANES: u32 = 32;
/// Rows of an A fragment / accumulator tile, and the k of one mma.
pub const TILE_M: u32 = 16;
/// Columns of one accumulator tile (the mma's n).
pub const TILE_N: u32 = 8;
/// A lane's second accumulator row is this far below its first (`group + 8`).
pub const BOTTOM_ROW: u32 = TILE_M / 2;
/// Rows of one 8x8 matrix of `ldmatrix` (each addressed by one lane of an 8-lane phase).
const LDMATRIX_ROWS: u32 = 8;
/// Registers of one A fragment / one B fragment / one accumulator tile, per lane.
pub const A_REGS: u32 = 4;
pub const B_REGS: u32 = 2;
pub const ACC_REGS: u32 = 2;

/// The 16x8x16 mma of `F` inputs with f32 accumulation.
#[cube]
pub fn mma_definition<F: Float>() -> MmaDefinition<F, F, f32> {
    MmaDefinition::<F, F, f32>::new(TILE_M as usize, TILE_N as usize, TILE_M as usize)
}

/// Where this lane sits in the fragments (see the module doc).
#[derive(CubeType, Clone, Copy)]
pub struct Lane {
    /// `UNIT_POS_PLANE`.
    pub id: u32,
    /// Row group `id / 4`: this lane's accumulator rows are `group` and `group + 8`.
    pub group: u32,
    /// `id % 4`: this lane's columns of every tile are `2 * quad` and `+ 1`.
    pub quad: u32,
}

#[cube]
pub fn lane() -> Lane {
    Lane {
        id: UNIT_POS_PLANE,
        group: UNIT_POS_PLANE / 4,
        quad: UNIT_POS_PLANE % 4,
    }
}

/// `tiles` accumulator tiles of zeros.
#[cube]
pub fn zero_accumulators(#[comptime] tiles: u32) -> Array<Pair<f32>> {
    let mut acc = Array::<Pair<f32>>::new(comptime!((ACC_REGS * tiles) as usize));
    #[unroll]
    for i in 0..comptime!(ACC_REGS * tiles) {
        acc[i as usize] = Pair::<f32>::new(0.0f32);
    }
    acc
}

/// A fragment `kk` of accumulator tiles `2kk, 2kk + 1`, cast to `F`.
#[cube]
pub fn accumulators_as_a<F: Float>(acc: &Array<Pair<f32>>, #[comptime] kk: u32) -> Array<Pair<F>> {
    let mut a = Array::<Pair<F>>::new(A_REGS as usize);
    #[unroll]
    for r in 0..A_REGS {
        a[r as usize] = Pair::<F>::cast_from(acc[(kk * A_REGS + r) as usize]);
    }
    a
}

/// `ldmatrix.x4` from a chunked tile: every lane gives the chunk `at` its 16-byte row starts
/// at; the four 8x8 matrices land in the four registers of the result.
#[cube]
fn ldmatrix_x4<F: Float, N: Size>(
    tile: &SharedMemory<Vector<F, N>>,
    at: usize,
    #[comptime] ident: MatrixIdent,
    #[comptime] transpose: bool,
) -> Array<Pair<F>> {
    mma_definition::<F>().load_matrix::<Vector<F, N>, Const<2>>(
        &tile.slice(at, at + 1),
        ident,
        4usize,
        transpose,
    )
}

/// Bounds the run-time part of an index into a shared tile. Every index into shared memory is
/// below 2^16 (the largest shared memory, 228 KiB, is 58368 four-byte pairs, fewer 16-byte
/// chunks), so the mask changes no index; it tells the compiler that adding a constant offset
/// cannot wrap in 32 bits.
const SHARED_INDEX_MASK: u32 = 0xffff;

/// A shared-memory index as its run-time part `base` (bounded by [`SHARED_INDEX_MASK`]) plus
/// its comptime part `offset`, added after: cubecl-cuda widens the 32-bit index after the sum,
/// so an unbounded `(x + c)` might wrap and the compiler recomputes the address for every `c`
/// (an add and a shift-add per access at sm_90a, where the tiles are separate arrays); bounded,
/// it folds `c` into the access's immediate offset (counts in benches/RESULTS.md,
/// `scripts/cuda_offline_sass.sh`).
#[cube]
pub fn offset_index(base: u32, #[comptime] offset: u32) -> u32 {
    (base & SHARED_INDEX_MASK) + offset
}

/// The chunk a lane gives `ldmatrix` for the 16 x 16 fragment at rows `first_row + row_offset`,
/// chunk pair `step`: the lane's own offset `lane_at` (its row times the stride plus its chunk)
/// plus the fragment's first chunk, as an [`offset_index`]: the run-time part (`lane_at +
/// first_row * stride`, the same for every fragment of a block) computed once, the comptime
/// part (`row_offset`, and `step` where it is known) added after.
#[cube]
fn fragment_at(
    first_row: u32,
    #[comptime] row_offset: u32,
    #[comptime] stride: u32,
    step: u32,
    lane_at: u32,
) -> usize {
    (offset_index(lane_at + first_row * stride, comptime!(row_offset * stride)) + step * 2) as usize
}

/// The A fragment of rows `[first_row + row_offset, +16)`, columns `[16 kk, 16 kk + 16)` of a
/// row-major tile: lanes 0-15 address rows 0-15 at chunk 2kk, lanes 16-31 the same rows at
/// chunk 2kk + 1.
#[cube]
pub fn load_a<F: Float, N: Size>(
    tile: &SharedMemory<Vector<F, N>>,
    first_row: u32,
    #[comptime] row_offset: u32,
    #[comptime] stride: u32,
    kk: u32,
) -> Array<Pair<F>> {
    let lane = UNIT_POS_PLANE;
    let lane_at = (lane % TILE_M) * stride + lane / TILE_M;
    let at = fragment_at(first_row, row_offset, stride, kk, lane_at);
    ldmatrix_x4::<F, N>(tile, at, MatrixIdent::A, false)
}

/// The B fragments of two accumulator tiles whose n index runs along the tile's rows: B(k, n) =
/// tile[r + n][16 kk + k], `r = first_row + row_offset`, for n in `[0, 16)` (tiles `[0..2)` and
/// `[2..4)` of the result: rows `[r, r + 8)` and `[r + 8, r + 16)`). Not transposed.
#[cube]
pub fn load_b_by_rows<F: Float, N: Size>(
    tile: &SharedMemory<Vector<F, N>>,
    first_row: u32,
    #[comptime] row_offset: u32,
    #[comptime] stride: u32,
    kk: u32,
) -> Array<Pair<F>> {
    let lane = UNIT_POS_PLANE;
    let lane_at = (lane % LDMATRIX_ROWS + (lane / TILE_M) * LDMATRIX_ROWS) * stride
        + (lane / LDMATRIX_ROWS) % 2;
    let at = fragment_at(first_row, row_offset, stride, kk, lane_at);
    ldmatrix_x4::<F, N>(tile, at, MatrixIdent::B, false)
}

/// The B fragments of two accumulator tiles whose k index runs along the tile's rows: B(k, n) =
/// tile[r + k][16 jj + n], `r = first_row + row_offset`, k in `[0, 16)`, n in `[0, 16)` (tiles
/// `[0..2)`: columns `16 jj + [0, 8)`, `[2..4)`: `16 jj + [8, 16)`). Transposed. `jj` may be
/// known only at run time (the one-pass dQ share's work items).
#[cube]
pub fn load_b_by_cols<F: Float, N: Size>(
    tile: &SharedMemory<Vector<F, N>>,
    first_row: u32,
    #[comptime] row_offset: u32,
    #[comptime] stride: u32,
    jj: u32,
) -> Array<Pair<F>> {
    let lane = UNIT_POS_PLANE;
    let lane_at = (lane % TILE_M) * stride + lane / TILE_M;
    let at = fragment_at(first_row, row_offset, stride, jj, lane_at);
    ldmatrix_x4::<F, N>(tile, at, MatrixIdent::B, true)
}

/// The A fragment of a tile that holds A transposed, in pairs: A(m, k) = tile[r + k]
/// [8 first_chunk + m], `r = first_row + row_offset`, m, k in `[0, 16)`, `stride` pairs per
/// tile row (a whole, odd number of chunks). The four 8x8 matrices are the tile's rows
/// `r + [0, 8)` and `r + [8, 16)` (k) at chunks `first_chunk` and `+ 1` (m), each transposed
/// by `ldmatrix.trans`: lanes 0-7 address (rows 0-7, chunk 0), 8-15 (rows 0-7, chunk 1), 16-23
/// (rows 8-15, chunk 0), 24-31 (rows 8-15, chunk 1). An [`offset_index`], `row_offset` its
/// comptime part.
#[cube]
pub fn load_a_transposed<F: Float>(
    tile: &SharedMemory<Pair<F>>,
    first_row: u32,
    #[comptime] row_offset: u32,
    first_chunk: u32,
    #[comptime] stride: u32,
) -> Array<Pair<F>> {
    let lane = UNIT_POS_PLANE;
    let row = lane % LDMATRIX_ROWS + (lane / TILE_M) * LDMATRIX_ROWS;
    let chunk = (lane / LDMATRIX_ROWS) % 2;
    let lane_at = row * stride + chunk * CHUNK_PAIRS;
    let base = lane_at + first_row * stride + first_chunk * CHUNK_PAIRS;
    let at = offset_index(base, comptime!(row_offset * stride)) as usize;
    ldmatrix_x4::<F, Const<2>>(tile, at, MatrixIdent::A, true)
}

/// `A B^T` for the plane's 16 rows `[a_row, a_row + 16)` of `a` against rows
/// `[b_row, b_row + 8 n_tiles)` of `b`, both row-major tiles of `stride` chunks, over `k_steps`
/// 16-column steps: `n_tiles` accumulator tiles (S = Q K^T, dP = dO V^T and their transposes).
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn product_with_rows<F: Float, N: Size>(
    a: &SharedMemory<Vector<F, N>>,
    a_row: u32,
    b: &SharedMemory<Vector<F, N>>,
    b_row: u32,
    #[comptime] stride: u32,
    #[comptime] k_steps: u32,
    #[comptime] n_tiles: u32,
    #[comptime] rolled: bool,
) -> Array<Pair<f32>> {
    let mut acc = zero_accumulators(n_tiles);
    if comptime!(rolled) {
        // Nothing in registers is indexed by `kk`: the k steps may stay a loop in the source
        // (`MmaConfig::rolled_steps`).
        for kk in 0..k_steps {
            product_step::<F, N>(a, a_row, b, b_row, stride, kk, n_tiles, &mut acc);
        }
    } else {
        #[unroll]
        for kk in 0..k_steps {
            product_step::<F, N>(a, a_row, b, b_row, stride, kk, n_tiles, &mut acc);
        }
    }
    acc
}

/// k-step `kk` of [`product_with_rows`].
#[cube]
#[allow(clippy::too_many_arguments)]
fn product_step<F: Float, N: Size>(
    a: &SharedMemory<Vector<F, N>>,
    a_row: u32,
    b: &SharedMemory<Vector<F, N>>,
    b_row: u32,
    #[comptime] stride: u32,
    kk: u32,
    #[comptime] n_tiles: u32,
    acc: &mut Array<Pair<f32>>,
) {
    let fragment = load_a::<F, N>(a, a_row, 0u32, stride, kk);
    #[unroll]
    for jj in 0..comptime!(n_tiles / 2) {
        let b_fragments = load_b_by_rows::<F, N>(b, b_row, comptime!(jj * TILE_M), stride, kk);
        mma_tile_pair::<F>(&fragment, &b_fragments, acc, jj);
    }
}

/// `acc += X B` where X is the accumulator array `x` (`row_tiles` stacked 16-row tiles of
/// `8 k_tiles` columns, cast to F as A fragments) and B rows `[0, 8 k_tiles)` of a row-major
/// tile of `stride` chunks, over `n_steps` 16-column steps of B (O += P V, dV += P^T dO,
/// dK += dS^T Q, dQ += dS K). Row tile `t` of `x` starts at accumulator tile `t k_tiles`, of
/// `acc` at `2 t n_steps`; each B fragment is read once for all row tiles. B's rows start at
/// row `b_row` of the tile.
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn accumulate_product<F: Float, N: Size>(
    x: &Array<Pair<f32>>,
    b: &SharedMemory<Vector<F, N>>,
    b_row: u32,
    #[comptime] stride: u32,
    #[comptime] k_tiles: u32,
    #[comptime] n_steps: u32,
    #[comptime] row_tiles: u32,
    acc: &mut Array<Pair<f32>>,
) {
    let a_steps = comptime!(k_tiles / 2);
    #[unroll]
    for kk in 0..a_steps {
        let mut fragments = Array::<Pair<F>>::new(comptime!((A_REGS * row_tiles) as usize));
        #[unroll]
        for t in 0..row_tiles {
            let fragment = accumulators_as_a::<F>(x, comptime!(t * a_steps + kk));
            #[unroll]
            for r in 0..A_REGS {
                fragments[(t * A_REGS + r) as usize] = fragment[r as usize];
            }
        }
        #[unroll]
        for jj in 0..n_steps {
            let b_fragments =
                load_b_by_cols::<F, N>(b, b_row, comptime!(kk * TILE_M), stride, jj);
            #[unroll]
            for t in 0..row_tiles {
                let fragment = a_fragment::<F>(&fragments, t);
                mma_tile_pair::<F>(&fragment, &b_fragments, acc, comptime!(t * n_steps + jj));
            }
        }
    }
}

/// A fragment `t` of an array of `A_REGS`-register fragments.
#[cube]
pub fn a_fragment<F: Float>(fragments: &Array<Pair<F>>, #[comptime] t: u32) -> Array<Pair<F>> {
    let mut a = Array::<Pair<F>>::new(A_REGS as usize);
    #[unroll]
    for r in 0..A_REGS {
        a[r as usize] = fragments[(t * A_REGS + r) as usize];
    }
    a
}

/// `acc tile += a * b[b_first..b_first + 2]` on accumulator tile `tile`.
#[cube]
pub fn mma_tile<F: Float>(
    a: &Array<Pair<F>>,
    b: &Array<Pair<F>>,
    #[comptime] b_first: u32,
    acc: &mut Array<Pair<f32>>,
    #[comptime] tile: u32,
) {
    let mut b_regs = Array::<Pair<F>>::new(B_REGS as usize);
    #[unroll]
    for r in 0..B_REGS {
        b_regs[r as usize] = b[(b_first + r) as usize];
    }
    let mut c = Array::<Pair<f32>>::new(ACC_REGS as usize);
    #[unroll]
    for r in 0..ACC_REGS {
        c[r as usize] = acc[(tile * ACC_REGS + r) as usize];
    }
    mma_definition::<F>().execute_inplace(a, &b_regs, &mut c);
    #[unroll]
    for r in 0..ACC_REGS {
        acc[(tile * ACC_REGS + r) as usize] = c[r as usize];
    }
}

/// `acc tiles 2jj, 2jj + 1 += a * (the four B registers of a load_b_*)`.
#[cube]
pub fn mma_tile_pair<F: Float>(
    a: &Array<Pair<F>>,
    b: &Array<Pair<F>>,
    acc: &mut Array<Pair<f32>>,
    #[comptime] jj: u32,
) {
    mma_tile::<F>(a, b, 0u32, acc, comptime!(jj * 2));
    mma_tile::<F>(a, b, B_REGS, acc, comptime!(jj * 2 + 1));
}

/// Writes this lane's part of accumulator row `group + 8 half` (`half` 0 or 1; `dim / 8`
/// tiles from tile `first_tile`, padded to 16 columns), times `factor`, as row `row` of the
/// (batch, head) of `out` starting at `base`. Columns at or past `dim` are not written; the
/// caller checks the row.
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn store_accumulator_row<F: Float>(
    out: &mut Tensor<F>,
    acc: &Array<Pair<f32>>,
    base: usize,
    row: u32,
    lane: Lane,
    factor: f32,
    #[comptime] first_tile: u32,
    #[comptime] half: u32,
    #[comptime] dim: u32,
) {
    let row_base = base + row as usize * out.stride(2);
    #[unroll]
    for j in 0..comptime!(dim.div_ceil(TILE_M) * 2) {
        let pair = acc[((first_tile + j) * ACC_REGS + half) as usize];
        #[unroll]
        for e in 0..2u32 {
            let col = j * TILE_N + lane.quad * 2 + e;
            if col < dim {
                out[row_base + col as usize * out.stride(3)] =
                    F::cast_from(pair[e as usize] * factor);
            }
        }
    }
}

/// Max over the four lanes of a row group.
#[cube]
pub fn quad_max(value: f32) -> f32 {
    let pair = max(value, plane_shuffle_xor(value, 1));
    max(pair, plane_shuffle_xor(pair, 2))
}

/// Sum over the four lanes of a row group (the same order in every lane: bit-identical).
#[cube]
pub fn quad_sum(value: f32) -> f32 {
    let pair = value + plane_shuffle_xor(value, 1);
    pair + plane_shuffle_xor(pair, 2)
}
