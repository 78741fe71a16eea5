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

use super::score::{ScoreOptions, ScoreParams};

/// Key/value blocks `[0, end)` are visited; `[0, first_masked)` take the unmasked pass and
/// `[first_masked, end)` the masked pass (`first_masked <= end`).
#[derive(CubeType, Clone, Copy)]
pub struct KvBlockRange {
    pub first_masked: u32,
    pub end: u32,
}

/// `clamp(row + 1 + seq_kv - seq_q, 0, seq_kv)` without unsigned underflow.
#[cube]
pub fn causal_end(row: u32, params: &ScoreParams) -> u32 {
    let reach = row + 1 + params.seq_kv;
    let end = select(reach > params.seq_q, reach - params.seq_q, 0u32);
    min(end, params.seq_kv)
}

/// The key/value blocks query block `q_block` (of `block_q` rows) visits.
#[cube]
pub fn kv_block_range(
    q_block: u32,
    params: &ScoreParams,
    #[comptime] block_q: u32,
    #[comptime] block_kv: u32,
    #[comptime] options: ScoreOptions,
) -> KvBlockRange {
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
    KvBlockRange {
        first_masked: min(first_masked, end),
        end,
    }
}
