//! The mma forward's per-lane query rows: their online-softmax state and O accumulators
//! ([`Rows`]), the plane's Q fragments (in registers or re-read from the shared tile), and the
//! softmax step of one row tile on the S accumulators.
use cubecl::prelude::*;

use crate::config::{MmaConfig, MATRIX_TILE};
use crate::primitives::mma::{
    A_REGS, ACC_REGS, BOTTOM_ROW, Lane, Pair, TILE_M, TILE_N, load_a, quad_max, zero_accumulators,
};
use crate::primitives::dropout::dropout_factor;
use crate::primitives::online_softmax::OnlineSoftmax;
use crate::primitives::precise_math::LOG2_E;
use crate::primitives::score::{MASKED_LOGIT, ScoreParams, ScoreTensors, softmax_input};

/// The running state of this lane's query rows: rows `group` and `group + 8` of each of the
/// plane's row tiles (`2 t` and `2 t + 1` for row tile `t`).
#[derive(CubeType)]
pub(super) struct Rows {
    /// Running maxima (see [`OnlineSoftmax`]).
    pub row_max: Array<f32>,
    /// Running sums, per lane until the end.
    pub row_sum: Array<f32>,
    /// O accumulators: row tile `t` holds tiles `[t val_tiles, (t + 1) val_tiles)`.
    pub acc: Array<Pair<f32>>,
}

#[cube]
impl Rows {
    pub fn new(#[comptime] row_tiles: u32, #[comptime] val_tiles: u32) -> Rows {
        let count = comptime!((2 * row_tiles) as usize);
        let mut row_max = Array::<f32>::new(count);
        let mut row_sum = Array::<f32>::new(count);
        #[unroll]
        for i in 0..count {
            let fresh = OnlineSoftmax::new();
            row_max[i] = fresh.row_max;
            row_sum[i] = fresh.row_sum;
        }
        Rows {
            row_max,
            row_sum,
            acc: zero_accumulators(comptime!(row_tiles * val_tiles)),
        }
    }

    /// The softmax statistics of row `i`.
    pub fn softmax(&self, #[comptime] i: u32) -> OnlineSoftmax {
        OnlineSoftmax {
            row_max: self.row_max[i as usize],
            row_sum: self.row_sum[i as usize],
        }
    }

    pub fn keep(&mut self, softmax: &OnlineSoftmax, #[comptime] i: u32) {
        self.row_max[i as usize] = softmax.row_max;
        self.row_sum[i as usize] = softmax.row_sum;
    }
}

/// The A fragment of the plane's row tile `t`, k-step `kk`, from the shared Q tile.
#[cube]
fn q_fragment<F: Float, N: Size>(
    q_tile: &SharedMemory<Vector<F, N>>,
    plane_row: u32,
    #[comptime] t: u32,
    kk: u32,
    #[comptime] config: MmaConfig,
) -> Array<Pair<F>> {
    load_a::<F, N>(q_tile, plane_row, comptime!(t * TILE_M), config.mma_head_stride(), kk)
}

/// The plane's Q A fragments, `[(t head_steps + kk) A_REGS ..]` for row tile `t` and k-step
/// `kk`, when they stay in registers (an unused single register otherwise).
#[cube]
pub(super) fn query_fragments<F: Float, N: Size>(
    q_tile: &SharedMemory<Vector<F, N>>,
    plane_row: u32,
    #[comptime] config: MmaConfig,
) -> Array<Pair<F>> {
    let head_steps = comptime!(config.head_dim_tile() / MATRIX_TILE);
    let row_tiles = comptime!(config.mma_row_tiles());
    let in_registers = comptime!(config.mma_q_in_registers());
    let count = comptime!(if in_registers {
        A_REGS * head_steps * row_tiles
    } else {
        1
    });
    let mut frags = Array::<Pair<F>>::new(count as usize);
    if comptime!(in_registers) {
        #[unroll]
        for t in 0..row_tiles {
            #[unroll]
            for kk in 0..head_steps {
                let frag = q_fragment::<F, N>(q_tile, plane_row, t, kk, config);
                #[unroll]
                for r in 0..A_REGS {
                    frags[((t * head_steps + kk) * A_REGS + r) as usize] = frag[r as usize];
                }
            }
        }
    }
    frags
}

