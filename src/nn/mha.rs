//! [`MultiHeadAttention`]: burn-nn's module of the same name, its attention fused.
use burn::config::Config;
use burn::module::{Content, DisplaySettings, Initializer, Module, ModuleDisplay};
use burn::nn::{Dropout, DropoutConfig, Gelu, Linear, LinearConfig};
use burn::tensor::{Bool, Tensor, backend::Backend};

use super::attend::{AttentionSettings, Masks, attend, attention_weights};
use super::cache::{KvCache, MhaCache, SEQ_DIM, new_rows};
use crate::api::AttentionError;

/// Configuration to create a [`MultiHeadAttention`] layer using the [init
/// function](MultiHeadAttentionConfig::init): burn-nn's `MultiHeadAttentionConfig`, the same
/// fields, defaults and serialized form.
#[derive(Config, Debug)]
pub struct MultiHeadAttentionConfig {
    /// The size of each linear layer.
    pub d_model: usize,
    /// The number of heads.
    pub n_heads: usize,
    /// The dropout rate, here on the attention probabilities (burn-nn: on the scores before
    /// the softmax). Default: 0.1
    #[config(default = 0.1)]
    pub dropout: f64,
    /// Kept for compatibility with burn-nn, unused: burn-nn fills masked scores with this
    /// value, the fused attention excludes them exactly. Default: -1.0e4
    #[config(default = -1.0e4)]
    pub min_float: f64,
    /// Use "quiet softmax" instead of regular softmax: `exp(s_j) / (1 + Σ_k exp(s_k))`, which
    /// lets a head attend to nothing.
    ///
    /// Reference: <https://www.evanmiller.org/attention-is-off-by-one.html>
    #[config(default = false)]
    pub quiet_softmax: bool,
    /// The type of function used to initialize neural network parameters.
    #[config(default = "Initializer::KaimingUniform { gain: 1.0 / 3.0f64.sqrt(), fan_out_only: false }")]
    pub initializer: Initializer,
}

/// The multi-head attention module of [Attention Is All You
/// Need](https://arxiv.org/abs/1706.03762), with burn-nn's parameters and record: a record of
/// `burn::nn::attention::MultiHeadAttention` loads into it and back (the `From` impls convert
/// modules and records in memory).
///
/// # Params
///
/// - `query`, `key`, `value`, `output`: [`Linear`] layers with `d_model` input and output
///   features.
///
/// The attention runs through [`flash_attention`](crate::flash_attention) (fused kernels on
/// `Flash<..>`, Burn ops elsewhere): see [the module documentation](super) for what differs
/// from burn-nn.
#[derive(Module, Debug)]
#[module(custom_display)]
pub struct MultiHeadAttention<B: Backend> {
    /// Linear layer to transform the input features into the query space.
    pub query: Linear<B>,
    /// Linear layer to transform the input features into the key space.
    pub key: Linear<B>,
    /// Linear layer to transform the input features into the value space.
    pub value: Linear<B>,
    /// Linear layer to transform the output features back to the original space.
    pub output: Linear<B>,
    /// Its probability is the dropout on the attention probabilities (in training).
    pub dropout: Dropout,
    /// Unused, as in burn-nn (a field of its record).
    pub activation: Gelu,
    /// The size of each linear layer.
    pub d_model: usize,
    /// The number of heads.
    pub n_heads: usize,
    /// Size of the key and query vectors.
    pub d_k: usize,
    /// Unused: masked scores are excluded exactly (burn-nn fills them with this value).
    pub min_float: f64,
    /// Use "quiet softmax" instead of regular softmax.
    pub quiet_softmax: bool,
}

impl<B: Backend> ModuleDisplay for MultiHeadAttention<B> {
    fn custom_settings(&self) -> Option<DisplaySettings> {
        DisplaySettings::new().with_new_line_after_attribute(false).optional()
    }

    fn custom_content(&self, content: Content) -> Option<Content> {
        content
            .add("d_model", &self.d_model)
            .add("n_heads", &self.n_heads)
            .add("d_k", &self.d_k)
            .add("dropout", &self.dropout.prob)
            .add("min_float", &self.min_float)
            .add("quiet_softmax", &self.quiet_softmax)
            .optional()
    }
}

