//! The logit transform shared by the forward and backward kernels.
//!
//! # Contract
//!
//! Given the raw dot product `dot = q_i · k_j` (f32) of query row `i` and key row `j` of one
//! (batch, head), [`score`] returns the logit the softmax sees, in this order:
//!
//! 1. `s = dot * scale`
//! 2. softcap (if on): `s = softcap * tanh(s / softcap)`, BEFORE any masking (tanh to about
//!    1 ulp on every device: [`super::precise_math::tanh_f32`])
//! 3. masking: the entry is masked if `i >= seq_q` or `j >= seq_kv` (tails), if the bool mask is
//!    nonzero at `(i, j)` (`true` = masked, element type u8 or u32), when causal if
//!    `j > i + seq_kv - seq_q` (bottom-right alignment, see [`crate::problem`]), or outside the
//!    sliding window (`j < d - left` or `j > d + right`, `d = i + seq_kv - seq_q`).
//!    A masked entry returns exactly [`MASKED_LOGIT`]; the caller must give it `P = 0` exactly
//!    (compare with [`is_masked_logit`], never rely on `exp` underflow alone).
//! 4. bias (if on): `s += bias[i, j]`, AFTER masking (a masked entry stays masked); then ALiBi
//!    (if on): `s -= slope[head] * |d - j|`.
//!
//! Masking and bounds checks are only emitted when the comptime `masked_pass` flag is set: a
//! block that [`crate::primitives::block_range`] proves fully visible takes the unmasked pass.
//!
//! For the backward pass: `d s / d dot = scale * softcap_derivative(capped)` where `capped` is
//! the logit after step 2 (before bias): `1 - tanh^2 = 1 - (capped / softcap)^2`. Use
//! [`scaled_logit`] to recompute `capped` and [`softcap_derivative`] for the factor (1 without
//! softcap).
use cubecl::prelude::*;

use super::precise_math::tanh_f32;

/// Logit of a masked entry. Finite because WGSL cannot spell `-inf` (naga rejects the literal
/// and the kernel silently never runs), and so that `masked - masked` is 0, never `-inf - -inf`.
pub const MASKED_LOGIT: f32 = -f32::MAX;

/// Which logit modifiers are on: comptime, part of every kernel config that scores.
#[derive(Clone, Copy, Debug, Default, Hash, PartialEq, Eq)]
pub struct ScoreOptions {
    /// Bottom-right aligned causal mask.
    pub causal: bool,
    /// A bool mask tensor is read (`true` = masked).
    pub has_mask: bool,
    /// An additive bias tensor is read, after masking.
    pub has_bias: bool,
    /// `softcap * tanh(s / softcap)` on the scaled logits, before masking.
    pub has_softcap: bool,
    /// A sliding window ([`crate::problem::Window`]), its bounds in [`ScoreParams`].
    pub window: bool,
    /// ALiBi: `-slope[head] * |i + seq_kv - seq_q - j|` after the bias, the slope of this
    /// cube's head in [`ScoreTensors::alibi_slope`].
    pub alibi: bool,
    /// Dropout on the probabilities ([`super::dropout`]): P times the factor of its entry where
    /// it multiplies V (forward, dV) and where dP meets P (the backward's dS).
    pub dropout: bool,
    /// The logit is `dot * scale` alone with `scale > 0` (see [`folds_scale`]): the mma
    /// kernels fold the scale into their `exp` arguments. The other kernels ignore it.
    pub fold_scale: bool,
}

impl ScoreOptions {
    /// Whether some entries of a block may be masked for reasons other than tails and causal:
    /// the bool mask anywhere, the window's left edge (the kernels that split their blocks into
    /// one unmasked run then one masked run cannot put the left edge's blocks first).
    pub fn masks_everywhere(&self) -> bool {
        self.has_mask || self.window
    }
}

/// Runtime scalars of the logit transform.
#[derive(CubeType, CubeLaunch, Clone, Copy)]
pub struct ScoreParams {
    /// Multiplies `q · k`.
    pub scale: f32,
    /// The softcap value; ignored unless `ScoreOptions::has_softcap`.
    pub softcap: f32,
    pub seq_q: u32,
    pub seq_kv: u32,
    /// The window's bounds, each clamped to `seq_q + seq_kv` ([`crate::problem::Window::clamped`]);
    /// ignored unless `ScoreOptions::window`.
    pub window_left: u32,
    pub window_right: u32,
    /// Dropout ([`super::dropout`]): the seed's key, the threshold below which an entry is
    /// dropped, and `1 / (1 - p)`; ignored unless `ScoreOptions::dropout`.
    pub dropout_seed: u32,
    pub dropout_threshold: u32,
    pub dropout_scale: f32,
}

