//! Drop-in replacements for burn-nn's attention modules whose attention runs through
//! [`flash_attention`](crate::flash_attention): the fused kernels on a `Flash<..>` backend
//! (no `[batch, n_heads, seq, seq]` scores, forward and backward), Burn ops on any other.
//! [`MultiHeadAttention`], [`TransformerEncoder`], [`TransformerDecoder`] and
//! [`CrossAttention`] (whose `n_heads_kv` key and value heads the grouped-query attention reads
//! in place, where burn-nn repeats them), with their configs, inputs, caches and layers; the
//! feed-forward network, layer norms and dropout modules inside are burn-nn's own types.
//!
//! Same configs (fields, defaults, builders, serialized form), same inputs and `forward`
//! methods, same parameters and records: a record saved from the burn-nn module loads into
//! ours and back, and switching a model is one `use` line. The paths mirror burn-nn's:
//!
//! ```text
//! use burn::nn::attention::{MhaInput, MultiHeadAttention, generate_autoregressive_mask};   // before
//! use burn_flash_attn::nn::attention::{MhaInput, MultiHeadAttention, generate_autoregressive_mask};
//! ```
//!
//! Every type also converts to and from burn-nn's with `From` (modules, records, configs).
//!
//! # What differs from burn-nn
//!
//! - **Attention weights.** burn-nn's `MhaOutput.weights` is the `[batch, n_heads, seq_1,
//!   seq_2]` tensor of probabilities; ours is an `Option`, `None` from `forward` and
//!   `forward_cache`, which never build it (that is the point of FlashAttention). Code that
//!   reads the weights calls [`MultiHeadAttention::forward_with_weights`], which computes them
//!   apart with Burn ops (the probabilities before dropout).
//! - **Dropout** (the `dropout` probability of the attention) applies to the attention
//!   probabilities, after the softmax, as FlashAttention (and PyTorch's
//!   `scaled_dot_product_attention`) do: each kept with probability `1 − p`, scaled by
//!   `1 / (1 − p)`. burn-nn's `MultiHeadAttention` (hence its encoder and decoder) applies it
//!   to the scores before the softmax; its `CrossAttention` to the probabilities, as ours.
//!   Either is active only when the backend records gradients (`B::ad_enabled`), so
//!   inference is identical. The masks come from a fresh seed per call, drawn on the host
//!   without touching the device: see [`seed_dropout`] for the stream and for reproducible
//!   runs. A probability of 1 is refused (burn-nn's gives NaN).
//! - **Masking is exact.** burn-nn fills masked scores with `min_float` (−1e4); ours excludes
//!   them. Where a row keeps at least one key the two agree (`exp(−1e4)` is 0 in f32). A row
//!   with every key masked attends to nothing with ours: its attention is 0 and the module
//!   outputs the output layer's bias; burn-nn's scores of that row are all −1e4, so it
//!   averages the values of all keys, masked ones included (uniform weights). `min_float` is
//!   kept, unused, for compatibility.
//! - **Caches** compute only the new rows, and any number of them per call: see [`MhaCache`]
//!   and [`TransformerEncoder::forward_autoregressive_inference`]; the results are burn-nn's
//!   (whose caches keep only the last row of each call).
//!
//! Errors of the attention call (a mask that does not fit, a dropout probability of 1) panic
//! in `forward`, as a shape error does in burn-nn; [`MultiHeadAttention::try_forward`] returns
//! them (also [`CrossAttention::try_forward`]). Combinations the kernels refuse compute with
//! Burn ops (logged once), never an error.
mod attend;
mod cache;
mod convert;
mod cross_attention;
mod decoder;
mod encoder;
mod mha;
mod seed;
mod sublayer;

pub use cache::MhaCache;
pub use cross_attention::{CrossAttention, CrossAttentionCache, CrossAttentionConfig, CrossAttentionRecord};
pub use decoder::{
    TransformerDecoder, TransformerDecoderAutoregressiveCache, TransformerDecoderConfig, TransformerDecoderInput,
    TransformerDecoderLayer, TransformerDecoderLayerAutoregressiveCache, TransformerDecoderLayerRecord,
    TransformerDecoderRecord,
};
pub use encoder::{
    TransformerEncoder, TransformerEncoderAutoregressiveCache, TransformerEncoderConfig, TransformerEncoderInput,
    TransformerEncoderLayer, TransformerEncoderLayerAutoregressiveCache, TransformerEncoderLayerRecord,
    TransformerEncoderRecord,
};
pub use mha::{MhaInput, MhaOutput, MultiHeadAttention, MultiHeadAttentionConfig, MultiHeadAttentionRecord};
pub use seed::seed_dropout;

/// burn-nn's `attention` module with our modules: its mask helpers are re-exported as they are.
pub mod attention {
    pub use super::cache::MhaCache;
    pub use super::cross_attention::{CrossAttention, CrossAttentionCache, CrossAttentionConfig, CrossAttentionRecord};
    pub use super::mha::{MhaInput, MhaOutput, MultiHeadAttention, MultiHeadAttentionConfig, MultiHeadAttentionRecord};
    pub use burn::nn::attention::{GeneratePaddingMask, SeqLengthOption, generate_autoregressive_mask, generate_padding_mask};
}

/// burn-nn's `transformer` module with our encoder and decoder: the position-wise feed-forward
/// network is burn-nn's, re-exported.
pub mod transformer {
    pub use super::decoder::{
        TransformerDecoder, TransformerDecoderAutoregressiveCache, TransformerDecoderConfig, TransformerDecoderInput,
        TransformerDecoderLayer, TransformerDecoderLayerAutoregressiveCache, TransformerDecoderLayerRecord,
        TransformerDecoderRecord,
    };
    pub use super::encoder::{
        TransformerEncoder, TransformerEncoderAutoregressiveCache, TransformerEncoderConfig, TransformerEncoderInput,
        TransformerEncoderLayer, TransformerEncoderLayerAutoregressiveCache, TransformerEncoderLayerRecord,
        TransformerEncoderRecord,
    };
    pub use burn::nn::transformer::{PositionWiseFeedForward, PositionWiseFeedForwardConfig, PositionWiseFeedForwardRecord};
}
