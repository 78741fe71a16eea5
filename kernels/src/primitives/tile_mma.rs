//! One plane's 16x16x16 tile products, `acc += A B` with f32 accumulation, by `cmma` or by a
//! scalar stand-in with the same interface.
//!
//! ```text
//!  A: 16 x 16 tile of a shared slice, row- or column-major, leading dimension `a_stride`
//!  B: 16 x 16 tile of a shared slice, row- or column-major, leading dimension `b_stride`
//!  acc (16 x 16 f32) += A B            store: acc -> row-major f32 slice
//! ```
//! [`Cmma`] is the matrix units' fragment (`wmma` on CUDA, rocWMMA / MFMA on HIP); [`StandIn`]
//! gives each lane of the plane the fixed elements `lane + i * plane_size` of the tile, in f32
//! registers, and sums their products in f32 from the same shared tiles: the matrix kernels run
//! unchanged on devices without cmma (the tests' lavapipe), everything but the fragment itself
//! exercised. Every lane of the plane calls every function (the products are plane-wide).
use cubecl::prelude::*;

use crate::config::MATRIX_TILE;

mod stand_in;

pub use stand_in::StandIn;

/// Elements of one 16x16 tile.
const TILE_ELEMENTS: u32 = MATRIX_TILE * MATRIX_TILE;

/// Where a tile operand sits in its shared slice.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum TileLayout {
    /// Element (r, c) at `r * stride + c`.
    RowMajor,
    /// Element (r, c) at `c * stride + r`.
    ColMajor,
}

impl TileLayout {
    fn cmma(self) -> cmma::MatrixLayout {
        match self {
            TileLayout::RowMajor => cmma::MatrixLayout::RowMajor,
            TileLayout::ColMajor => cmma::MatrixLayout::ColMajor,
        }
    }
}

/// A plane's 16x16x16 product with an f32 accumulator it keeps (see the module doc).
#[cube]
pub trait TileMma: Send + Sync + 'static {
    /// One 16x16 f32 accumulator tile of the plane.
    type Acc: CubeType;

    /// A zero accumulator.
    fn zero(#[comptime] plane_size: u32) -> Self::Acc;

    /// `acc += A B`: A's tile starts at `a[0]`, B's at `b[0]`.
    #[allow(clippy::too_many_arguments)]
    fn execute<F: Float>(
        acc: &mut Self::Acc,
        a: &Slice<F>,
        #[comptime] a_layout: TileLayout,
        #[comptime] a_stride: u32,
        b: &Slice<F>,
        #[comptime] b_layout: TileLayout,
        #[comptime] b_stride: u32,
        #[comptime] plane_size: u32,
    );

    /// `accs[r count + n] += A_r B_n` for r < `rows`, n < `count`: a plane that keeps `rows`
    /// rows of `count` output tiles loads its `rows` A tiles (A_r's at `a[r a_step]`) once and
    /// each B tile once for all of them, where [`execute_row`] per row of output tiles
    /// would load every B tile `rows` times. Each accumulator sums in the same order either way.
    #[allow(clippy::too_many_arguments)]
    fn execute_rows<F: Float>(
        accs: &mut Sequence<Self::Acc>,
        #[comptime] rows: u32,
        #[comptime] count: u32,
        a: &Slice<F>,
        #[comptime] a_layout: TileLayout,
        #[comptime] a_stride: u32,
        #[comptime] a_step: u32,
        b: &Slice<F>,
        #[comptime] b_layout: TileLayout,
        #[comptime] b_stride: u32,
        #[comptime] b_step: u32,
        #[comptime] plane_size: u32,
    );

    /// Stores `acc` row-major into `out` from `out[0]`, `out_stride` per row.
    fn store(
        acc: &Self::Acc,
        out: &mut Slice<f32, ReadWrite>,
        #[comptime] out_stride: u32,
        #[comptime] plane_size: u32,
    );

    /// Loads `acc` from the row-major f32 tile at `from[0]`, `from_stride` per row (the inverse
    /// of [`Self::store`]).
    fn load(
        acc: &mut Self::Acc,
        from: &Slice<f32>,
        #[comptime] from_stride: u32,
        #[comptime] plane_size: u32,
    );

    /// Writes `acc * factor` to the tile of `out` whose element (r, c) is at `base + (row0 + r)
    /// row_stride + (col0 + c) col_stride`, rows below `rows_end` and columns below `cols_end`
    /// only. `staging` is this plane's 16x16 f32 tile of shared memory for the fragments that
    /// need it. Every plane of the cube calls it (it may synchronize the cube).
    #[allow(clippy::too_many_arguments)]
    fn write<F: Float>(
        acc: &Self::Acc,
        out: &mut Tensor<F>,
        base: usize,
        row0: u32,
        col0: u32,
        rows_end: u32,
        cols_end: u32,
        factor: f32,
        staging: &mut Slice<f32, ReadWrite>,
        #[comptime] plane_size: u32,
    );
}

