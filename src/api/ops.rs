//! The extended attention computed with Burn tensor ops: the reference semantics of
//! [`flash_attention`](super::flash_attention), differentiable by any autodiff backend.
//!
//! It materializes the `[batch, num_heads, seq_q, seq_kv]` scores (O(N²) memory), computing in
//! the input dtype as Burn's `attention_fallback` does. The padded query rows are not this
//! module's concern: `flash_attention` zeroes them on whatever implementation ran.
use burn::tensor::{Bool, DType, Int, Tensor, TensorData, backend::Backend, ops::AttentionModuleOptions};

use burn_flash_attn_kernels::primitives::dropout;

use super::options::{Dropout, SlidingWindow};
use super::prepare::{AttentionShape, Prepared};

/// `softmax(mask(softcap(q·kᵀ·scale)) + bias + alibi) · v`, with the options of `prepared`
/// (quiet softmax, dropout); `[batch, num_heads, seq_q, val_dim]`.
pub(crate) fn attention_with_ops<B: Backend>(
    query: Tensor<B, 4>,
    key: Tensor<B, 4>,
    value: Tensor<B, 4>,
    prepared: &Prepared<B>,
) -> Tensor<B, 4> {
    let shape = prepared.shape;
    let (dtype, device) = (query.dtype(), query.device());
    let key = repeat_kv(key, shape.group());
    let value = repeat_kv(value, shape.group());

    let mut scores = query.matmul(key.swap_dims(2, 3)).mul_scalar(prepared.scale);
    if let Some(softcap) = prepared.softcap {
        // Before any masking, so that tanh never sees a masked logit.
        scores = scores.div_scalar(softcap).tanh().mul_scalar(softcap);
    }

    let structured = prepared.causal || prepared.window.is_some() || prepared.alibi_slopes.is_some();
    let positions = structured.then(|| relative_positions::<B>(shape.seq_q, shape.seq_kv, &device));
    // Bias and ALiBi are added before the mask is applied: a masked logit is overwritten
    // whatever was added to it, which is "added after masking, a masked entry stays masked".
    if let Some(bias) = &prepared.bias {
        scores = scores + bias.clone();
    }
    if let (Some(slopes), Some(positions)) = (&prepared.alibi_slopes, &positions) {
        scores = scores + alibi_bias(slopes.clone(), positions.clone(), dtype);
    }

    let position_mask = positions
        .and_then(|positions| position_mask(positions, prepared.causal, prepared.window))
        .map(|mask| mask.unsqueeze::<4>().expand(shape.scores()));
    let masked = match (prepared.mask.clone(), position_mask) {
        (Some(mask), Some(position_mask)) => Some(mask.bool_or(position_mask)),
        (mask, position_mask) => mask.or(position_mask),
    };

    let probs = softmax(scores, masked, prepared.quiet_softmax);
    let probs = match prepared.dropout {
        Some(dropout) => apply_dropout(probs, dropout),
        None => probs,
    };
    probs.matmul(value)
}

/// Burn's `attention_fallback` (`module::attention`'s semantics: `true` = masked, causal
/// bottom-right, softcap before masking, bias after it, a fully masked row 0) as a
/// [`Prepared`] call of [`attention_with_ops`], for the training fallback of
/// `Flash<Autodiff<..>>`. Burn 0.21's own fills masked logits with `-inf` and takes the row
/// maximum with `max_dim`, which under autodiff is argmax + gather: on a fully masked row
/// cubek's argmax returns `u32::MAX` (no element beats its start value) and the gather reads
/// 16 GiB past the scores; on CUDA an illegal address that poisons the device (H200,
/// `compute-sanitizer`: `gather_kernel_t_f32_i_i32`). This module's softmax fills masked
/// logits with the lowest finite value and detaches the scores before their maximum: a plain
/// reduction, no index.
pub(crate) fn module_attention_with_ops<B: Backend>(
    query: Tensor<B, 4>,
    key: Tensor<B, 4>,
    value: Tensor<B, 4>,
    mask: Option<Tensor<B, 4, Bool>>,
    attn_bias: Option<Tensor<B, 4>>,
    options: AttentionModuleOptions,
) -> Tensor<B, 4> {
    let ([batch, num_heads, seq_q, head_dim], [_, num_kv_heads, seq_kv, _]) = (query.dims(), key.dims());
    let shape = AttentionShape { batch, num_heads, num_kv_heads, seq_q, seq_kv, head_dim, val_dim: value.dims()[3] };
    let prepared = Prepared {
        shape,
        scale: options.scale.unwrap_or(1.0 / (head_dim as f64).sqrt()),
        softcap: options.softcap,
        causal: options.is_causal,
        window: None,
        mask: mask.map(|mask| mask.expand(shape.scores())),
        bias: attn_bias,
        alibi_slopes: None,
        quiet_softmax: false,
        dropout: None,
        padded_rows: None,
        allow_fallback: false,
    };
    attention_with_ops(query, key, value, &prepared)
}

/// `[batch, num_kv_heads, seq, dim]` → `[batch, num_kv_heads · group, seq, dim]`, each kv head
/// repeated for the `group` query heads that read it (query head `h` reads kv head
/// `h / group`). Under autodiff the gradient sums over the group.
fn repeat_kv<B: Backend>(x: Tensor<B, 4>, group: usize) -> Tensor<B, 4> {
    if group == 1 {
        return x;
    }
    let [batch, num_kv_heads, seq, dim] = x.dims();
    x.reshape([batch, num_kv_heads, 1, seq, dim])
        .expand([batch, num_kv_heads, group, seq, dim])
        .reshape([batch, num_kv_heads * group, seq, dim])
}

