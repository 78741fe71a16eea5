//! The dK/dV kernel's per-query-row statistics (the forward's lse and the preprocess's
//! delta) of a streamed query block: read into registers by the units that own a row, stored
//! into the stats tiles beside the block's Q and dO.
use cubecl::prelude::*;

use crate::primitives::tile_io::{StatView, view_row_stat};
use crate::backward::config::MmaGradientConfig;

use super::softmax_lse;

/// The lse (as [`super::p_and_ds`] takes it) and delta of one query row, on their way to the
/// stats tiles.
#[derive(CubeType, Clone, Copy)]
pub(super) struct QueryStats {
    pub lse: f32,
    pub delta: f32,
}

/// The lse and delta of query row `q_start + UNIT_POS` for the units that own a row of the
/// block (0 elsewhere and past seq_q), through views made before the loop.
#[cube]
pub(super) fn fetch_stats(
    lse: &Tensor<f32>,
    lse_view: &StatView,
    delta: &Tensor<f32>,
    delta_view: &StatView,
    q_start: u32,
    #[comptime] config: MmaGradientConfig,
) -> QueryStats {
    let mut stats = QueryStats {
        lse: 0.0f32,
        delta: 0.0f32,
    };
    if UNIT_POS < config.block_q {
        stats.lse = softmax_lse(view_row_stat(lse, lse_view, q_start + UNIT_POS), config);
        stats.delta = view_row_stat(delta, delta_view, q_start + UNIT_POS);
    }
    stats
}

/// Stores what [`fetch_stats`] read into the stats tiles, from tile row `tile_row` on.
#[cube]
pub(super) fn store_stats(
    lse_tile: &mut SharedMemory<f32>,
    delta_tile: &mut SharedMemory<f32>,
    tile_row: u32,
    stats: &QueryStats,
    #[comptime] config: MmaGradientConfig,
) {
    if UNIT_POS < config.block_q {
        lse_tile[(tile_row + UNIT_POS) as usize] = stats.lse;
        delta_tile[(tile_row + UNIT_POS) as usize] = stats.delta;
    }
}
