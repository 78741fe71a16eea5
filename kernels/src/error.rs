//! Typed errors of the kernel launchers: every message names the offending value.
use thiserror::Error;

/// Why a problem cannot run on the flash kernels. The Burn decorator turns each of these into a
/// logged fallback reason; direct users of the launchers get them as `Err`.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum FlashError {
    #[error("{tensor} must be rank 4 [batch, num_heads, seq, dim], got shape {shape:?}")]
    Rank {
        tensor: &'static str,
        shape: Vec<usize>,
    },
    #[error("{what} mismatch: {detail}")]
    ShapeMismatch { what: &'static str, detail: String },
    #[error("{dim} = 0: every dimension must be at least 1")]
    EmptyDimension { dim: &'static str },
    #[error("{dim} = {value} is not supported (the kernels support 1..={max})")]
    DimTooLarge {
        dim: &'static str,
        value: usize,
        max: usize,
    },
    #[error("dtype {dtype} is not supported (f16, bf16 and f32 are)")]
    UnsupportedDtype { dtype: String },
    #[error("query, key and value must share one dtype, got {query}, {key}, {value}")]
    MixedDtypes {
        query: String,
        key: String,
        value: String,
    },
    #[error(
        "num_kv_heads = {num_kv_heads} must divide num_heads = {num_heads} (grouped-query attention)"
    )]
    HeadGroups {
        num_heads: usize,
        num_kv_heads: usize,
    },
    #[error("dropout probability must be in [0, 1), got {0}")]
    InvalidDropout(f64),
    #[error("softcap must be positive and finite, got {0}")]
    InvalidSoftcap(f64),
    #[error("scale must be finite, got {0}")]
    InvalidScale(f64),
    #[error("invalid tuning: {0}")]
    InvalidTuning(String),
    #[error("the device cannot run this kernel: {0}")]
    Device(String),
}

/// The one of `options` whose `name` is `text`, or an [`FlashError::InvalidTuning`] naming
/// `what` and the names (the `FromStr` of the kernels' path enums).
pub(crate) fn parse_named<T: Copy>(
    text: &str,
    options: &[T],
    name: fn(T) -> &'static str,
    what: &str,
) -> Result<T, FlashError> {
    options.iter().copied().find(|&option| name(option) == text).ok_or_else(|| {
        let names: Vec<String> = options.iter().map(|&option| format!("`{}`", name(option))).collect();
        FlashError::InvalidTuning(format!("{what} {text:?}: {}", names.join(", ")))
    })
}
