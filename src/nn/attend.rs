//! The attention step shared by the modules: burn-nn's masks and options turned into one
//! [`flash_attention`] call, and the opt-in attention weights computed with Burn ops.
use burn::tensor::activation::{quiet_softmax, softmax};
use burn::tensor::{Bool, Tensor, backend::Backend};

use super::seed::next_seed;
use crate::api::{AttentionError, Dropout, FlashAttentionOptions, KeyPadding, flash_attention};

/// burn-nn's two masks of one attention call, `true` = masked.
#[derive(Debug, Clone)]
pub(crate) struct Masks<B: Backend> {
    /// `[batch, seq_kv]`: padded keys.
    pub(crate) pad: Option<Tensor<B, 2, Bool>>,
    /// `[batch, seq_q, seq_kv]`: masked (query, key) pairs, the same for every head.
    pub(crate) attn: Option<Tensor<B, 3, Bool>>,
}

impl<B: Backend> Masks<B> {
    /// The masks of the last `rows` query rows (the rows a cached step computes). An attention
    /// mask with fewer rows is left whole, for the attention call to report that it does not fit.
    pub(crate) fn last_rows(self, rows: usize) -> Self {
        let attn = self.attn.map(|attn| {
            let [batch, seq_q, seq_kv] = attn.dims();
            attn.slice([0..batch, seq_q.saturating_sub(rows)..seq_q, 0..seq_kv])
        });
        Self { pad: self.pad, attn }
    }

    /// `[batch, 1, seq_q or 1, seq_kv]`, the union of both masks, for a caller that broadcasts
    /// it over the heads: the attention mask alone stays the caller's tensor (a reshape), the
    /// padding mask alone a `[batch, 1, 1, seq_kv]` view, and only both together are combined
    /// into a new `[batch, 1, seq_q, seq_kv]` mask (never one per head).
    fn per_batch(self) -> Option<Tensor<B, 4, Bool>> {
        let pad = self.pad.map(|pad| {
            let [batch, seq_kv] = pad.dims();
            pad.reshape([batch, 1, 1, seq_kv])
        });
        let attn = self.attn.map(|attn| {
            let [batch, seq_q, seq_kv] = attn.dims();
            attn.reshape([batch, 1, seq_q, seq_kv])
        });
        match (pad, attn) {
            (Some(pad), Some(attn)) => {
                let dims = attn.dims();
                Some(attn.bool_or(pad.expand(dims)))
            }
            (pad, attn) => attn.or(pad),
        }
    }
}

/// What the modules pass besides the tensors and masks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AttentionSettings {
    /// Multiplies `q·kᵀ`; `None`: `1/sqrt(head_dim)`.
    pub(crate) scale: Option<f64>,
    pub(crate) quiet_softmax: bool,
    /// The dropout probability on the attention probabilities, applied in training only.
    pub(crate) dropout: f64,
}

/// `softmax(q·kᵀ · scale)·v` with the masks, through [`flash_attention`]: the fused
/// kernels on a `Flash<..>` backend, Burn ops elsewhere (and where the kernels refuse a
/// combination: `allow_fallback`, logged).
///
/// ```text
/// query [batch, num_heads,    seq_q,  head_dim]     num_kv_heads divides num_heads
/// key   [batch, num_kv_heads, seq_kv, head_dim]     (grouped-query attention, K/V never
/// value [batch, num_kv_heads, seq_kv, val_dim]       repeated)
/// out   [batch, num_heads,    seq_q,  val_dim]
/// ```
///
/// The padding mask alone becomes [`KeyPadding::Mask`]; an attention mask a `[batch, 1, seq_q,
/// seq_kv]` mask that the call broadcasts over the heads as a view. Dropout runs when the
/// backend records gradients (`B::ad_enabled`, as burn-nn's `Dropout` decides) with a fresh
/// seed per call ([`super::seed_dropout`] documents the stream).
pub(crate) fn attend<B: Backend>(
    query: Tensor<B, 4>,
    key: Tensor<B, 4>,
    value: Tensor<B, 4>,
    masks: Masks<B>,
    settings: AttentionSettings,
) -> Result<Tensor<B, 4>, AttentionError> {
    let training = B::ad_enabled(&query.device());
    let dropout = (training && settings.dropout > 0.0).then(|| Dropout::new(settings.dropout, next_seed()));
    let (mask, key_padding) = match masks {
        Masks { pad: Some(pad), attn: None } => (None, Some(KeyPadding::Mask(pad))),
        masks => (masks.per_batch(), None),
    };
    let options = FlashAttentionOptions::new()
        .with_scale(settings.scale)
        .with_mask(mask)
        .with_key_padding(key_padding)
        .with_quiet_softmax(settings.quiet_softmax)
        .with_dropout(dropout)
        .with_allow_fallback(true);
    flash_attention(query, key, value, options)
}

/// The attention probabilities `[batch, num_heads, seq_q, seq_kv]` of the call that [`attend`]
/// makes, before dropout, materialized with Burn ops: the opt-in `weights` of the modules.
/// Masked positions are exactly 0 and a row with every key masked is all 0 (burn-nn's
/// `min_float` fill gives such a row uniform weights instead).
pub(crate) fn attention_weights<B: Backend>(
    query: Tensor<B, 4>,
    key: Tensor<B, 4>,
    masks: Masks<B>,
    quiet: bool,
) -> Tensor<B, 4> {
    let [_, num_heads, _, head_dim] = query.dims();
    let key = repeat_kv_heads(key, num_heads);
    let scores = query.matmul(key.transpose()).div_scalar((head_dim as f64).sqrt());
    let Some(mask) = masks.per_batch().map(|mask| mask.expand(scores.dims())) else {
        return if quiet { quiet_softmax(scores, 3) } else { softmax(scores, 3) };
    };
    // -inf leaves a partly masked row's softmax exact; a fully masked row gets NaN
    // (-inf - -inf), which the second fill replaces by the 0 it is defined as.
    let scores = scores.mask_fill(mask.clone(), f64::NEG_INFINITY);
    let weights = if quiet { quiet_softmax(scores, 3) } else { softmax(scores, 3) };
    weights.mask_fill(mask, 0.0)
}

/// `[batch, num_heads, seq, dim]` from `[batch, num_kv_heads, seq, dim]`: kv head `g` serves
/// query heads `g·group..(g+1)·group`, as [`attend`]'s grouped-query attention reads it.
fn repeat_kv_heads<B: Backend>(kv: Tensor<B, 4>, num_heads: usize) -> Tensor<B, 4> {
    let [batch, num_kv_heads, seq, dim] = kv.dims();
    if num_kv_heads == num_heads {
        return kv;
    }
    let group = num_heads / num_kv_heads;
    kv.reshape([batch, num_kv_heads, 1, seq, dim])
        .expand([batch, num_kv_heads, group, seq, dim])
        .reshape([batch, num_heads, seq, dim])
}