/// The A fragments of k-step `kk` for every row tile (`[t A_REGS ..]`) from the shared Q tile;
/// `kk` may be known only at run time.
#[cube]
pub(super) fn query_tile_step<F: Float, N: Size>(
    q_tile: &SharedMemory<Vector<F, N>>,
    plane_row: u32,
    kk: u32,
    #[comptime] config: MmaConfig,
) -> Array<Pair<F>> {
    let row_tiles = comptime!(config.mma_row_tiles());
    let mut step = Array::<Pair<F>>::new(comptime!((A_REGS * row_tiles) as usize));
    #[unroll]
    for t in 0..row_tiles {
        let frag = q_fragment::<F, N>(q_tile, plane_row, t, kk, config);
        #[unroll]
        for r in 0..A_REGS {
            step[(t * A_REGS + r) as usize] = frag[r as usize];
        }
    }
    step
}

/// The A fragments of k-step `kk` for every row tile (`[t A_REGS ..]`), from registers or
/// from the shared Q tile.
#[cube]
pub(super) fn query_step<F: Float, N: Size>(
    q_frags: &Array<Pair<F>>,
    q_tile: &SharedMemory<Vector<F, N>>,
    plane_row: u32,
    #[comptime] kk: u32,
    #[comptime] config: MmaConfig,
) -> Array<Pair<F>> {
    let head_steps = comptime!(config.head_dim_tile() / MATRIX_TILE);
    let row_tiles = comptime!(config.mma_row_tiles());
    let mut step = Array::<Pair<F>>::new(comptime!((A_REGS * row_tiles) as usize));
    #[unroll]
    for t in 0..row_tiles {
        if comptime!(config.mma_q_in_registers()) {
            #[unroll]
            for r in 0..A_REGS {
                step[(t * A_REGS + r) as usize] =
                    q_frags[((t * head_steps + kk) * A_REGS + r) as usize];
            }
        } else {
            let frag = q_fragment::<F, N>(q_tile, plane_row, t, kk, config);
            #[unroll]
            for r in 0..A_REGS {
                step[(t * A_REGS + r) as usize] = frag[r as usize];
            }
        }
    }
    step
}

