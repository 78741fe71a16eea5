//! The mma backward path: dK/dV and dQ on register-level `mma` (see
//! [`crate::primitives::mma`] for the fragment layout), FlashAttention-2's Algorithm 2.
//!
//! Both kernels give each plane 16 rows of the outer block and keep its gradient accumulators
//! in registers; the inner block streams through shared memory in 16-byte chunks, by
//! `cp.async` where the device has it ([`crate::primitives::pair_stream`]).
//!
//! dK/dV (outer: key/value rows, inner: query blocks). Per query block, for the plane's 16
//! key rows, everything transposed so that the key row is the accumulator row:
//! ```text
//! S^T  = K Q^T        P^T = exp(S^T - lse)       (lse, delta per column)
//! dP^T = V dO^T       dS^T = P^T ∘ (dP^T - delta) ∘ softcap'
//! dV  += P^T dO       dK  += dS^T Q              (P^T, dS^T: accumulators reused as A)
//! ```
//! dQ (outer: query rows, inner: key/value blocks):
//! ```text
//! S = Q K^T   P = exp(S - lse)   dP = dO V^T   dS = P ∘ (dP - delta) ∘ softcap'   dQ += dS K
//! ```
//! dK and dQ are multiplied by `scale` once, when written. Every sum runs in a fixed order
//! (no atomics): reruns are bit-identical. P and dS are rounded to the input type before their
//! products, as FA-2 does (and as the tolerance rule's plain implementation does).
use cubecl::prelude::*;

use crate::primitives::dropout::dropout_factor;
use crate::primitives::chunk_io::chunk_tile;
use crate::primitives::mma::{BOTTOM_ROW, Lane, Pair, store_accumulator_row};
use crate::primitives::precise_math::{LOG2_E, exp_f32, exp2_fast};
use crate::primitives::score::{
    ScoreParams, ScoreTensors, is_masked_logit, scaled_logit, score, softcap_derivative, visible,
};

use super::config::{BackwardKernel, MmaGradientConfig};
use crate::primitives::block_stream::{Masking, StreamSchedule, Streams};

mod chunked_grads;
mod dkdv;
mod dkdv_block;
mod dkdv_launch;
mod dq;
mod dq_share;
mod query_stats;

pub use dkdv::dkdv_mma_kernel;
pub use dkdv_launch::flash_attention_backward_dkdv_mma;
pub(crate) use dkdv_launch::launch_dkdv_dq_mma;
pub use dq::{dq_mma_kernel, flash_attention_backward_dq_mma};

/// The chunked shared-memory tiles of one block pair; the inner block's (dK/dV: Q and dO,
/// dQ: K and V) hold `config.buffers` blocks, one after the other.
#[derive(CubeType)]
pub(super) struct PairTiles<F: Float, N: Size> {
    /// `[block_q (x buffers), head stride]`.
    pub(super) q: SharedMemory<Vector<F, N>>,
    /// `[block_q (x buffers), val stride]`.
    pub(super) d_out: SharedMemory<Vector<F, N>>,
    /// `[block_kv (x buffers), head stride]`.
    pub(super) k: SharedMemory<Vector<F, N>>,
    /// `[block_kv (x buffers), val stride]`.
    pub(super) v: SharedMemory<Vector<F, N>>,
}

#[cube]
pub(super) fn pair_tiles<F: Float, N: Size>(#[comptime] config: MmaGradientConfig) -> PairTiles<F, N> {
    let (q_rows, kv_rows) = comptime!(match config.kernel {
        BackwardKernel::KeyValue => (config.buffers * config.block_q, config.block_kv),
        BackwardKernel::Query => (config.block_q, config.buffers * config.block_kv),
    });
    PairTiles::<F, N> {
        q: chunk_tile::<F, N>(q_rows, config.mma_head_stride()),
        d_out: chunk_tile::<F, N>(q_rows, config.mma_val_stride()),
        k: chunk_tile::<F, N>(kv_rows, config.mma_head_stride()),
        v: chunk_tile::<F, N>(kv_rows, config.mma_val_stride()),
    }
}