/// Where one (batch, head) of the mask and the bias start, and their row/column strides.
/// Unused fields are 0 when the tensor is absent.
#[derive(CubeType, Clone, Copy)]
pub struct ScoreTensors {
    pub mask_base: usize,
    pub mask_row_stride: usize,
    pub mask_col_stride: usize,
    pub bias_base: usize,
    pub bias_row_stride: usize,
    pub bias_col_stride: usize,
    /// The ALiBi slope of this cube's head (0 without ALiBi).
    pub alibi_slope: f32,
}

/// Steps 1 and 2 of the contract: `dot * scale`, then the softcap if on.
#[cube]
pub fn scaled_logit(dot: f32, params: &ScoreParams, #[comptime] options: ScoreOptions) -> f32 {
    let scaled = dot * params.scale;
    if comptime!(options.has_softcap) {
        // Always the ~1 ulp tanh: WGSL's built-in has no ulp bound, and CUDA's tanhf is no
        // single instruction either.
        params.softcap * tanh_f32(divide(scaled, params.softcap), true)
    } else {
        scaled
    }
}

/// `a / b` to about half an ulp on every device: WGSL's f32 division may be off by 2.5 ulp,
/// which `softcap * tanh(s / softcap)` multiplies by up to `softcap / |s|` in the logit. One
/// Newton step on the residual (exact through the FMA) corrects the quotient.
#[cube]
fn divide(a: f32, b: f32) -> f32 {
    let quotient = a / b;
    let residual = fma(-quotient, b, a);
    fma(residual, 1.0f32 / b, quotient)
}

/// `1 - tanh^2(s / softcap)` from the capped logit `softcap * tanh(s / softcap)`; 1 without
/// softcap. Multiply dS by it (and by `scale`) to get dS with respect to the raw dot.
#[cube]
pub fn softcap_derivative(
    capped: f32,
    params: &ScoreParams,
    #[comptime] options: ScoreOptions,
) -> f32 {
    if comptime!(options.has_softcap) {
        let tanh = capped / params.softcap;
        1.0 - tanh * tanh
    } else {
        f32::new(1.0)
    }
}

/// Bottom-right causal mask: `j > i + seq_kv - seq_q`, written without unsigned underflow
/// (`seq_q > seq_kv` makes `seq_kv - seq_q` negative).
#[cube]
pub fn causal_masked(row: u32, col: u32, params: &ScoreParams) -> bool {
    col + params.seq_q > row + params.seq_kv
}

/// The sliding window: `d - left <= col <= d + right` with `d = row + seq_kv - seq_q`, written
/// without unsigned underflow (every term moved to the side where it adds).
#[cube]
pub fn in_window(row: u32, col: u32, params: &ScoreParams) -> bool {
    col + params.seq_q + params.window_left >= row + params.seq_kv
        && col + params.seq_q <= row + params.seq_kv + params.window_right
}

/// Whether `logit` is the masked sentinel: such entries get `P = 0` exactly.
#[cube]
pub fn is_masked_logit(logit: f32) -> bool {
    logit == MASKED_LOGIT
}

/// Step 3 of the contract: whether entry `(row, col)` is visible (in bounds, not causally
/// masked, not masked by the bool mask). With `masked_pass = false` the caller guarantees it
/// is, and nothing is emitted.
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn visible<M: Int>(
    row: u32,
    col: u32,
    params: &ScoreParams,
    tensors: &ScoreTensors,
    mask: &Tensor<M>,
    #[comptime] options: ScoreOptions,
    #[comptime] masked_pass: bool,
) -> bool {
    let mut visible = true;
    if comptime!(masked_pass) {
        visible = row < params.seq_q && col < params.seq_kv;
        if comptime!(options.causal) {
            visible = visible && !causal_masked(row, col, params);
        }
        if comptime!(options.window) {
            visible = visible && in_window(row, col, params);
        }
        if comptime!(options.has_mask) {
            // Read only in bounds: the tails of a block lie outside the mask tensor.
            if visible {
                let at = tensors.mask_base
                    + row as usize * tensors.mask_row_stride
                    + col as usize * tensors.mask_col_stride;
                visible = mask[at] == M::from_int(0);
            }
        }
    }
    visible
}

/// The full transform of the contract. `row`/`col` are indices inside the (batch, head).
/// With `masked_pass = false` the caller guarantees the entry is in bounds and visible.
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn score<F: Float, M: Int>(
    dot: f32,
    row: u32,
    col: u32,
    params: &ScoreParams,
    tensors: &ScoreTensors,
    mask: &Tensor<M>,
    bias: &Tensor<F>,
    #[comptime] options: ScoreOptions,
    #[comptime] masked_pass: bool,
) -> f32 {
    let logit = scaled_logit(dot, params, options);
    let mut out = f32::new(MASKED_LOGIT);
    if visible::<M>(row, col, params, tensors, mask, options, masked_pass) {
        out = logit;
        if comptime!(options.has_bias) {
            let at = tensors.bias_base
                + row as usize * tensors.bias_row_stride
                + col as usize * tensors.bias_col_stride;
            out += f32::cast_from(bias[at]);
        }
        if comptime!(options.alibi) {
            out -= tensors.alibi_slope * diagonal_distance(row, col, params);
        }
    }
    out
}

