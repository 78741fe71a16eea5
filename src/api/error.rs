//! The typed errors of [`flash_attention`](super::flash_attention): one variant per kind of bad
//! input, each naming the offending values. Ranks are fixed by the argument types
//! (`Tensor<B, 4>` and so on), so only sizes, values and dtypes can be wrong.
use burn::tensor::DType;

/// Why [`flash_attention`](super::flash_attention) refused its inputs.
///
/// Every check runs on metadata (shapes, dtypes, option values): nothing is read back from the
/// device, so the values inside `key_padding` lengths are not checked (a negative length masks
/// every key, a length beyond `seq_kv` masks none).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AttentionError {
    /// A dimension of query, key or value is 0.
    #[error("{tensor} has an empty dimension: shape {shape:?}")]
    EmptyDimension { tensor: &'static str, shape: [usize; 4] },

    /// Key or value disagrees with the query or with each other. `expected` has `None` where
    /// any size is accepted.
    #[error("{tensor} has shape {got:?}, expected {}", pattern(expected))]
    ShapeMismatch { tensor: &'static str, expected: [Option<usize>; 4], got: [usize; 4] },

    /// Grouped-query attention needs `num_kv_heads` to divide `num_heads`.
    #[error("num_kv_heads = {num_kv_heads} does not divide num_heads = {num_heads}")]
    HeadsNotDivisible { num_heads: usize, num_kv_heads: usize },

    /// Key, value, bias or ALiBi slopes are not of the query's float dtype.
    #[error("{tensor} has dtype {got:?}, the query has {expected:?}")]
    DtypeMismatch { tensor: &'static str, expected: DType, got: DType },

    /// A mask dimension is neither 1 nor the scores' size.
    #[error("mask of shape {mask:?} does not broadcast to the scores {scores:?}")]
    MaskNotBroadcastable { mask: [usize; 4], scores: [usize; 4] },

    /// A bias dimension is neither 1 nor the scores' size.
    #[error("bias of shape {bias:?} does not broadcast to the scores {scores:?}")]
    BiasNotBroadcastable { bias: [usize; 4], scores: [usize; 4] },

    /// `KeyPadding::Lengths::keys` must hold one length per batch entry.
    #[error("key lengths have {got} entries, expected batch = {batch}")]
    KeyLengthsShape { got: usize, batch: usize },

    /// `KeyPadding::Lengths::queries` must hold one length per batch entry.
    #[error("query lengths have {got} entries, expected batch = {batch}")]
    QueryLengthsShape { got: usize, batch: usize },

    /// `KeyPadding::Mask` must be `[batch, seq_kv]`.
    #[error("key padding mask has shape {got:?}, expected [batch, seq_kv] = {expected:?}")]
    KeyMaskShape { got: [usize; 2], expected: [usize; 2] },

    /// `alibi_slopes` must hold one slope per query head.
    #[error("alibi slopes have {got} entries, expected num_heads = {num_heads}")]
    AlibiSlopesShape { got: usize, num_heads: usize },

    /// The dropout probability must be finite and in `[0, 1)`.
    #[error("dropout probability {prob} is not in [0, 1)")]
    InvalidDropout { prob: f64 },

    /// The scale must be finite.
    #[error("scale {scale} is not finite")]
    InvalidScale { scale: f64 },

    /// The softcap must be finite and positive.
    #[error("softcap {softcap} is not a finite positive number")]
    InvalidSoftcap { softcap: f64 },

    /// Valid inputs that the chosen implementation cannot run (reported by the kernel dispatch
    /// when `allow_fallback` is false).
    #[error("unsupported: {reason}")]
    Unsupported { reason: String },
}

/// `[2, _, _, 16]`: the sizes an expected shape fixes, `_` where any size is accepted.
fn pattern(expected: &[Option<usize>; 4]) -> String {
    let dims: Vec<String> = expected.iter().map(|d| d.map_or("_".to_string(), |d| d.to_string())).collect();
    format!("[{}]", dims.join(", "))
}