/// Logits (raw dots with `fold_scale`, see [`crate::primitives::score::folds_scale`]), then
/// the online softmax of the top and bottom rows of row tile `t` (this lane's rows `top_row`
/// and `top_row + 8`), and the rescale of their O accumulators. Rows past
/// seq_q compute as the last row (reads stay in bounds) and are never written.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn softmax_row_tile<F: Float, M: Int>(
    s: &mut Array<Pair<f32>>,
    rows: &mut Rows,
    mask: &Tensor<M>,
    bias: &Tensor<F>,
    params: &ScoreParams,
    tensors: &ScoreTensors,
    kv_start: u32,
    top_row: u32,
    lane: Lane,
    #[comptime] t: u32,
    #[comptime] config: MmaConfig,
    #[comptime] masked_pass: bool,
) {
    let kv_tiles = comptime!(config.block_kv / TILE_N);
    let val_tiles = comptime!(config.val_dim_tile() / TILE_N);
    let first_s = comptime!(t * kv_tiles);
    let fold = comptime!(config.score.fold_scale);
    let top = min(top_row, params.seq_q - 1);
    let bottom = min(top_row + BOTTOM_ROW, params.seq_q - 1);
    let mut top_max = f32::new(MASKED_LOGIT);
    let mut bottom_max = top_max;
    #[unroll]
    for j in 0..kv_tiles {
        let col = kv_start + j * TILE_N + lane.quad * 2;
        let (at_upper, at_lower) = (
            ((first_s + j) * ACC_REGS) as usize,
            ((first_s + j) * ACC_REGS + 1) as usize,
        );
        let mut upper = s[at_upper];
        let mut lower = s[at_lower];
        #[unroll]
        for e in 0..2u32 {
            let (at, column) = (e as usize, col + e);
            upper[at] = softmax_input::<F, M>(
                upper[at],
                top,
                column,
                params,
                tensors,
                mask,
                bias,
                config.score,
                masked_pass,
            );
            lower[at] = softmax_input::<F, M>(
                lower[at],
                bottom,
                column,
                params,
                tensors,
                mask,
                bias,
                config.score,
                masked_pass,
            );
            top_max = max(top_max, upper[at]);
            bottom_max = max(bottom_max, lower[at]);
        }
        s[at_upper] = upper;
        s[at_lower] = lower;
    }
    let mut top_softmax = rows.softmax(comptime!(2 * t));
    let mut bottom_softmax = rows.softmax(comptime!(2 * t + 1));
    // Folded scale: maxima are raw dots, P = 2^fma(dot, scale log2 e, -scale log2 e max).
    let log2_scale = params.scale * LOG2_E;
    let (top_block, bottom_block) = (quad_max(top_max), quad_max(bottom_max));
    let mut rescale = true;
    if comptime!(fold) {
        // Lazy rescaling (FA-4's): the running maxima, and with them O and the sums, move only
        // when a row's block maximum passes its running one by more than 2^LAZY_RESCALE_LOG2
        // for some row of the plane (a plane-uniform branch); otherwise P is taken against
        // the stale maxima (each P at most 2^8, exact in f32 and in the mma's input types).
        rescale = plane_any(
            top_softmax.outgrown_scaled(top_block, log2_scale)
                || bottom_softmax.outgrown_scaled(bottom_block, log2_scale),
        );
    }
    if rescale {
        let (top_alpha, bottom_alpha) = if comptime!(fold) {
            (
                top_softmax.rescale_scaled(top_block, log2_scale),
                bottom_softmax.rescale_scaled(bottom_block, log2_scale),
            )
        } else {
            (
                top_softmax.rescale(top_block, false),
                bottom_softmax.rescale(bottom_block, false),
            )
        };
        let first_o = comptime!(t * val_tiles);
        #[unroll]
        for j in 0..val_tiles {
            let (upper, lower) = (
                ((first_o + j) * ACC_REGS) as usize,
                ((first_o + j) * ACC_REGS + 1) as usize,
            );
            rows.acc[upper] = rows.acc[upper] * Pair::<f32>::new(top_alpha);
            rows.acc[lower] = rows.acc[lower] * Pair::<f32>::new(bottom_alpha);
        }
    }
    let top_shift = top_softmax.row_max * log2_scale;
    let bottom_shift = bottom_softmax.row_max * log2_scale;
    let mut top_sum = 0.0f32;
    let mut bottom_sum = 0.0f32;
    #[unroll]
    for j in 0..kv_tiles {
        let (at_upper, at_lower) = (
            ((first_s + j) * ACC_REGS) as usize,
            ((first_s + j) * ACC_REGS + 1) as usize,
        );
        let mut upper = s[at_upper];
        let mut lower = s[at_lower];
        #[unroll]
        for e in 0..2u32 {
            let at = e as usize;
            if comptime!(fold) {
                upper[at] =
                    top_softmax.probability_scaled(upper[at], log2_scale, top_shift, masked_pass);
                lower[at] = bottom_softmax.probability_scaled(
                    lower[at],
                    log2_scale,
                    bottom_shift,
                    masked_pass,
                );
            } else {
                upper[at] = top_softmax.probability(upper[at], masked_pass, false);
                lower[at] = bottom_softmax.probability(lower[at], masked_pass, false);
            }
            top_sum += upper[at];
            bottom_sum += lower[at];
            if comptime!(config.score.dropout) {
                // After the row sums (which take P undropped), before P meets V.
                let column = kv_start + j * TILE_N + lane.quad * 2 + e;
                upper[at] *= dropout_factor(top, column, params);
                lower[at] *= dropout_factor(bottom, column, params);
            }
        }
        s[at_upper] = upper;
        s[at_lower] = lower;
    }
    top_softmax.accumulate(top_sum);
    bottom_softmax.accumulate(bottom_sum);
    rows.keep(&top_softmax, comptime!(2 * t));
    rows.keep(&bottom_softmax, comptime!(2 * t + 1));
}