/// `count` zero accumulators: a row of output tiles a plane keeps in its fragments.
#[cube]
pub fn zero_tiles<T: TileMma>(
    #[comptime] count: u32,
    #[comptime] plane_size: u32,
) -> Sequence<T::Acc> {
    let mut tiles = Sequence::<T::Acc>::new();
    #[unroll]
    for _ in 0..count {
        tiles.push(T::zero(plane_size));
    }
    tiles
}

/// Writes `value` as element `e` (row-major) of a 16x16 tile of `out`, where it is in bounds
/// (see [`TileMma::write`]).
#[cube]
#[allow(clippy::too_many_arguments)]
fn write_element<F: Float>(
    out: &mut Tensor<F>,
    base: usize,
    row0: u32,
    col0: u32,
    rows_end: u32,
    cols_end: u32,
    e: u32,
    value: f32,
) {
    let (row, col) = (row0 + e / MATRIX_TILE, col0 + e % MATRIX_TILE);
    if e < TILE_ELEMENTS && row < rows_end && col < cols_end {
        let at = base + row as usize * out.stride(2) + col as usize * out.stride(3);
        out[at] = F::cast_from(value);
    }
}

/// The device's cmma fragments (16x16x16, inputs in the dtype, f32 accumulator).
pub struct Cmma;

/// A 16x16 A or B fragment loaded from `tile[0]`, `stride` per row (or column) of `layout`.
#[cube]
fn fragment<F: Float>(
    #[comptime] ident: cmma::MatrixIdent,
    tile: &Slice<F>,
    #[comptime] layout: TileLayout,
    #[comptime] stride: u32,
) -> cmma::Matrix<F> {
    let size = comptime!(MATRIX_TILE as usize);
    cmma::Matrix::<F>::from_slice(ident, size, size, size, comptime!(layout.cmma()), tile, stride)
}

/// `accs[n] += A B_n` for n < `count`: one A tile (at `a[0]`, loaded once) against a row of B
/// tiles, B_n's at `b[n b_step]`. What a plane that keeps a row of output tiles in its
/// fragments does per step of the shared dimension: [`TileMma::execute_rows`] for one row.
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn execute_row<T: TileMma, F: Float>(
    accs: &mut Sequence<T::Acc>,
    #[comptime] count: u32,
    a: &Slice<F>,
    #[comptime] a_layout: TileLayout,
    #[comptime] a_stride: u32,
    b: &Slice<F>,
    #[comptime] b_layout: TileLayout,
    #[comptime] b_stride: u32,
    #[comptime] b_step: u32,
    #[comptime] plane_size: u32,
) {
    T::execute_rows::<F>(
        accs, 1u32, count, a, a_layout, a_stride, 0u32, b, b_layout, b_stride, b_step, plane_size,
    );
}

#[cube]
impl TileMma for Cmma {
    type Acc = cmma::Matrix<f32>;

