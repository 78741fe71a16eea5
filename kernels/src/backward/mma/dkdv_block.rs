//! One query block of the mma dK/dV kernel ([`super::dkdv`]) for a plane's 16 key rows: S^T
//! and dP^T on the accumulators, P^T and dS^T in place, dV += P^T dO and dK += dS^T Q, and on
//! the one pass dS^T into its buffer of the dS^T tile ([`super::dq_share`]).
use cubecl::prelude::*;

use crate::backward::config::MmaGradientConfig;
use crate::primitives::mma::{
    ACC_REGS, BOTTOM_ROW, Lane, Pair, TILE_N, accumulate_product, product_with_rows,
};
use crate::primitives::score::{ScoreParams, ScoreTensors};

use super::dq_share::{ds_buffer_row, store_ds_rows};
use super::{PairTiles, p_and_ds};

/// One query block of the dK/dV kernel for this plane's 16 key rows (`key_row`: this lane's
/// first, inside the (batch, head)).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn accumulate_dkdv<F: Float, M: Int, N: Size>(
    mask: &Tensor<M>,
    bias: &Tensor<F>,
    params: &ScoreParams,
    tensors: &ScoreTensors,
    tiles: &PairTiles<F, N>,
    lse_tile: &SharedMemory<f32>,
    delta_tile: &SharedMemory<f32>,
    q_start: u32,
    tile_row: u32,
    key_row: u32,
    plane_row: u32,
    lane: Lane,
    dk_acc: &mut Array<Pair<f32>>,
    dv_acc: &mut Array<Pair<f32>>,
    ds_tile: &mut SharedMemory<Pair<F>>,
    #[comptime] config: MmaGradientConfig,
    #[comptime] masked_pass: bool,
) {
    let q_tiles = comptime!(config.block_q / TILE_N);
    let (head_steps, val_steps) = comptime!((config.mma_head_steps(), config.mma_val_steps()));
    // S^T = K Q^T and dP^T = V dO^T, one 16 x 8 tile per 8 query rows.
    let (hs, vs) = comptime!((config.mma_head_stride(), config.mma_val_stride()));
    let mut st = product_with_rows::<F, N>(
        &tiles.k, plane_row, &tiles.q, tile_row, hs, head_steps, q_tiles, config.rolled_steps,
    );
    let mut dpt = product_with_rows::<F, N>(
        &tiles.v,
        plane_row,
        &tiles.d_out,
        tile_row,
        vs,
        val_steps,
        q_tiles,
        config.rolled_steps,
    );
    // P^T into st, dS^T into dpt. Entry (key row, query column): score(row = query, col = key).
    #[unroll]
    for j in 0..q_tiles {
        #[unroll]
        for h in 0..2u32 {
            let at = (j * ACC_REGS + h) as usize;
            let mut p = st[at];
            let mut ds = dpt[at];
            #[unroll]
            for e in 0..2u32 {
                let local = j * TILE_N + lane.quad * 2 + e;
                let (pe, dse) = p_and_ds::<F, M>(
                    p[e as usize],
                    ds[e as usize],
                    lse_tile[(tile_row + local) as usize],
                    delta_tile[(tile_row + local) as usize],
                    q_start + local,
                    key_row + h * BOTTOM_ROW,
                    params,
                    tensors,
                    mask,
                    bias,
                    config,
                    masked_pass,
                );
                p[e as usize] = pe;
                ds[e as usize] = dse;
            }
            st[at] = p;
            dpt[at] = ds;
        }
    }
    // dV += P^T dO, dK += dS^T Q: k runs over the block's query rows.
    accumulate_product::<F, N>(
        &st,
        &tiles.d_out,
        tile_row,
        vs,
        q_tiles,
        val_steps,
        1u32,
        dv_acc,
    );
    accumulate_product::<F, N>(
        &dpt, &tiles.q, tile_row, hs, q_tiles, head_steps, 1u32, dk_acc,
    );
    if comptime!(config.atomic_dq) {
        store_ds_rows::<F>(
            ds_tile,
            &dpt,
            ds_buffer_row(q_start / config.block_q, config) + plane_row,
            lane,
            config,
        );
    }
}