impl MultiHeadAttentionConfig {
    /// Initialize a new [multi-head attention](MultiHeadAttention) module.
    pub fn init<B: Backend>(&self, device: &B::Device) -> MultiHeadAttention<B> {
        let linear = || {
            LinearConfig::new(self.d_model, self.d_model)
                .with_initializer(self.initializer.clone())
                .init(device)
        };
        MultiHeadAttention {
            query: linear(),
            key: linear(),
            value: linear(),
            output: linear(),
            dropout: DropoutConfig::new(self.dropout).init(),
            activation: Gelu::new(),
            d_model: self.d_model,
            n_heads: self.n_heads,
            d_k: self.d_model / self.n_heads,
            min_float: self.min_float,
            quiet_softmax: self.quiet_softmax,
        }
    }
}

/// [Multi-head attention](MultiHeadAttention) forward pass input argument.
#[derive(Debug, Clone)]
pub struct MhaInput<B: Backend> {
    /// `[batch_size, seq_length_1, d_model]`
    query: Tensor<B, 3>,
    /// `[batch_size, seq_length_2, d_model]`
    key: Tensor<B, 3>,
    /// `[batch_size, seq_length_2, d_model]`
    value: Tensor<B, 3>,
    mask_pad: Option<Tensor<B, 2, Bool>>,
    mask_attn: Option<Tensor<B, 3, Bool>>,
}

impl<B: Backend> MhaInput<B> {
    /// Self-attention: the query, key and value are `tensor` `[batch_size, seq_length,
    /// d_model]`.
    pub fn self_attn(tensor: Tensor<B, 3>) -> Self {
        Self::new(tensor.clone(), tensor.clone(), tensor)
    }

    /// Query `[batch_size, seq_length_1, d_model]`, key and value `[batch_size, seq_length_2,
    /// d_model]`.
    pub fn new(query: Tensor<B, 3>, key: Tensor<B, 3>, value: Tensor<B, 3>) -> Self {
        Self { query, key, value, mask_pad: None, mask_attn: None }
    }

    /// Register the padding mask `[batch_size, seq_length_2]`, `true` = padded key.
    pub fn mask_pad(mut self, mask_pad: Tensor<B, 2, Bool>) -> Self {
        self.mask_pad = Some(mask_pad);
        self
    }

    /// Register the attention mask `[batch_size, seq_length_1, seq_length_2]`, `true` =
    /// masked, the same for every head.
    pub fn mask_attn(mut self, mask_attn: Tensor<B, 3, Bool>) -> Self {
        self.mask_attn = Some(mask_attn);
        self
    }

    pub(crate) fn masks(&self) -> Masks<B> {
        Masks { pad: self.mask_pad.clone(), attn: self.mask_attn.clone() }
    }

    pub(crate) fn with_masks(self, masks: Masks<B>) -> Self {
        Self { mask_pad: masks.pad, mask_attn: masks.attn, ..self }
    }
}

/// [Multi-head attention](MultiHeadAttention) outputs.
#[derive(Debug, Clone)]
pub struct MhaOutput<B: Backend> {
    /// The attention weights `[batch_size, n_heads, seq_length_1, seq_length_2]`, only from
    /// [`MultiHeadAttention::forward_with_weights`]: `None` from `forward` and `forward_cache`,
    /// which never materialize them (burn-nn always returns them).
    pub weights: Option<Tensor<B, 4>>,
    /// The context tensor `[batch_size, seq_length_1, d_model]`.
    pub context: Tensor<B, 3>,
}

impl<B: Backend> MultiHeadAttention<B> {
    /// Applies the forward pass on the input tensors; `weights` is `None`.
    ///
    /// # Shapes
    ///
    /// - query: `[batch_size, seq_length_1, d_model]`
    /// - key: `[batch_size, seq_length_2, d_model]`
    /// - value: `[batch_size, seq_length_2, d_model]`
    /// - output: `[batch_size, seq_length_1, d_model]`
    ///
    /// # Panics
    ///
    /// Where [`try_forward`](Self::try_forward) returns an error.
    pub fn forward(&self, input: MhaInput<B>) -> MhaOutput<B> {
        self.try_forward(input).unwrap_or_else(|error| panic!("MultiHeadAttention: {error}"))
    }

    /// [`forward`](Self::forward), with an error instead of a panic when the masks do not fit
    /// the inputs or the dropout probability is 1.
    pub fn try_forward(&self, input: MhaInput<B>) -> Result<MhaOutput<B>, AttentionError> {
        let (query, key, value, masks) = self.project(input);
        let context = self.output.forward(self.context(query, key, value, masks)?);
        Ok(MhaOutput { weights: None, context })
    }

