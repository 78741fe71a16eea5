//! Caches for autoregressive inference: each call passes the whole sequence so far, and only
//! the rows past the cached ones are computed (burn-nn's convention).
use burn::tensor::{Tensor, backend::Backend};

/// The rows computed so far of a function applied row by row along the sequence, held along
/// `dim` (1 for `[batch, seq, ..]`, 2 for the heads' `[batch, heads, seq, ..]`).
pub(crate) struct RowCache<B: Backend, const D: usize> {
    rows: Option<Tensor<B, D>>,
    dim: usize,
}

impl<B: Backend, const D: usize> RowCache<B, D> {
    pub(crate) fn empty(dim: usize) -> Self {
        Self { rows: None, dim }
    }

    /// How many rows are cached.
    pub(crate) fn len(&self) -> usize {
        self.rows.as_ref().map_or(0, |rows| rows.dims()[self.dim])
    }

    /// `new` rows appended to the cached ones; returns them all.
    pub(crate) fn append(&mut self, new: Tensor<B, D>) -> Tensor<B, D> {
        let rows = match self.rows.take() {
            Some(old) => Tensor::cat(vec![old, new], self.dim),
            None => new,
        };
        self.rows = Some(rows.clone());
        rows
    }

    /// The cached rows, computed by `func` from `input` on the first call only (a fixed memory,
    /// as the keys and values of cross-attention).
    pub(crate) fn once(&mut self, input: Tensor<B, 3>, func: impl FnOnce(Tensor<B, 3>) -> Tensor<B, D>) -> Tensor<B, D> {
        self.rows.get_or_insert_with(|| func(input)).clone()
    }
}

/// The rows of `input` `[batch, seq, features]` from `cached` on.
///
/// # Panics
///
/// If there are none.
pub(crate) fn new_rows<B: Backend>(input: Tensor<B, 3>, cached: usize) -> Tensor<B, 3> {
    let [batch, seq, features] = input.dims();
    assert!(
        seq > cached,
        "autoregressive cache: the input has {seq} rows and the cache already {cached}; each call \
         passes the whole sequence so far with at least one new row"
    );
    input.slice([0..batch, cached..seq, 0..features])
}

/// The projected keys and values `[batch, n_heads, seq_kv, d_k]` of one attention layer.
pub(crate) struct KvCache<B: Backend> {
    key: RowCache<B, 4>,
    value: RowCache<B, 4>,
    /// Computed from the first call's inputs, then reused (cross-attention to a fixed memory);
    /// else they grow with the sequence (self-attention).
    fixed: bool,
}

/// The heads' sequence axis of `[batch, n_heads, seq, d_k]`.
const HEADS_SEQ_DIM: usize = 2;
/// The sequence axis of `[batch, seq, d_model]`.
pub(crate) const SEQ_DIM: usize = 1;

impl<B: Backend> KvCache<B> {
    /// Keys and values that grow with the sequence.
    pub(crate) fn growing() -> Self {
        Self { key: RowCache::empty(HEADS_SEQ_DIM), value: RowCache::empty(HEADS_SEQ_DIM), fixed: false }
    }

    /// Keys and values of a memory given once.
    pub(crate) fn fixed() -> Self {
        Self { fixed: true, ..Self::growing() }
    }

    /// Whether the keys and values are those of a fixed memory.
    pub(crate) fn is_fixed(&self) -> bool {
        self.fixed
    }

    /// How many key rows are cached.
    pub(crate) fn len(&self) -> usize {
        self.key.len()
    }

    /// All keys and values: `key` and `value` are the new rows (self-attention: projected and
    /// appended) or the memory (cross-attention: projected on the first call only).
    pub(crate) fn update(
        &mut self,
        key: Tensor<B, 3>,
        value: Tensor<B, 3>,
        project_key: impl FnOnce(Tensor<B, 3>) -> Tensor<B, 4>,
        project_value: impl FnOnce(Tensor<B, 3>) -> Tensor<B, 4>,
    ) -> (Tensor<B, 4>, Tensor<B, 4>) {
        if self.fixed {
            (self.key.once(key, project_key), self.value.once(value, project_value))
        } else {
            (self.key.append(project_key(key)), self.value.append(project_value(value)))
        }
    }
}

/// Cache for the [`MultiHeadAttention`](super::MultiHeadAttention) layer, to be used during
/// inference when decoding tokens.
///
/// It holds the projected keys and values `[batch, n_heads, seq, d_k]` and the outputs
/// `[batch, seq, d_model]` of the rows done. A call computes only the new query rows (burn-nn's
/// cache also keeps the projected queries and recomputes the attention of every row, then
/// keeps the last one): they attend to all cached and new keys with the matching last rows of
/// `mask_attn`. Without `mask_attn` a single new row (the last) sees every key, which is the
/// causal (bottom-right aligned) attention of that row; to compute several new rows in one
/// call, pass the causal mask (`generate_autoregressive_mask`) of the whole sequence.
pub struct MhaCache<B: Backend> {
    pub(crate) kv: KvCache<B>,
    pub(crate) output: RowCache<B, 3>,
}

impl<B: Backend> MhaCache<B> {
    /// Initialize a cache for autoregressive inference.
    pub fn autoregressive() -> Self {
        Self { kv: KvCache::growing(), output: RowCache::empty(SEQ_DIM) }
    }

    /// Initialize a cache for autoregressive inference, but with a fixed memory used for keys
    /// and values (cross-attention).
    pub fn autoregressive_cross_attention() -> Self {
        Self { kv: KvCache::fixed(), output: RowCache::empty(SEQ_DIM) }
    }
}
