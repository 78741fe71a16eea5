//! [`StandIn`]: the scalar stand-in for a plane's cmma fragments (see the parent module).
use cubecl::prelude::*;

use crate::config::MATRIX_TILE;

use super::{TILE_ELEMENTS, TileLayout, TileMma, write_element};

/// The scalar stand-in: lane `l` owns elements `l + i * plane_size` of the tile (row-major),
/// each an f32 sum of the products in order.
pub struct StandIn;

#[cube]
impl TileMma for StandIn {
    type Acc = Array<f32>;

    fn zero(#[comptime] plane_size: u32) -> Array<f32> {
        let count = comptime!(TILE_ELEMENTS.div_ceil(plane_size));
        let mut acc = Array::<f32>::new(count as usize);
        for i in 0..count {
            acc[i as usize] = 0.0f32;
        }
        acc
    }

    fn execute<F: Float>(
        acc: &mut Array<f32>,
        a: &Slice<F>,
        #[comptime] a_layout: TileLayout,
        #[comptime] a_stride: u32,
        b: &Slice<F>,
        #[comptime] b_layout: TileLayout,
        #[comptime] b_stride: u32,
        #[comptime] plane_size: u32,
    ) {
        let count = comptime!(TILE_ELEMENTS.div_ceil(plane_size));
        let a_rows = comptime!(a_layout == TileLayout::RowMajor);
        let b_rows = comptime!(b_layout == TileLayout::RowMajor);
        // Not unrolled: lavapipe's LLVM takes minutes over unrolled copies of these loops.
        for i in 0..count {
            // Past the tile (plane sizes above 256 only) a lane recomputes its last element.
            let e = min(UNIT_POS_X + i * plane_size, comptime!(TILE_ELEMENTS - 1));
            let (r, c) = (e / MATRIX_TILE, e % MATRIX_TILE);
            // Straight into the accumulator, k after k: over a chain of tiles, one sequential
            // sum (as a plain implementation sums).
            let mut sum = acc[i as usize];
            for k in 0..MATRIX_TILE {
                let a_at = if comptime!(a_rows) { r * a_stride + k } else { k * a_stride + r };
                let b_at = if comptime!(b_rows) { k * b_stride + c } else { c * b_stride + k };
                sum += f32::cast_from(a[a_at as usize]) * f32::cast_from(b[b_at as usize]);
            }
            acc[i as usize] = sum;
        }
    }

    fn execute_rows<F: Float>(
        accs: &mut Sequence<Array<f32>>,
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
    ) {
        // No fragments to share: tile by tile.
        #[unroll]
        for r in 0..rows {
            #[unroll]
            for n in 0..count {
                Self::execute::<F>(
                    accs.index_mut((r * count + n) as usize),
                    &a.slice((r * a_step) as usize, a.len()),
                    a_layout,
                    a_stride,
                    &b.slice((n * b_step) as usize, b.len()),
                    b_layout,
                    b_stride,
                    plane_size,
                );
            }
        }
    }

    fn store(
        acc: &Array<f32>,
        out: &mut Slice<f32, ReadWrite>,
        #[comptime] out_stride: u32,
        #[comptime] plane_size: u32,
    ) {
        let count = comptime!(TILE_ELEMENTS.div_ceil(plane_size));
        for i in 0..count {
            let e = UNIT_POS_X + i * plane_size;
            if e < TILE_ELEMENTS {
                let (r, c) = (e / MATRIX_TILE, e % MATRIX_TILE);
                out[(r * out_stride + c) as usize] = acc[i as usize];
            }
        }
    }

    fn load(
        acc: &mut Array<f32>,
        from: &Slice<f32>,
        #[comptime] from_stride: u32,
        #[comptime] plane_size: u32,
    ) {
        let count = comptime!(TILE_ELEMENTS.div_ceil(plane_size));
        for i in 0..count {
            // Past the tile (plane sizes above 256 only) a lane reloads its last element.
            let e = min(UNIT_POS_X + i * plane_size, comptime!(TILE_ELEMENTS - 1));
            let (r, c) = (e / MATRIX_TILE, e % MATRIX_TILE);
            acc[i as usize] = from[(r * from_stride + c) as usize];
        }
    }

    fn write<F: Float>(
        acc: &Array<f32>,
        out: &mut Tensor<F>,
        base: usize,
        row0: u32,
        col0: u32,
        rows_end: u32,
        cols_end: u32,
        factor: f32,
        _staging: &mut Slice<f32, ReadWrite>,
        #[comptime] plane_size: u32,
    ) {
        // Each lane writes the elements it owns: no staging, no synchronization.
        for i in 0..comptime!(TILE_ELEMENTS.div_ceil(plane_size)) {
            let e = UNIT_POS_X + i * plane_size;
            write_element::<F>(out, base, row0, col0, rows_end, cols_end, e, acc[i as usize] * factor);
        }
    }
}
