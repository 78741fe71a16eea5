//! The mma forward's output: the normalized O rows and the log-sum-exp, written at the end.
use cubecl::prelude::*;

use crate::config::MmaConfig;
use crate::primitives::mma::{Lane, Pair, store_accumulator_row};
use crate::primitives::online_softmax::OnlineSoftmax;

/// Normalizes and writes row `row` (`half` 0: accumulator rows `group`, 1: `group + 8`, of
/// the row tile whose O accumulators start at tile `first_tile`) of O,
/// and its log-sum-exp from the first lane of the row group.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn write_row<F: Float>(
    o: &mut Tensor<F>,
    lse: &mut Tensor<f32>,
    acc: &Array<Pair<f32>>,
    softmax: &OnlineSoftmax,
    batch: u32,
    head: u32,
    row: u32,
    lane: Lane,
    #[comptime] first_tile: u32,
    #[comptime] half: u32,
    seq_q: u32,
    #[comptime] config: MmaConfig,
) {
    if row < seq_q {
        let base = batch as usize * o.stride(0) + head as usize * o.stride(1);
        let normalizer = if comptime!(config.quiet_softmax) {
            softmax.quiet_normalizer(false)
        } else {
            softmax.normalizer()
        };
        store_accumulator_row::<F>(
            o,
            acc,
            base,
            row,
            lane,
            normalizer,
            first_tile,
            half,
            config.val_dim,
        );
        if lane.quad == 0 {
            let at = batch as usize * lse.stride(0)
                + head as usize * lse.stride(1)
                + row as usize * lse.stride(2);
            lse[at] = if comptime!(config.quiet_softmax) {
                softmax.quiet_lse(false)
            } else {
                softmax.lse(false)
            };
        }
    }
}
