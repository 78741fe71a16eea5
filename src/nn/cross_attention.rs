//! [`CrossAttention`]: burn-nn's module of the same name (grouped-query cross-attention to a
//! context), its attention fused: the `n_heads_kv` key and value heads are read in place by
//! the grouped-query attention of [`flash_attention`](crate::flash_attention), never repeated.
use burn::config::Config;
use burn::module::{Initializer, Module};
use burn::nn::{Dropout, DropoutConfig, Linear, LinearConfig};
use burn::tensor::{Bool, Tensor, backend::Backend};

use super::attend::{AttentionSettings, Masks, attend};
use super::cache::KvCache;
use crate::api::AttentionError;

/// Configuration to create a [`CrossAttention`] layer using the [init
/// function](CrossAttentionConfig::init): burn-nn's `CrossAttentionConfig`, the same fields,
/// defaults and serialized form.
#[derive(Config, Debug)]
pub struct CrossAttentionConfig {
    /// Dimension of the query (e.g. the decoder state).
    pub d_model: usize,
    /// Dimension of the context (e.g. the encoder's embeddings).
    pub d_context: usize,
    /// Number of heads for the query.
    pub n_heads: usize,
    /// Number of heads for the key and value: 1 for multi-query attention, `n_heads` for
    /// multi-head attention, a divisor of `n_heads` for grouped-query attention.
    pub n_heads_kv: usize,
    /// Dimension of a single head.
    pub d_head: usize,
    /// Dropout rate on the attention probabilities (in training). Default: 0.1
    #[config(default = 0.1)]
    pub dropout: f64,
    /// Kept for compatibility with burn-nn, unused: masked keys are excluded exactly. Default:
    /// -1.0e4
    #[config(default = -1.0e4)]
    pub min_float: f64,
    /// Use quiet softmax, which lets a head attend to nothing. Default: false
    #[config(default = false)]
    pub quiet_softmax: bool,
}

/// Cross-attention of a query sequence to a context sequence with `n_heads` query heads and
/// `n_heads_kv` key and value heads, with burn-nn's parameters and record (a record of
/// `burn::nn::attention::CrossAttention` loads into it and back).
///
/// # Params
///
/// - `query`: [`Linear`] `d_model` → `n_heads · d_head`.
/// - `key`, `value`: [`Linear`] `d_context` → `n_heads_kv · d_head`.
/// - `output`: [`Linear`] `n_heads · d_head` → `d_model`.
///
/// Query head `h` reads key and value head `h / (n_heads / n_heads_kv)`, as burn-nn's
/// repetition of the key and value heads lays them out.
#[derive(Module, Debug)]
pub struct CrossAttention<B: Backend> {
    query: Linear<B>,
    key: Linear<B>,
    value: Linear<B>,
    output: Linear<B>,
    dropout: Dropout,
    n_heads: usize,
    n_heads_kv: usize,
    d_head: usize,
    scale: f64,
    min_float: f64,
    quiet_softmax: bool,
}

/// Cache for the [`CrossAttention`] layer, to be used during inference when the context is
/// constant: the keys and values are projected from the first call's context, then reused.
pub struct CrossAttentionCache<B: Backend> {
    kv: KvCache<B>,
}

impl<B: Backend> CrossAttentionCache<B> {
    /// Create a new empty cache.
    pub fn new() -> Self {
        Self { kv: KvCache::fixed() }
    }
}

impl<B: Backend> Default for CrossAttentionCache<B> {
    fn default() -> Self {
        Self::new()
    }
}