/// A query row's lse as [`p_and_ds`] takes it: times log2 e where the scale folds into the
/// exponential (`fold_scale`: P is a power of two, [`exp2_fast`]), as the forward wrote it
/// otherwise. A fully masked row's stand-in (f32::MAX) becomes +inf: P is still 0.
#[cube]
pub(super) fn softmax_lse(lse: f32, #[comptime] config: MmaGradientConfig) -> f32 {
    if comptime!(config.score.fold_scale) {
        lse * LOG2_E
    } else {
        lse
    }
}

/// P and dS of one score entry from its raw dot product, its dP, and its row's lse
/// ([`softmax_lse`]) and delta; both exactly 0 where masked (and for rows that see nothing: lse =
/// f32::MAX). With dropout the P returned is the dropped one (what multiplied V: dV's factor) and
/// `dS = P * (dP * z - delta)`, `z` the entry's dropout factor.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn p_and_ds<F: Float, M: Int>(
    dot: f32,
    dp: f32,
    row_lse: f32,
    row_delta: f32,
    row: u32,
    col: u32,
    params: &ScoreParams,
    tensors: &ScoreTensors,
    mask: &Tensor<M>,
    bias: &Tensor<F>,
    #[comptime] config: MmaGradientConfig,
    #[comptime] masked_pass: bool,
) -> (f32, f32) {
    let p = if comptime!(config.score.fold_scale) {
        // The logit is dot * scale and `row_lse` in log2 units ([`softmax_lse`]): one fma and
        // a power of two.
        let p = exp2_fast(fma(dot, params.scale * LOG2_E, -row_lse));
        if comptime!(masked_pass) {
            let shown = visible::<M>(row, col, params, tensors, mask, config.score, true);
            select(shown, p, 0.0f32)
        } else {
            p
        }
    } else {
        let logit = score::<F, M>(
            dot,
            row,
            col,
            params,
            tensors,
            mask,
            bias,
            config.score,
            masked_pass,
        );
        let p = exp_f32(logit - row_lse, false);
        if comptime!(masked_pass) {
            select(is_masked_logit(logit), 0.0f32, p)
        } else {
            p
        }
    };
    let capped = scaled_logit(dot, params, config.score);
    let mut z = 1.0f32;
    if comptime!(config.score.dropout) {
        z = dropout_factor(row, col, params);
    }
    let ds = p * (dp * z - row_delta) * softcap_derivative(capped, params, config.score);
    (p * z, ds)
}

/// Writes this lane's two rows (`row`, `row + 8`) of a gradient accumulated as `dim / 8`
/// tiles, times `factor`; rows at or past `rows` and columns past `dim` are not written.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn write_rows<F: Float>(
    out: &mut Tensor<F>,
    acc: &Array<Pair<f32>>,
    batch: u32,
    head: u32,
    row: u32,
    lane: Lane,
    rows: u32,
    factor: f32,
    #[comptime] dim: u32,
) {
    let base = batch as usize * out.stride(0) + head as usize * out.stride(1);
    if row < rows {
        store_accumulator_row::<F>(out, acc, base, row, lane, factor, 0u32, 0u32, dim);
    }
    if row + BOTTOM_ROW < rows {
        store_accumulator_row::<F>(
            out,
            acc,
            base,
            row + BOTTOM_ROW,
            lane,
            factor,
            0u32,
            1u32,
            dim,
        );
    }
}

/// One stream of inner blocks: with two buffers the next one is prefetched into the other,
/// with one each block is loaded and waited for before it computes; the masked pass is chosen
/// per block pair, or left out where the planner proved no pair needs it.
impl Streams for MmaGradientConfig {
    fn schedule(&self) -> StreamSchedule {
        StreamSchedule {
            rows: self.inner_rows(),
            buffers: self.buffers,
            prefetch: self.buffers > 1,
            masking: if self.never_masked { Masking::Never } else { Masking::PerBlock },
            first_started: false,
        }
    }
}