/// `|row + seq_kv - seq_q - col|` as f32 (exact below 2^24), ALiBi's distance to the
/// bottom-right aligned diagonal.
#[cube]
pub fn diagonal_distance(row: u32, col: u32, params: &ScoreParams) -> f32 {
    let (down, right) = (row + params.seq_kv, col + params.seq_q);
    f32::cast_from(select(down > right, down - right, right - down))
}

/// Whether the logit is `dot * scale` alone (no softcap, no bias, no ALiBi: pass
/// `has_bias || alibi`) with `scale > 0`: then
/// `exp(logit - m) = exp(fma(dot, scale, -m))`, and a row's maximum logit is `scale` times
/// its maximum dot, so the mma kernels keep raw dots (one multiply less per entry). Decided on
/// the host (the scale is a runtime value), part of the kernels' comptime configs.
pub fn folds_scale(has_softcap: bool, has_bias: bool, scale: f64) -> bool {
    !has_softcap && !has_bias && scale > 0.0
}

/// With [`folds_scale`]: the raw `dot`, or [`MASKED_LOGIT`] where the entry is not visible.
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn masked_dot<M: Int>(
    dot: f32,
    row: u32,
    col: u32,
    params: &ScoreParams,
    tensors: &ScoreTensors,
    mask: &Tensor<M>,
    #[comptime] options: ScoreOptions,
    #[comptime] masked_pass: bool,
) -> f32 {
    select(
        visible::<M>(row, col, params, tensors, mask, options, masked_pass),
        dot,
        f32::new(MASKED_LOGIT),
    )
}

/// What the mma softmax keeps of entry `(row, col)`: with `fold_scale` the raw dot (or
/// [`MASKED_LOGIT`]), otherwise the full [`score`].
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn softmax_input<F: Float, M: Int>(
    dot: f32,
    row: u32,
    col: u32,
    params: &ScoreParams,
    tensors: &ScoreTensors,
    mask: &Tensor<M>,
    bias: &Tensor<F>,
    #[comptime] options: ScoreOptions,
    #[comptime] masked_pass: bool,
) -> f32 {
    if comptime!(options.fold_scale) {
        masked_dot::<M>(dot, row, col, params, tensors, mask, options, masked_pass)
    } else {
        score::<F, M>(
            dot,
            row,
            col,
            params,
            tensors,
            mask,
            bias,
            options,
            masked_pass,
        )
    }
}

/// Base offsets and strides of the mask and bias for one (batch, head), and the head's ALiBi
/// slope (from the f32 `[num_heads]` `slopes`); zeros when absent.
#[cube]
pub fn score_tensors<F: Float, M: Int>(
    mask: &Tensor<M>,
    bias: &Tensor<F>,
    slopes: &Tensor<f32>,
    batch: u32,
    head: u32,
    #[comptime] options: ScoreOptions,
) -> ScoreTensors {
    let mut tensors = ScoreTensors {
        mask_base: 0,
        mask_row_stride: 0,
        mask_col_stride: 0,
        bias_base: 0,
        bias_row_stride: 0,
        bias_col_stride: 0,
        alibi_slope: 0.0f32,
    };
    if comptime!(options.has_mask) {
        tensors.mask_base = batch as usize * mask.stride(0) + head as usize * mask.stride(1);
        tensors.mask_row_stride = mask.stride(2);
        tensors.mask_col_stride = mask.stride(3);
    }
    if comptime!(options.has_bias) {
        tensors.bias_base = batch as usize * bias.stride(0) + head as usize * bias.stride(1);
        tensors.bias_row_stride = bias.stride(2);
        tensors.bias_col_stride = bias.stride(3);
    }
    if comptime!(options.alibi) {
        tensors.alibi_slope = slopes[head as usize * slopes.stride(0)];
    }
    tensors
}

/// The runtime scalars of the logit transform for `problem`.
pub fn score_params<R: Runtime>(
    problem: &crate::problem::AttentionProblem,
) -> ScoreParamsLaunch<R> {
    let window = problem.window.unwrap_or_default();
    let (window_left, window_right) = window.clamped(problem.seq_q, problem.seq_kv);
    let dropout = problem.dropout.unwrap_or_default();
    ScoreParamsLaunch::new(
        problem.scale as f32,
        // Unused without softcap (comptime off); 1 keeps the division harmless regardless.
        problem.softcap.unwrap_or(1.0) as f32,
        problem.seq_q as u32,
        problem.seq_kv as u32,
        window_left,
        window_right,
        super::dropout::seed_key(dropout.seed),
        super::dropout::threshold(dropout.prob),
        (1.0 / (1.0 - dropout.prob)) as f32,
    )
}
