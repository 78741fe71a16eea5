//! What dK/dV and dQ share: the shared-memory tiles of one (query block, key/value block) pair
//! and the recomputation of `P` and `dS` on it (FlashAttention-2, Algorithm 2, lines 11-14):
//!
//! ```text
//! S  = logits(Q K^T)          the shared transform of primitives::score
//! P  = exp(S - lse)           0 exactly where masked
//! dP = dO V^T
//! dS = P ∘ (dP - delta) ∘ (1 - tanh²)   the last factor only with softcap
//! ```
//! `dS` is the gradient with respect to the scaled dot product divided by `scale`: the callers
//! multiply their accumulated `dS K` / `dS^T Q` by `scale` once, when they write.
use cubecl::prelude::*;

use crate::primitives::arena::carve;
use crate::primitives::dropout::dropout_factor;
use crate::primitives::score::{
    ScoreOptions, ScoreParams, ScoreTensors, is_masked_logit, scaled_logit, score,
    softcap_derivative,
};
use crate::primitives::tile_io::{head_view, load_tile, row_stat};

use super::config::PortableGradientConfig;

/// The f32 shared-memory tiles of one block pair, row-major: views of one shared allocation
/// laid out by [`PortableGradientConfig::tile_layout`].
#[derive(CubeType)]
pub struct BlockPairTiles {
    /// `[block_q, head_dim_tile]`.
    pub q: Slice<f32, ReadWrite>,
    /// `[block_q, val_dim_tile]`.
    pub d_out: Slice<f32, ReadWrite>,
    /// `[block_kv, head_dim_tile]`.
    pub k: Slice<f32, ReadWrite>,
    /// `[block_kv, val_dim_tile]`.
    pub v: Slice<f32, ReadWrite>,
    /// `[block_q, score_tile_cols]`: P (dK/dV kernel only; empty otherwise).
    pub p: Slice<f32, ReadWrite>,
    /// `[block_q, score_tile_cols]`: dS.
    pub ds: Slice<f32, ReadWrite>,
    /// `[block_q]`: the forward's log-sum-exp of each query row.
    pub lse: Slice<f32, ReadWrite>,
    /// `[block_q]`: `rowsum(d_out ∘ o)` of each query row.
    pub delta: Slice<f32, ReadWrite>,
}

/// Where a block pair sits inside its (batch, head).
#[derive(CubeType, Clone, Copy)]
pub struct BlockPair {
    pub batch: u32,
    /// The query head (of q, d_out, the mask, the bias and the gradients' rows).
    pub head: u32,
    /// The key/value head it reads (`head / (num_heads / num_kv_heads)`).
    pub kv_head: u32,
    /// First query row of the pair.
    pub q_start: u32,
    /// First key/value row of the pair.
    pub kv_start: u32,
}

#[cube]
pub fn new_tiles(#[comptime] config: PortableGradientConfig) -> BlockPairTiles {
    let layout = comptime!(config.tile_layout());
    let mut arena = SharedMemory::<f32>::new(comptime!(layout.len));
    BlockPairTiles {
        q: carve(&mut arena, layout.q),
        d_out: carve(&mut arena, layout.d_out),
        k: carve(&mut arena, layout.k),
        v: carve(&mut arena, layout.v),
        p: carve(&mut arena, layout.p),
        ds: carve(&mut arena, layout.ds),
        lse: carve(&mut arena, layout.lse),
        delta: carve(&mut arena, layout.delta),
    }
}

/// Row and column of element `UNIT_POS + t * units` of a row-major `[rows, dim]` block, the
/// `t`-th element a unit accumulates (`t` from an unrolled loop). Past the block (the last
/// unit's remainder) it is clamped onto an element of the block's last row, whose sum the
/// caller never writes.
///
/// Where `units` is a multiple of `dim` (or `dim` of `units`) the column is the same for every
/// `t` (or `UNIT_POS` plus a constant) and the row a constant step: the tile addresses become
/// one register plus immediate offsets. Through `e / dim, e % dim` LLVM hoists one address
/// per `t` and tile out of the query loop instead, all of them live through it: on gfx942, 6
/// one-pass dK/dV variants spilled that way (docs/HIP.md, gap 2). The one-pass dK/dV kernel
/// keeps the division where `units == dim` (`accumulated_element` there: measured better).
#[cube]
pub fn unit_element(t: u32, #[comptime] rows: u32, #[comptime] dim: u32, #[comptime] units: u32) -> (u32, u32) {
    let total = comptime!(rows * dim);
    if comptime!(units.is_multiple_of(dim)) {
        let row = UNIT_POS / dim + t * comptime!(units / dim);
        if comptime!(total.is_multiple_of(units)) {
            (row, UNIT_POS % dim)
        } else {
            // Clamped rows of the last unit: the last row, the column unchanged (in the block).
            (min(row, comptime!(rows - 1)), UNIT_POS % dim)
        }
    } else if comptime!(dim.is_multiple_of(units)) {
        // `t * units` stays inside one row for `dim / units` steps: constant row and offset.
        let offset = t * units;
        (offset / dim, UNIT_POS + offset % dim)
    } else {
        let e = min(UNIT_POS + t * units, comptime!(total - 1));
        (e / dim, e % dim)
    }
}