/// `[seq_q, seq_kv]`: `j − i'` with `i' = i + seq_kv − seq_q` (bottom-right alignment), the
/// signed distance of column `j` from row `i`'s diagonal. Its magnitude is below
/// `max(seq_q, seq_kv)`.
fn relative_positions<B: Backend>(seq_q: usize, seq_kv: usize, device: &B::Device) -> Tensor<B, 2, Int> {
    let size = [seq_q, seq_kv];
    let diagonal = Tensor::<B, 1, Int>::arange(0..seq_q as i64, device)
        .add_scalar(seq_kv as i64 - seq_q as i64)
        .reshape([seq_q, 1])
        .expand(size);
    let columns = Tensor::<B, 1, Int>::arange(0..seq_kv as i64, device).reshape([1, seq_kv]).expand(size);
    columns - diagonal
}

/// `true` where causal or the window masks: outside `−left <= j − i' <= right`, with
/// `right = 0` under causal. `None` when nothing is masked.
fn position_mask<B: Backend>(
    positions: Tensor<B, 2, Int>,
    causal: bool,
    window: Option<SlidingWindow>,
) -> Option<Tensor<B, 2, Bool>> {
    let [seq_q, seq_kv] = positions.dims();
    // |j − i'| < max(seq_q, seq_kv): a side at least that wide masks nothing, and skipping it
    // keeps the bound inside the int dtype (i32 on most backends).
    let reach = seq_q.max(seq_kv);
    let within = |side: Option<usize>| side.filter(|&width| width < reach).map(|width| width as i64);
    let left = within(window.and_then(|w| w.left));
    let right = if causal { Some(0) } else { within(window.and_then(|w| w.right)) };
    let before = left.map(|left| positions.clone().lower_elem(-left));
    let after = right.map(|right| positions.greater_elem(right));
    match (before, after) {
        (Some(before), Some(after)) => Some(before.bool_or(after)),
        (before, after) => before.or(after),
    }
}

/// `[1, num_heads, seq_q, seq_kv]`: `−slope_h · |j − i'|`.
fn alibi_bias<B: Backend>(slopes: Tensor<B, 1>, positions: Tensor<B, 2, Int>, dtype: DType) -> Tensor<B, 4> {
    let [num_heads] = slopes.dims();
    let distance = positions.abs().float().cast(dtype).unsqueeze::<4>();
    (distance * slopes.reshape([1, num_heads, 1, 1])).neg()
}

/// Softmax over the last dimension with masked positions (`true`) excluded; a row with every
/// position masked gives probabilities 0. `quiet`: `exp(s_j) / (1 + Σ_k exp(s_k))`.
fn softmax<B: Backend>(scores: Tensor<B, 4>, masked: Option<Tensor<B, 4, Bool>>, quiet: bool) -> Tensor<B, 4> {
    let finfo = scores.dtype().finfo().expect("attention scores are a float tensor");
    let scores = match &masked {
        // The lowest finite value rather than −inf: the row maximum stays finite (no
        // −inf − (−inf) = NaN) and no gradient meets an infinity.
        Some(masked) => scores.mask_fill(masked.clone(), finfo.min),
        None => scores,
    };
    // Softmax (quiet or not) is invariant to the shift, so the maximum is a constant of the
    // graph: detaching the scores before the reduction is exact, and autodiff then takes a
    // plain maximum (a tracked `max_dim` is argmax + gather, see `module_attention_with_ops`).
    let row_max = scores.clone().detach().max_dim(3);
    // Quiet: the extra logit 0 takes part in the maximum, so exp(−max) <= 1 cannot overflow.
    let row_max = if quiet { row_max.clamp_min(0.0) } else { row_max };
    let exp = (scores - row_max.clone()).exp();
    // A fully masked row has maximum `finfo.min` and exp(0) = 1 everywhere: zero the masked
    // terms explicitly, so that such a row sums to 0 instead of being uniform.
    let exp = match masked {
        Some(masked) => exp.mask_fill(masked, 0.0),
        None => exp,
    };
    let sum = exp.clone().sum_dim(3);
    let denominator = if quiet {
        // The extra key's term exp(0 − max) >= exp(−max) > 0: never 0, also for a fully masked row.
        sum + row_max.neg().exp()
    } else {
        // Only a fully masked row sums to 0 (any other has a term exp(0) = 1): 0 / min_positive = 0.
        sum.clamp_min(finfo.min_positive)
    };
    exp / denominator
}

/// Drops each probability with probability `dropout.prob` and scales the kept ones by
/// `1 / (1 − prob)`. The keep mask is the kernels' own (`kernels::primitives::dropout`: a
/// stateless hash of seed, batch * heads + head, row and column), generated on the host: the
/// same entries are dropped on every backend and path. It costs `batch * heads * seq_q *
/// seq_kv` hashes and one upload: this path materializes the scores anyway.
fn apply_dropout<B: Backend>(probs: Tensor<B, 4>, dropout: Dropout) -> Tensor<B, 4> {
    let (device, dtype) = (probs.device(), probs.dtype());
    let [batch, heads, seq_q, seq_kv] = probs.dims();
    let threshold = dropout::threshold(dropout.prob);
    let mut keep = Vec::with_capacity(batch * heads * seq_q * seq_kv);
    for batch_head in 0..(batch * heads) as u32 {
        for row in 0..seq_q as u32 {
            let key = dropout::row_key_host(dropout.seed, batch_head, row);
            keep.extend((0..seq_kv as u32).map(|col| dropout::mix_host(col ^ key) >= threshold));
        }
    }
    let keep = Tensor::<B, 4, Bool>::from_data(TensorData::new(keep, [batch, heads, seq_q, seq_kv]), &device);
    let scale = 1.0 / (1.0 - dropout.prob);
    probs * keep.float().cast(dtype).mul_scalar(scale)
}
