//! Validation and normalization of one [`flash_attention`](super::flash_attention) call into a
//! [`Prepared`]: what every implementation (the Burn-ops path here, the kernels later) consumes.
//!
//! Everything is checked from metadata (shapes, dtypes, option values), so nothing waits on the
//! device. Broadcast inputs stay views (`expand`); key padding becomes a key mask view; the
//! structured masks (causal, window) and ALiBi stay parameters, for each implementation to
//! apply in its own way (the kernels never materialize them).
use burn::tensor::{Bool, DType, Int, Tensor, backend::Backend};

use super::error::AttentionError;
use super::options::{Dropout, FlashAttentionOptions, KeyPadding, SlidingWindow};

/// The sizes of one call. Scores are `[batch, num_heads, seq_q, seq_kv]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AttentionShape {
    pub(crate) batch: usize,
    pub(crate) num_heads: usize,
    /// Heads of key and value; divides `num_heads` (GQA when smaller, MQA when 1).
    pub(crate) num_kv_heads: usize,
    pub(crate) seq_q: usize,
    pub(crate) seq_kv: usize,
    pub(crate) head_dim: usize,
    pub(crate) val_dim: usize,
}

impl AttentionShape {
    pub(crate) fn scores(&self) -> [usize; 4] {
        [self.batch, self.num_heads, self.seq_q, self.seq_kv]
    }

    /// Query heads per kv head: query head `h` reads kv head `h / group`.
    pub(crate) fn group(&self) -> usize {
        self.num_heads / self.num_kv_heads
    }
}

/// A validated call, normalized. Its tensors are on the query's device and dtype.
#[derive(Debug, Clone)]
pub(crate) struct Prepared<B: Backend> {
    pub(crate) shape: AttentionShape,
    /// The resolved scale (the default `1/sqrt(head_dim)` filled in); finite.
    pub(crate) scale: f64,
    /// Finite and positive.
    pub(crate) softcap: Option<f64>,
    /// Bottom-right aligned: row `i` sees column `j` iff `j <= i + seq_kv − seq_q`.
    pub(crate) causal: bool,
    /// `None` also when both sides are unbounded. Applied together with `causal` (AND).
    pub(crate) window: Option<SlidingWindow>,
    /// The user's mask OR the key padding mask, `true` = masked: a `[batch, num_heads, seq_q,
    /// seq_kv]` view over the broadcast inputs (a key padding mask alone is `[batch, 1, 1,
    /// seq_kv]` underneath). Causal and window are not in it.
    pub(crate) mask: Option<Tensor<B, 4, Bool>>,
    /// The user's bias as a `[batch, num_heads, seq_q, seq_kv]` view; added after masking.
    pub(crate) bias: Option<Tensor<B, 4>>,
    /// `[num_heads]`: head `h` adds `−slope_h · |i + seq_kv − seq_q − j|` after masking.
    pub(crate) alibi_slopes: Option<Tensor<B, 1>>,
    pub(crate) quiet_softmax: bool,
    /// `None` also when the probability is 0.
    pub(crate) dropout: Option<Dropout>,
    /// `[batch, 1, seq_q, 1]`, `true` = a padded query row: the output there is set to 0 after
    /// the attention, which also stops the gradient of those rows.
    pub(crate) padded_rows: Option<Tensor<B, 4, Bool>>,
    /// Whether the kernel dispatch may take the Burn-ops path when the kernels cannot run.
    #[expect(dead_code, reason = "for the kernel dispatch: the Burn-ops path alone has nothing to fall back from")]
    pub(crate) allow_fallback: bool,
}

/// Validates the call and normalizes its options (see [`Prepared`]).
pub(crate) fn prepare<B: Backend>(
    query: &Tensor<B, 4>,
    key: &Tensor<B, 4>,
    value: &Tensor<B, 4>,
    options: FlashAttentionOptions<B>,
) -> Result<Prepared<B>, AttentionError> {
    let shape = check_shapes(query.dims(), key.dims(), value.dims())?;
    let dtype = query.dtype();
    check_dtype("key", dtype, key.dtype())?;
    check_dtype("value", dtype, value.dtype())?;

    let scale = options.scale.unwrap_or(1.0 / (shape.head_dim as f64).sqrt());
    if !scale.is_finite() {
        return Err(AttentionError::InvalidScale { scale });
    }
    if let Some(softcap) = options.softcap.filter(|&cap| !(cap.is_finite() && cap > 0.0)) {
        return Err(AttentionError::InvalidSoftcap { softcap });
    }
    if let Some(dropout) = options.dropout.filter(|d| !(0.0..1.0).contains(&d.prob)) {
        return Err(AttentionError::InvalidDropout { prob: dropout.prob });
    }

    let scores = shape.scores();
    let mask = match options.mask {
        Some(mask) if !broadcasts(mask.dims(), scores) => {
            return Err(AttentionError::MaskNotBroadcastable { mask: mask.dims(), scores });
        }
        mask => mask.map(|mask| mask.expand(scores)),
    };
    let bias = match options.bias {
        Some(bias) if !broadcasts(bias.dims(), scores) => {
            return Err(AttentionError::BiasNotBroadcastable { bias: bias.dims(), scores });
        }
        Some(bias) => {
            check_dtype("bias", dtype, bias.dtype())?;
            Some(bias.expand(scores))
        }
        None => None,
    };
    if let Some(slopes) = &options.alibi_slopes {
        let [got] = slopes.dims();
        if got != shape.num_heads {
            return Err(AttentionError::AlibiSlopesShape { got, num_heads: shape.num_heads });
        }
        check_dtype("alibi_slopes", dtype, slopes.dtype())?;
    }

    let (key_mask, padded_rows) = match options.key_padding {
        Some(padding) => padding_masks(padding, &shape)?,
        None => (None, None),
    };
    let mask = match (mask, key_mask) {
        (Some(mask), Some(key_mask)) => Some(mask.bool_or(key_mask)),
        (mask, key_mask) => mask.or(key_mask),
    };

    Ok(Prepared {
        shape,
        scale,
        softcap: options.softcap,
        causal: options.causal,
        window: options.window.filter(|w| w.left.is_some() || w.right.is_some()),
        mask,
        bias,
        alibi_slopes: options.alibi_slopes,
        quiet_softmax: options.quiet_softmax,
        dropout: options.dropout.filter(|d| d.prob > 0.0),
        padded_rows,
        allow_fallback: options.allow_fallback,
    })
}

