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
//!
//! A sliding window (`d - left <= j <= d + right`, `d = i + seq_kv - seq_q`) bounds the blocks
//! on both sides: the blocks left of row `q_start`'s window and right of row `q_last`'s are
//! skipped, and those in between take the masked pass (the left edge moves with the row).
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

/// The sliding window's first column for `row`: `clamp(d - left, 0, seq_kv)`.
#[cube]
pub fn window_start(row: u32, params: &ScoreParams) -> u32 {
    let reach = row + params.seq_kv;
    let bound = params.seq_q + params.window_left;
    min(select(reach > bound, reach - bound, 0u32), params.seq_kv)
}

/// The sliding window's end column for `row` (exclusive): `clamp(d + right + 1, 0, seq_kv)`.
#[cube]
pub fn window_end(row: u32, params: &ScoreParams) -> u32 {
    let reach = row + params.seq_kv + params.window_right + 1;
    min(
        select(reach > params.seq_q, reach - params.seq_q, 0u32),
        params.seq_kv,
    )
}

/// Where the keys row `row` may see end, by causal and the window (`seq_kv` without either).
#[cube]
pub fn row_kv_end(row: u32, params: &ScoreParams, #[comptime] options: ScoreOptions) -> u32 {
    let mut end = params.seq_kv;
    if comptime!(options.causal) {
        end = causal_end(row, params);
    }
    if comptime!(options.window) {
        end = min(end, window_end(row, params));
    }
    end
}

/// Causal: where the keys that rows `[first_row, first_row + rows)` (clipped to seq_q) see
/// end; every key from it on is masked for all of them, so a plane that owns those rows can
/// skip a straddling block its cube visits for other rows (its softmax state would not change:
/// alpha = 1, P = 0); the same for the window's right edge. Without either: seq_kv.
#[cube]
pub fn rows_kv_end(
    first_row: u32,
    #[comptime] rows: u32,
    params: &ScoreParams,
    #[comptime] options: ScoreOptions,
) -> u32 {
    row_kv_end(min(first_row + rows, params.seq_q) - 1, params, options)
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
    if comptime!(options.causal) {
        first_masked = min(first_masked, causal_end(q_start, params) / block_kv);
    }
    if comptime!(options.masks_everywhere()) {
        first_masked = 0u32;
    }
    let mut start = 0u32;
    if comptime!(options.window) {
        start = window_start(q_start, params) / block_kv;
    }
    // Rows that see nothing (seq_q > seq_kv under causal, a window past the keys) give an
    // empty span.
    let end = max(
        row_kv_end(q_last, params, options).div_ceil(block_kv),
        start,
    );
    BlockSpan {
        start,
        first_masked: min(max(first_masked, start), end),
        end,
    }
}

/// The query blocks a key/value block starting at `kv_start` is seen by start at this row:
/// with causal masking (bottom-right) row `i` sees column `j` iff `j + seq_q <= i + seq_kv`, so
/// rows below `kv_start + seq_q - seq_kv` see none of the block (with a window, below
/// `kv_start + seq_q - seq_kv - right`); 0 without either.
#[cube]
pub fn first_query_row(
    kv_start: u32,
    params: &ScoreParams,
    #[comptime] options: ScoreOptions,
) -> u32 {
    let mut first_row = 0u32;
    if comptime!(options.causal || options.window) {
        let mut right = 0u32;
        if comptime!(!options.causal) {
            right = params.window_right;
        }
        let reach = kv_start + params.seq_q;
        let bound = params.seq_kv + right;
        first_row = select(reach > bound, reach - bound, 0u32);
    }
    first_row
}

/// The query blocks that see the key/value block starting at `kv_start`: from
/// [`first_query_row`]'s block to the last block of a row whose window reaches the block's
/// last key (`i <= kv_last + left + seq_q - seq_kv`), or every block without a window. The
/// masked pass is the body's choice per block ([`pair_needs_masked_pass`]): `first_masked`
/// is `end`.
#[cube]
pub fn query_block_span(
    kv_start: u32,
    params: &ScoreParams,
    #[comptime] block_q: u32,
    #[comptime] block_kv: u32,
    #[comptime] options: ScoreOptions,
) -> BlockSpan {
    let start = first_query_row(kv_start, params, options) / block_q;
    let mut rows_end = params.seq_q;
    if comptime!(options.window) {
        let kv_last = min(kv_start + block_kv, params.seq_kv) - 1;
        let reach = kv_last + params.window_left + params.seq_q + 1;
        rows_end = min(
            select(reach > params.seq_kv, reach - params.seq_kv, 0u32),
            params.seq_q,
        );
    }
    let end = max(rows_end.div_ceil(block_q), start);
    BlockSpan {
        start,
        first_masked: end,
        end,
    }
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
        first_masked = range.start;
    }
    BlockSpan {
        start: range.start,
        first_masked,
        end: range.end,
    }
}

/// Whether some entry of the (query block, key/value block) pair starting at (`q_start`,
/// `kv_start`) may be masked: a tail block, an explicit mask, a causal pair whose top-right
/// entry (first query row, last key/value row) is hidden, or a window whose right edge hides
/// the top-right entry or whose left edge hides the bottom-left one (last query row, first key).
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
    if comptime!(options.window) {
        masked = masked
            || kv_end - 1 + params.seq_q > q_start + params.seq_kv + params.window_right
            || kv_start + params.seq_q + params.window_left < q_end - 1 + params.seq_kv;
    }
    if comptime!(options.has_mask) {
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

/// Host side: whether no block pair of a problem can take the masked pass, so that the mma
/// kernels may leave it out ([`super::block_stream::Masking::Never`]). True exactly when no
/// entry is masked for a reason other than a tail (no causal, window or bool mask: key padding
/// is a mask) and the blocks tile the sequences: the keys in `block_kv` rows, and the queries
/// in `block_q` rows where `block_q` is given (the gradient kernels, which also mask the query
/// tail; the forward bounds its query rows at the write). Under these conditions
/// [`kv_block_range`] (and its `_full_rows` form) puts `first_masked` at `end` and
/// [`pair_needs_masked_pass`] is false for every pair: the masked pass would run on no block.
pub fn never_masked(
    options: &ScoreOptions,
    seq_kv: usize,
    block_kv: u32,
    query_tiling: Option<(usize, u32)>,
) -> bool {
    let tiles = |seq: usize, block: u32| seq.is_multiple_of(block as usize);
    !(options.causal || options.masks_everywhere())
        && tiles(seq_kv, block_kv)
        && query_tiling.is_none_or(|(seq_q, block_q)| tiles(seq_q, block_q))
}