    /// [`forward`](Self::forward), and the attention weights, computed apart with Burn ops
    /// (`[batch_size, n_heads, seq_length_1, seq_length_2]` materialized): the probabilities
    /// before dropout (the ones the context used when dropout is off, as in inference).
    /// Masked positions are exactly 0.
    ///
    /// # Panics
    ///
    /// Where [`try_forward`](Self::try_forward) returns an error.
    pub fn forward_with_weights(&self, input: MhaInput<B>) -> MhaOutput<B> {
        let (query, key, value, masks) = self.project(input);
        let weights = attention_weights(query.clone(), key.clone(), masks.clone(), self.quiet_softmax);
        let context = self
            .context(query, key, value, masks)
            .unwrap_or_else(|error| panic!("MultiHeadAttention: {error}"));
        MhaOutput { weights: Some(weights), context: self.output.forward(context) }
    }

    /// Applies the forward pass using a cache: `input` holds the whole sequence so far and the
    /// rows past the cached ones are computed (see [`MhaCache`] for the masks); returns all
    /// rows, `weights` `None`.
    ///
    /// # Shapes
    ///
    /// - query: `[batch_size, seq_length_1, d_model]`
    /// - key: `[batch_size, seq_length_2, d_model]`
    /// - value: `[batch_size, seq_length_2, d_model]`
    /// - output: `[batch_size, seq_length_1, d_model]`
    ///
    /// # Panics
    ///
    /// If the query has no row past the cached ones, or where [`try_forward`](Self::try_forward)
    /// returns an error.
    pub fn forward_cache(&self, input: MhaInput<B>, cache: &mut MhaCache<B>) -> MhaOutput<B> {
        let masks = input.masks();
        let MhaInput { query, key, value, .. } = input;
        let query = new_rows(query, cache.output.len());
        let masks = masks.last_rows(query.dims()[SEQ_DIM]);
        let (key, value) = if cache.kv.is_fixed() {
            (key, value)
        } else {
            (new_rows(key, cache.kv.len()), new_rows(value, cache.kv.len()))
        };
        let context = self
            .forward_new_rows(query, key, value, masks, &mut cache.kv)
            .unwrap_or_else(|error| panic!("MultiHeadAttention: {error}"));
        MhaOutput { weights: None, context: cache.output.append(context) }
    }

    /// The outputs `[batch, rows, d_model]` of new query rows `[batch, rows, d_model]`, which
    /// attend to the cached keys and values and to those of `key` and `value` (the new rows of
    /// self-attention, or the memory of cross-attention, see [`KvCache::update`]); `masks` are
    /// those of the new rows.
    pub(crate) fn forward_new_rows(
        &self,
        query: Tensor<B, 3>,
        key: Tensor<B, 3>,
        value: Tensor<B, 3>,
        masks: Masks<B>,
        kv: &mut KvCache<B>,
    ) -> Result<Tensor<B, 3>, AttentionError> {
        let query = self.heads(query, &self.query);
        let (key, value) = kv.update(key, value, |key| self.heads(key, &self.key), |value| {
            self.heads(value, &self.value)
        });
        Ok(self.output.forward(self.context(query, key, value, masks)?))
    }

    /// The heads of the query, key and value, and the masks.
    fn project(&self, input: MhaInput<B>) -> (Tensor<B, 4>, Tensor<B, 4>, Tensor<B, 4>, Masks<B>) {
        let masks = input.masks();
        let query = self.heads(input.query, &self.query);
        let key = self.heads(input.key, &self.key);
        let value = self.heads(input.value, &self.value);
        (query, key, value, masks)
    }

    /// `[batch, seq, d_model]` → `[batch, n_heads, seq, d_k]` through `linear`.
    fn heads(&self, x: Tensor<B, 3>, linear: &Linear<B>) -> Tensor<B, 4> {
        let [batch, seq, _] = x.dims();
        linear.forward(x).reshape([batch, seq, self.n_heads, self.d_k]).swap_dims(1, 2)
    }

    /// The attention of the heads, `[batch, seq_q, d_model]` (before the output layer).
    fn context(
        &self,
        query: Tensor<B, 4>,
        key: Tensor<B, 4>,
        value: Tensor<B, 4>,
        masks: Masks<B>,
    ) -> Result<Tensor<B, 3>, AttentionError> {
        let [batch, _, seq_q, _] = query.dims();
        let settings = AttentionSettings { scale: None, quiet_softmax: self.quiet_softmax, dropout: self.dropout.prob };
        let context = attend(query, key, value, masks, settings)?;
        Ok(context.swap_dims(1, 2).reshape([batch, seq_q, self.n_heads * self.d_k]))
    }
}