impl CrossAttentionConfig {
    /// Initializes a new cross-attention module.
    ///
    /// # Panics
    ///
    /// If `n_heads_kv` does not divide `n_heads` (as burn-nn's).
    pub fn init<B: Backend>(&self, device: &B::Device) -> CrossAttention<B> {
        assert_eq!(self.n_heads % self.n_heads_kv, 0, "Query heads must be divisible by KV heads");
        let linear = |d_input, d_output| {
            LinearConfig::new(d_input, d_output)
                .with_initializer(Initializer::KaimingUniform {
                    gain: 1.0 / (self.d_head as f64).sqrt(),
                    fan_out_only: false,
                })
                .init(device)
        };
        CrossAttention {
            query: linear(self.d_model, self.n_heads * self.d_head),
            key: linear(self.d_context, self.n_heads_kv * self.d_head),
            value: linear(self.d_context, self.n_heads_kv * self.d_head),
            output: linear(self.n_heads * self.d_head, self.d_model),
            dropout: DropoutConfig::new(self.dropout).init(),
            n_heads: self.n_heads,
            n_heads_kv: self.n_heads_kv,
            d_head: self.d_head,
            scale: 1.0 / (self.d_head as f64).sqrt(),
            min_float: self.min_float,
            quiet_softmax: self.quiet_softmax,
        }
    }
}

impl<B: Backend> CrossAttention<B> {
    /// Applies cross-attention of `query` `[batch, seq_len_query, d_model]` to `context`
    /// `[batch, seq_len_context, d_context]`; `mask` `[batch, seq_len_context]`, `true` =
    /// padded context position. Output `[batch, seq_len_query, d_model]`.
    ///
    /// # Panics
    ///
    /// Where [`try_forward`](Self::try_forward) returns an error.
    pub fn forward(&self, query: Tensor<B, 3>, context: Tensor<B, 3>, mask: Option<Tensor<B, 2, Bool>>) -> Tensor<B, 3> {
        self.try_forward(query, context, mask).unwrap_or_else(|error| panic!("CrossAttention: {error}"))
    }

    /// [`forward`](Self::forward), with an error instead of a panic when the mask does not fit
    /// the context or the dropout probability is 1.
    pub fn try_forward(
        &self,
        query: Tensor<B, 3>,
        context: Tensor<B, 3>,
        mask: Option<Tensor<B, 2, Bool>>,
    ) -> Result<Tensor<B, 3>, AttentionError> {
        let key = self.heads(context.clone(), &self.key, self.n_heads_kv);
        let value = self.heads(context, &self.value, self.n_heads_kv);
        self.attend(query, key, value, mask)
    }

    /// [`forward`](Self::forward) with the keys and values of the context cached: they are
    /// projected on the first call only, and `context` is then ignored.
    ///
    /// # Panics
    ///
    /// Where [`try_forward`](Self::try_forward) returns an error.
    pub fn forward_cache(
        &self,
        query: Tensor<B, 3>,
        context: Tensor<B, 3>,
        mask: Option<Tensor<B, 2, Bool>>,
        cache: &mut CrossAttentionCache<B>,
    ) -> Tensor<B, 3> {
        let (key, value) = cache.kv.update(
            context.clone(),
            context,
            |context| self.heads(context, &self.key, self.n_heads_kv),
            |context| self.heads(context, &self.value, self.n_heads_kv),
        );
        self.attend(query, key, value, mask).unwrap_or_else(|error| panic!("CrossAttention: {error}"))
    }

    /// `[batch, seq, features]` → `[batch, heads, seq, d_head]` through `linear`.
    fn heads(&self, x: Tensor<B, 3>, linear: &Linear<B>, heads: usize) -> Tensor<B, 4> {
        let [batch, seq, _] = x.dims();
        linear.forward(x).reshape([batch, seq, heads, self.d_head]).swap_dims(1, 2)
    }

    fn attend(
        &self,
        query: Tensor<B, 3>,
        key: Tensor<B, 4>,
        value: Tensor<B, 4>,
        mask: Option<Tensor<B, 2, Bool>>,
    ) -> Result<Tensor<B, 3>, AttentionError> {
        let [batch, seq_q, _] = query.dims();
        let query = self.heads(query, &self.query, self.n_heads);
        let settings =
            AttentionSettings { scale: Some(self.scale), quiet_softmax: self.quiet_softmax, dropout: self.dropout.prob };
        let context = attend(query, key, value, Masks { pad: mask, attn: None }, settings)?;
        Ok(self.output.forward(context.swap_dims(1, 2).reshape([batch, seq_q, self.n_heads * self.d_head])))
    }
}