    fn zero(#[comptime] _plane_size: u32) -> cmma::Matrix<f32> {
        let tile = comptime!(MATRIX_TILE as usize);
        cmma::Matrix::<f32>::from_value(
            cmma::MatrixIdent::Accumulator,
            tile,
            tile,
            tile,
            cmma::MatrixLayout::Undefined,
            0.0f32,
        )
    }

    fn execute<F: Float>(
        acc: &mut cmma::Matrix<f32>,
        a: &Slice<F>,
        #[comptime] a_layout: TileLayout,
        #[comptime] a_stride: u32,
        b: &Slice<F>,
        #[comptime] b_layout: TileLayout,
        #[comptime] b_stride: u32,
        #[comptime] _plane_size: u32,
    ) {
        let a_frag = fragment::<F>(cmma::MatrixIdent::A, a, a_layout, a_stride);
        let b_frag = fragment::<F>(cmma::MatrixIdent::B, b, b_layout, b_stride);
        cmma::execute::<F, F, f32, f32>(&a_frag, &b_frag, acc, acc);
    }

    fn execute_rows<F: Float>(
        accs: &mut Sequence<cmma::Matrix<f32>>,
        #[comptime] rows: u32,
        #[comptime] count: u32,
        a: &Slice<F>,
        #[comptime] a_layout: TileLayout,
        #[comptime] a_stride: u32,
        #[comptime] a_step: u32,
        b: &Slice<F>,
        #[comptime] b_layout: TileLayout,
        #[comptime] b_stride: u32,
        #[comptime] b_step: u32,
        #[comptime] _plane_size: u32,
    ) {
        let mut a_frags = Sequence::<cmma::Matrix<F>>::new();
        #[unroll]
        for r in 0..rows {
            let a_at = (r * a_step) as usize;
            a_frags.push(fragment::<F>(
                cmma::MatrixIdent::A,
                &a.slice(a_at, a.len()),
                a_layout,
                a_stride,
            ));
        }
        #[unroll]
        for n in 0..count {
            let b_at = (n * b_step) as usize;
            let b_frag =
                fragment::<F>(cmma::MatrixIdent::B, &b.slice(b_at, b.len()), b_layout, b_stride);
            #[unroll]
            for r in 0..rows {
                let acc = accs.index_mut((r * count + n) as usize);
                cmma::execute::<F, F, f32, f32>(a_frags.index(r as usize), &b_frag, acc, acc);
            }
        }
    }

    fn store(
        acc: &cmma::Matrix<f32>,
        out: &mut Slice<f32, ReadWrite>,
        #[comptime] out_stride: u32,
        #[comptime] _plane_size: u32,
    ) {
        cmma::store(out, acc, out_stride, cmma::MatrixLayout::RowMajor);
    }

    fn load(
        acc: &mut cmma::Matrix<f32>,
        from: &Slice<f32>,
        #[comptime] from_stride: u32,
        #[comptime] _plane_size: u32,
    ) {
        cmma::load_with_layout(acc, from, from_stride, cmma::MatrixLayout::RowMajor);
    }

    fn write<F: Float>(
        acc: &cmma::Matrix<f32>,
        out: &mut Tensor<F>,
        base: usize,
        row0: u32,
        col0: u32,
        rows_end: u32,
        cols_end: u32,
        factor: f32,
        staging: &mut Slice<f32, ReadWrite>,
        #[comptime] plane_size: u32,
    ) {
        // A fragment's elements are not addressable: through the staging tile.
        cmma::store(staging, acc, MATRIX_TILE, cmma::MatrixLayout::RowMajor);
        sync_cube();
        for t in 0..comptime!(TILE_ELEMENTS.div_ceil(plane_size)) {
            let e = UNIT_POS_X + t * plane_size;
            let value = staging[min(e, comptime!(TILE_ELEMENTS - 1)) as usize] * factor;
            write_element::<F>(out, base, row0, col0, rows_end, cols_end, e, value);
        }
        // The plane's next tile overwrites the staging area.
        sync_cube();
    }
}
