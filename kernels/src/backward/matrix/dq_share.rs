//! The one pass's share of the matrix dK/dV kernel: each block pair's `dS K`, added to the f32
//! dQ accumulator with atomic adds (see the parent module).
use cubecl::prelude::*;

use crate::backward::config::MatrixGradientConfig;
use crate::backward::dq_sink::{DqSink, Quad};
use crate::config::MATRIX_TILE;
use crate::primitives::tile_mma::{TileLayout, TileMma};

use super::tiles::{PairTiles, TILE_ELEMENTS, chain};

/// The one pass's dQ share of a block pair, `dS K` for the block's `block_q` query rows (f32,
/// without the scale), added to `dq_acc` (contiguous `[batch, num_heads, seq_q, head_dim]`) with
/// atomic adds. Its 16x16 tiles are dealt round-robin to the planes; each is chained over the
/// block's keys, stored to the plane's 16x16 part of S's tile, then added by the plane's lanes,
/// 4 adjacent columns per request where head_dim is a multiple of 4, else one. Rows past
/// seq_q and columns past head_dim are not added. Every plane reaches every sync.
#[cube]
pub(super) fn add_dq_share<E: Float, T: TileMma, D: DqSink>(
    dq_acc: &mut Tensor<D::Acc>,
    tiles: &mut PairTiles<E>,
    q_start: u32,
    seq_q: u32,
    #[comptime] config: MatrixGradientConfig,
) {
    let head_dim = comptime!(config.head_dim);
    let col_tiles = comptime!(config.head_dim_tile() / MATRIX_TILE);
    let count = comptime!((config.block_q / MATRIX_TILE) * col_tiles);
    let planes = comptime!(config.planes());
    let (k_stride, prob_stride) = comptime!((config.head_stride(), config.prob_stride()));
    let plane_size = comptime!(config.plane_size);
    let quads = comptime!(TILE_ELEMENTS / 4);
    // This (batch, head)'s first accumulator element.
    let base = CUBE_POS_Y as usize * seq_q as usize * head_dim as usize;
    let own = (UNIT_POS_Y * TILE_ELEMENTS) as usize;
    let len = tiles.s.len();
    for round in 0..comptime!(count.div_ceil(planes)) {
        let t = UNIT_POS_Y + round * planes;
        // A plane without a tile this round recomputes the last one and adds nothing.
        let tile = min(t, comptime!(count - 1));
        let (i, n) = (tile / col_tiles, tile % col_tiles);
        let mut acc = T::zero(plane_size);
        chain::<E, T>(
            &mut acc,
            &tiles.ds,
            i * MATRIX_TILE * prob_stride,
            MATRIX_TILE,
            TileLayout::RowMajor,
            prob_stride,
            &tiles.k,
            n * MATRIX_TILE,
            comptime!(MATRIX_TILE * k_stride),
            TileLayout::RowMajor,
            k_stride,
            comptime!(config.block_kv / MATRIX_TILE),
            plane_size,
        );
        T::store(&acc, &mut tiles.s.slice_mut(own, len), MATRIX_TILE, plane_size);
        sync_cube();
        if t < count {
            if comptime!(head_dim.is_multiple_of(4)) {
                for step in 0..comptime!(quads.div_ceil(plane_size)) {
                    let quad = UNIT_POS_X + step * plane_size;
                    // 16 columns per tile row: a quad never straddles two rows.
                    let e = quad * 4;
                    let row = q_start + i * MATRIX_TILE + e / MATRIX_TILE;
                    let col = n * MATRIX_TILE + e % MATRIX_TILE;
                    if quad < quads && row < seq_q && col < head_dim {
                        let from = own + e as usize;
                        let mut value = Quad::<f32>::new(0.0f32);
                        #[unroll]
                        for c in 0..4usize {
                            value[c] = tiles.s[from + c];
                        }
                        // The quad's index: head_dim and col are multiples of 4.
                        D::add_quad(dq_acc, (base + (row * head_dim + col) as usize) / 4, value);
                    }
                }
            } else {
                // One element per lane and step: fewer live scalars than guarded quads (the
                // all-options kernel at head dim 33 spilled SGPRs on gfx942 with them).
                for step in 0..comptime!(TILE_ELEMENTS.div_ceil(plane_size)) {
                    let e = UNIT_POS_X + step * plane_size;
                    let row = q_start + i * MATRIX_TILE + e / MATRIX_TILE;
                    let col = n * MATRIX_TILE + e % MATRIX_TILE;
                    if e < TILE_ELEMENTS && row < seq_q && col < head_dim {
                        D::add(dq_acc, base + (row * head_dim + col) as usize, tiles.s[own + e as usize]);
                    }
                }
            }
        }
        // The plane's staging tile is rewritten by the next round.
        sync_cube();
    }
}
