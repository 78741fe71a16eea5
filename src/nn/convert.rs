//! `From` both ways between our modules (and records, and configs) and burn-nn's: the same
//! fields, so a burn-nn record or module converts in memory (`ours.load_record(record.into())`,
//! `let ours: MultiHeadAttention<B> = theirs.into()`). Through a `Recorder` no conversion is
//! needed: the serialized records are the same.
use burn::nn::{attention, transformer};
use burn::tensor::backend::Backend;

use super::cross_attention::{CrossAttentionConfig, CrossAttentionRecord};
use super::decoder::{
    TransformerDecoder, TransformerDecoderConfig, TransformerDecoderLayer, TransformerDecoderLayerRecord,
    TransformerDecoderRecord,
};
use super::encoder::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderLayer, TransformerEncoderLayerRecord,
    TransformerEncoderRecord,
};
use super::mha::{MultiHeadAttention, MultiHeadAttentionConfig, MultiHeadAttentionRecord};

/// `From` both ways between two structs with the same fields, each converted by `Into` (the
/// identity for the shared types), those after `each` element by element (`Vec`s of layers).
/// `backend:` marks types generic over the backend `B`.
macro_rules! interchange {
    (backend: $($rest:tt)*) => { interchange!(@impl [<B: Backend>] $($rest)*); };
    (@impl [$($generics:tt)*] $ours:ty, $theirs:ty { $($field:ident),* $(,)? } $(each { $($each:ident),* })?) => {
        impl $($generics)* From<$theirs> for $ours {
            fn from(theirs: $theirs) -> Self {
                Self { $($field: theirs.$field.into(),)* $($($each: convert_all(theirs.$each)),*)? }
            }
        }

        impl $($generics)* From<$ours> for $theirs {
            fn from(ours: $ours) -> Self {
                Self { $($field: ours.$field.into(),)* $($($each: convert_all(ours.$each)),*)? }
            }
        }
    };
    ($($rest:tt)*) => { interchange!(@impl [] $($rest)*); };
}

interchange!(MultiHeadAttentionConfig, attention::MultiHeadAttentionConfig {
    d_model, n_heads, dropout, min_float, quiet_softmax, initializer,
});
interchange!(backend: MultiHeadAttention<B>, attention::MultiHeadAttention<B> {
    query, key, value, output, dropout, activation, d_model, n_heads, d_k, min_float, quiet_softmax,
});
interchange!(backend: MultiHeadAttentionRecord<B>, attention::MultiHeadAttentionRecord<B> {
    query, key, value, output, dropout, activation, d_model, n_heads, d_k, min_float, quiet_softmax,
});

interchange!(CrossAttentionConfig, attention::CrossAttentionConfig {
    d_model, d_context, n_heads, n_heads_kv, d_head, dropout, min_float, quiet_softmax,
});
// burn-nn's module keeps its fields private: it converts through its record.
interchange!(backend: CrossAttentionRecord<B>, attention::CrossAttentionRecord<B> {
    query, key, value, output, dropout, n_heads, n_heads_kv, d_head, scale, min_float, quiet_softmax,
});

interchange!(TransformerEncoderConfig, transformer::TransformerEncoderConfig {
    d_model, d_ff, n_heads, n_layers, dropout, norm_first, quiet_softmax, initializer, activation,
    layer_norm_eps,
});
interchange!(backend: TransformerEncoder<B>, transformer::TransformerEncoder<B> {
    d_model, d_ff, n_heads, n_layers, dropout, norm_first, quiet_softmax,
} each { layers });
interchange!(backend: TransformerEncoderRecord<B>, transformer::TransformerEncoderRecord<B> {
    d_model, d_ff, n_heads, n_layers, dropout, norm_first, quiet_softmax,
} each { layers });
interchange!(backend: TransformerEncoderLayer<B>, transformer::TransformerEncoderLayer<B> {
    mha, pwff, norm_1, norm_2, dropout, norm_first,
});
interchange!(backend: TransformerEncoderLayerRecord<B>, transformer::TransformerEncoderLayerRecord<B> {
    mha, pwff, norm_1, norm_2, dropout, norm_first,
});

interchange!(TransformerDecoderConfig, transformer::TransformerDecoderConfig {
    d_model, d_ff, n_heads, n_layers, dropout, norm_first, quiet_softmax, initializer, activation,
    layer_norm_eps,
});
interchange!(backend: TransformerDecoder<B>, transformer::TransformerDecoder<B> {
    d_model, d_ff, n_heads, n_layers, dropout, norm_first, quiet_softmax,
} each { layers });
interchange!(backend: TransformerDecoderRecord<B>, transformer::TransformerDecoderRecord<B> {
    d_model, d_ff, n_heads, n_layers, dropout, norm_first, quiet_softmax,
} each { layers });
interchange!(backend: TransformerDecoderLayer<B>, transformer::TransformerDecoderLayer<B> {
    cross_attn, self_attn, pwff, norm_1, norm_2, norm_3, dropout, norm_first,
});
interchange!(backend: TransformerDecoderLayerRecord<B>, transformer::TransformerDecoderLayerRecord<B> {
    cross_attn, self_attn, pwff, norm_1, norm_2, norm_3, dropout, norm_first,
});

fn convert_all<T: Into<U>, U>(items: Vec<T>) -> Vec<U> {
    items.into_iter().map(Into::into).collect()
}