/// Query `[batch, num_heads, seq_q, head_dim]`, key `[batch, num_kv_heads, seq_kv, head_dim]`,
/// value `[batch, num_kv_heads, seq_kv, val_dim]`, no size 0, `num_kv_heads | num_heads`.
fn check_shapes(query: [usize; 4], key: [usize; 4], value: [usize; 4]) -> Result<AttentionShape, AttentionError> {
    for (tensor, shape) in [("query", query), ("key", key), ("value", value)] {
        if shape.contains(&0) {
            return Err(AttentionError::EmptyDimension { tensor, shape });
        }
    }
    let [batch, num_heads, seq_q, head_dim] = query;
    let [_, num_kv_heads, seq_kv, _] = key;
    let expected = [Some(batch), None, None, Some(head_dim)];
    if !matches(key, expected) {
        return Err(AttentionError::ShapeMismatch { tensor: "key", expected, got: key });
    }
    let expected = [Some(batch), Some(num_kv_heads), Some(seq_kv), None];
    if !matches(value, expected) {
        return Err(AttentionError::ShapeMismatch { tensor: "value", expected, got: value });
    }
    if num_heads % num_kv_heads != 0 {
        return Err(AttentionError::HeadsNotDivisible { num_heads, num_kv_heads });
    }
    let val_dim = value[3];
    Ok(AttentionShape { batch, num_heads, num_kv_heads, seq_q, seq_kv, head_dim, val_dim })
}

fn matches(shape: [usize; 4], expected: [Option<usize>; 4]) -> bool {
    shape.iter().zip(expected).all(|(&got, want)| want.is_none_or(|want| got == want))
}

/// Each dimension equal to the target's or 1.
fn broadcasts(shape: [usize; 4], target: [usize; 4]) -> bool {
    shape.iter().zip(target).all(|(&got, want)| got == want || got == 1)
}

fn check_dtype(tensor: &'static str, expected: DType, got: DType) -> Result<(), AttentionError> {
    if got == expected { Ok(()) } else { Err(AttentionError::DtypeMismatch { tensor, expected, got }) }
}

/// The key mask as a `[batch, num_heads, seq_q, seq_kv]` view and the padded query rows
/// `[batch, 1, seq_q, 1]` (`true` = padding in both).
type PaddingMasks<B> = (Option<Tensor<B, 4, Bool>>, Option<Tensor<B, 4, Bool>>);

fn padding_masks<B: Backend>(padding: KeyPadding<B>, shape: &AttentionShape) -> Result<PaddingMasks<B>, AttentionError> {
    let batch = shape.batch;
    let (key_mask, padded_rows) = match padding {
        KeyPadding::Mask(mask) => {
            let expected = [batch, shape.seq_kv];
            if mask.dims() != expected {
                return Err(AttentionError::KeyMaskShape { got: mask.dims(), expected });
            }
            (mask, None)
        }
        KeyPadding::Lengths { keys, queries } => {
            let [got] = keys.dims();
            if got != batch {
                return Err(AttentionError::KeyLengthsShape { got, batch });
            }
            if let Some([got]) = queries.as_ref().map(Tensor::dims)
                && got != batch
            {
                return Err(AttentionError::QueryLengthsShape { got, batch });
            }
            let rows = queries.map(|lengths| beyond_lengths(lengths, shape.seq_q).reshape([batch, 1, shape.seq_q, 1]));
            (beyond_lengths(keys, shape.seq_kv), rows)
        }
    };
    let key_mask = key_mask.reshape([batch, 1, 1, shape.seq_kv]).expand(shape.scores());
    Ok((Some(key_mask), padded_rows))
}

/// `[batch, len]`: position `p` of sequence `b` is `true` iff `p >= lengths[b]`.
fn beyond_lengths<B: Backend>(lengths: Tensor<B, 1, Int>, len: usize) -> Tensor<B, 2, Bool> {
    let [batch] = lengths.dims();
    let positions = Tensor::<B, 1, Int>::arange(0..len as i64, &lengths.device());
    // The user's lengths may be of another int dtype than `arange`'s.
    let lengths = lengths.cast(positions.dtype());
    let positions = positions.reshape([1, len]).expand([batch, len]);
    positions.greater_equal(lengths.reshape([batch, 1]).expand([batch, len]))
}