/// Loads Q, dO, lse and delta of the query block starting at `pair.q_start`. Rows past seq_q
/// are zeros (their entries are masked). The caller synchronizes before reading.
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn load_query_block<F: Float>(
    q: &Tensor<F>,
    d_out: &Tensor<F>,
    lse: &Tensor<f32>,
    delta: &Tensor<f32>,
    tiles: &mut BlockPairTiles,
    pair: &BlockPair,
    #[comptime] config: PortableGradientConfig,
) {
    let units = config.units;
    load_tile::<F, f32>(
        q,
        &head_view(q, pair.batch, pair.head),
        &mut tiles.q,
        pair.q_start,
        config.block_q,
        config.head_dim,
        config.head_dim_tile(),
        units,
    );
    load_tile::<F, f32>(
        d_out,
        &head_view(d_out, pair.batch, pair.head),
        &mut tiles.d_out,
        pair.q_start,
        config.block_q,
        config.val_dim,
        config.val_dim_tile(),
        units,
    );
    let row = pair.q_start + UNIT_POS;
    if UNIT_POS < config.block_q {
        tiles.lse[UNIT_POS as usize] = row_stat(lse, pair.batch, pair.head, row);
        tiles.delta[UNIT_POS as usize] = row_stat(delta, pair.batch, pair.head, row);
    }
}

/// Loads K and V of the key/value block starting at `pair.kv_start`. Rows past seq_kv are
/// zeros (their entries are masked). The caller synchronizes before reading.
#[cube]
pub fn load_kv_block<F: Float>(
    k: &Tensor<F>,
    v: &Tensor<F>,
    tiles: &mut BlockPairTiles,
    pair: &BlockPair,
    #[comptime] config: PortableGradientConfig,
) {
    load_tile::<F, f32>(
        k,
        &head_view(k, pair.batch, pair.kv_head),
        &mut tiles.k,
        pair.kv_start,
        config.block_kv,
        config.head_dim,
        config.head_dim_tile(),
        config.units,
    );
    load_tile::<F, f32>(
        v,
        &head_view(v, pair.batch, pair.kv_head),
        &mut tiles.v,
        pair.kv_start,
        config.block_kv,
        config.val_dim,
        config.val_dim_tile(),
        config.units,
    );
}

/// Recomputes P (when the config keeps it) and dS of the block pair into the tiles. Unit
/// `UNIT_POS` computes entries `UNIT_POS + t * units`; the entry `(i, j)` is `i * block_kv + j`,
/// so neighbouring units read neighbouring K / V rows. `masked_pass` emits the tail, causal and
/// mask checks; without it the caller guarantees every entry is in bounds and visible.
/// The tiles must be loaded and synchronized; the caller synchronizes after.
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn recompute_p_and_ds<F: Float, M: Int>(
    mask: &Tensor<M>,
    bias: &Tensor<F>,
    params: &ScoreParams,
    tensors: &ScoreTensors,
    tiles: &mut BlockPairTiles,
    pair: &BlockPair,
    #[comptime] config: PortableGradientConfig,
    #[comptime] masked_pass: bool,
) {
    let dk = config.head_dim_tile();
    let dv = config.val_dim_tile();
    let score_cols = config.score_tile_cols();
    // Not unrolled: nothing here is indexed by `t`, and unrolled copies of the dot-product
    // loops multiply shader compile times (lavapipe's LLVM: minutes).
    for t in 0..config.entries_per_unit() {
        let entry = UNIT_POS + t * config.units;
        if entry < config.entries() {
            let i = entry / config.block_kv;
            let j = entry % config.block_kv;
            let mut dot = 0.0f32;
            for c in 0..config.head_dim {
                dot += tiles.q[(i * dk + c) as usize] * tiles.k[(j * dk + c) as usize];
            }
            let logit = score::<F, M>(
                dot,
                pair.q_start + i,
                pair.kv_start + j,
                params,
                tensors,
                mask,
                bias,
                config.score,
                masked_pass,
            );
            let mut p = 0.0f32;
            let mut ds = 0.0f32;
            // A masked entry gets P = 0 and dS = 0 exactly: its logit is a finite sentinel, and
            // the lse of a fully masked row is f32::MAX, so no exp or product here can give NaN.
            if !is_masked_logit(logit) {
                let mut dp = 0.0f32;
                for c in 0..config.val_dim {
                    dp += tiles.d_out[(i * dv + c) as usize] * tiles.v[(j * dv + c) as usize];
                }
                let (entry_p, entry_ds) = entry_p_and_ds(
                    logit,
                    dot,
                    dp,
                    tiles.lse[i as usize],
                    tiles.delta[i as usize],
                    pair.q_start + i,
                    pair.kv_start + j,
                    params,
                    config.score,
                );
                p = entry_p;
                ds = entry_ds;
            }
            let at = (i * score_cols + j) as usize;
            if comptime!(config.keeps_p()) {
                tiles.p[at] = p;
            }
            tiles.ds[at] = ds;
        }
    }
}

/// P and dS of one visible entry (row `row`, column `col` of the (batch, head)): `P =
/// exp(logit - lse)` and `dS = P ∘ (dP - delta)` times the softcap's derivative at the raw
/// `dot`; with dropout (factor `z`, 0 or 1 / keep) dV takes the dropped `P z` and `dS = P (dP
/// z - delta)`. Returns (the P that dV takes, dS).
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn entry_p_and_ds(
    logit: f32,
    dot: f32,
    dp: f32,
    lse: f32,
    delta: f32,
    row: u32,
    col: u32,
    params: &ScoreParams,
    #[comptime] options: ScoreOptions,
) -> (f32, f32) {
    let p = f32::exp(logit - lse);
    let capped = scaled_logit(dot, params, options);
    let mut z = 1.0f32;
    if comptime!(options.dropout) {
        z = dropout_factor(row, col, params);
    }
    let ds = p * (dp * z - delta) * softcap_derivative(capped, params, options);
    (p * z, ds)
}
