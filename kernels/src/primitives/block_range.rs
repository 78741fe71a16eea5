//! Which key/value blocks a query block visits, and which of them need the masked pass.
//!
//! With causal masking (bottom-right aligned) row `i` sees columns `[0, causal_end(i))`, where
//! `causal_end(i) = clamp(i + 1 + seq_kv - seq_q, 0, seq_kv)`. Visibility grows with the row,
//! so for a query block with rows `[q_start, q_end)`:
//! - blocks past `causal_end(q_end - 1)` are fully masked: they are skipped, not computed;
//! - blocks inside `[0, causal_end(q_start))` are fully visible to every row of the block;
//! - the blocks in between straddle the diagonal and take the masked pass.
//!
//! A partial last key block (`seq_kv % block_kv != 0`) and an explicit mask also need the
//! masked pass.
use cubecl::prelude::*;

use super::block_stream::BlockSpan;
use super::score::{ScoreOptions, ScoreParams};

/// `clamp(row + 1 + seq_kv - seq_q, 0, seq_kv)` without unsigned underflow.
#[cube]
pub fn causal_end(row: u32, params: &ScoreParams) -> u32 {
    let reach = row + 1 + params.seq_kv;
    let end = select(reach > params.seq_q, reach - params.seq_q, 0u32);
    min(end, params.seq_kv)
}

/// Causal: where the keys that rows `[first_row, first_row + rows)` (clipped to seq_q) see
/// end; every key from it on is masked for all of them, so a plane that owns those rows can
/// skip a straddling block its cube visits for other rows (its softmax state would not change:
/// alpha = 1, P = 0). Without causal: seq_kv.
#[cube]
pub fn rows_kv_end(
    first_row: u32,
    #[comptime] rows: u32,
    params: &ScoreParams,
    #[comptime] options: ScoreOptions,
) -> u32 {
    let mut end = params.seq_kv;
    if comptime!(options.causal) {
        end = causal_end(min(first_row + rows, params.seq_q) - 1, params);
    }
    end
}

/// The key/value blocks query block `q_block` (of `block_q` rows) visits: `[0, end)`, the
/// unmasked pass on `[0, first_masked)`, the masked pass on `[first_masked, end)`.
#[cube]
pub fn kv_block_range(
    q_block: u32,
    params: &ScoreParams,
    #[comptime] block_q: u32,
    #[comptime] block_kv: u32,
    #[comptime] options: ScoreOptions,
) -> BlockSpan {
    let q_start = q_block * block_q;
    let q_last = min(q_start + block_q, params.seq_q) - 1;
    // Blocks entirely in bounds; a partial last block needs the bounds checks.
    let mut first_masked = params.seq_kv / block_kv;
    let mut kv_end = params.seq_kv;
    if comptime!(options.causal) {
        kv_end = causal_end(q_last, params);
        first_masked = min(first_masked, causal_end(q_start, params) / block_kv);
    }
    if comptime!(options.masks_everywhere()) {
        first_masked = 0u32;
    }
    let end = kv_end.div_ceil(block_kv);
    BlockSpan {
        start: 0u32,
        first_masked: min(first_masked, end),
        end,
    }
}

/// The query blocks a key/value block starting at `kv_start` is seen by start at this row:
/// with causal masking (bottom-right) row `i` sees column `j` iff `j + seq_q <= i + seq_kv`, so
/// rows below `kv_start + seq_q - seq_kv` see none of the block; 0 without causal.
#[cube]
pub fn first_query_row(
    kv_start: u32,
    params: &ScoreParams,
    #[comptime] options: ScoreOptions,
) -> u32 {
    let mut first_row = 0u32;
    if comptime!(options.causal) {
        let reach = kv_start + params.seq_q;
        first_row = select(reach > params.seq_kv, reach - params.seq_kv, 0u32);
    }
    first_row
}

/// [`kv_block_range`] for a kernel whose rows past seq_q must not take the unmasked pass (the
/// backward's dQ: those rows would read the mask and bias out of bounds): a partial query
/// block takes the masked pass everywhere.
#[cube]
pub fn kv_block_range_full_rows(
    q_block: u32,
    params: &ScoreParams,
    #[comptime] block_q: u32,
    #[comptime] block_kv: u32,
    #[comptime] options: ScoreOptions,
) -> BlockSpan {
    let range = kv_block_range(q_block, params, block_q, block_kv, options);
    let mut first_masked = range.first_masked;
    if q_block * block_q + block_q > params.seq_q {
        first_masked = 0u32;
    }
    BlockSpan {
        start: 0u32,
        first_masked,
        end: range.end,
    }
}

/// Whether some entry of the (query block, key/value block) pair starting at (`q_start`,
/// `kv_start`) may be masked: a tail block, an explicit mask, or a causal pair whose top-right
/// entry (first query row, last key/value row) is hidden.
#[cube]
pub fn pair_needs_masked_pass(
    q_start: u32,
    kv_start: u32,
    params: &ScoreParams,
    #[comptime] block_q: u32,
    #[comptime] block_kv: u32,
    #[comptime] options: ScoreOptions,
) -> bool {
    let q_end = q_start + block_q;
    let kv_end = kv_start + block_kv;
    let mut masked = q_end > params.seq_q || kv_end > params.seq_kv;
    if comptime!(options.causal) {
        masked = masked || kv_end - 1 + params.seq_q > q_start + params.seq_kv;
    }
    if comptime!(options.masks_everywhere()) {
        masked = true;
    }
    masked
}

/// The query block this cube handles, for a grid of one cube per query block along x. Causal:
/// the last query blocks see the most keys, and launching them first keeps the tail of the
/// grid short (FA-2 does the same); otherwise in order.
#[cube]
pub fn query_block_heaviest_first(#[comptime] causal: bool) -> u32 {
    let mut block = CUBE_POS_X;
    if comptime!(causal) {
        block = from_the_end(CUBE_POS_X, CUBE_COUNT_X);
    }
    block
}

/// Position `pos` of `count`, counted from the end (a function: with the builtins written
/// inline, rustc evaluates their placeholder constants and rejects the subtraction).
#[cube]
fn from_the_end(pos: u32, count: u32) -> u32 {
    count - 1 - pos
}
