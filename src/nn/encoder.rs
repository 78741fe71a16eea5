//! [`TransformerEncoder`]: burn-nn's encoder of the same name over our [`MultiHeadAttention`].
use burn::config::Config;
use burn::module::{Content, DisplaySettings, Initializer, Module, ModuleDisplay};
use burn::nn::activation::ActivationConfig;
use burn::nn::transformer::{PositionWiseFeedForward, PositionWiseFeedForwardConfig};
use burn::nn::{Dropout, DropoutConfig, LayerNorm, LayerNormConfig};
use burn::tensor::{Bool, Tensor, backend::Backend};

use super::attend::Masks;
use super::cache::{KvCache, RowCache, SEQ_DIM, new_rows};
use super::mha::{MhaInput, MultiHeadAttention, MultiHeadAttentionConfig};
use super::sublayer::{Norms, feed_forward, residual};

/// Configuration to create a [`TransformerEncoder`] using the [init
/// function](TransformerEncoderConfig::init): burn-nn's `TransformerEncoderConfig`, the same
/// fields, defaults and serialized form.
#[derive(Config, Debug)]
pub struct TransformerEncoderConfig {
    /// The size of the model.
    pub d_model: usize,
    /// The size of the position-wise feed-forward network.
    pub d_ff: usize,
    /// The number of attention heads.
    pub n_heads: usize,
    /// The number of layers.
    pub n_layers: usize,
    /// The dropout rate of the residual paths, the feed-forward network and the attention
    /// probabilities. Default: 0.1
    #[config(default = 0.1)]
    pub dropout: f64,
    /// Layer norm will be applied first instead of after the other modules.
    #[config(default = false)]
    pub norm_first: bool,
    /// Use "quiet softmax" instead of regular softmax (see
    /// [`MultiHeadAttentionConfig::quiet_softmax`]).
    #[config(default = false)]
    pub quiet_softmax: bool,
    /// The type of function used to initialize neural network parameters.
    #[config(default = "Initializer::KaimingUniform { gain: 1.0 / 3.0f64.sqrt(), fan_out_only: false }")]
    pub initializer: Initializer,
    /// The activation function used in the position-wise feed-forward network. Default: Gelu
    #[config(default = "ActivationConfig::Gelu")]
    pub activation: ActivationConfig,
    /// The epsilon value for layer normalization. Default: 1e-5
    #[config(default = 1e-5)]
    pub layer_norm_eps: f64,
}

/// The transformer encoder of [Attention Is All You Need](https://arxiv.org/abs/1706.03762),
/// with burn-nn's parameters and record (a record of `burn::nn::transformer::TransformerEncoder`
/// loads into it and back).
///
/// # Params
///
/// - `layers`: transformer encoder layers with `d_model` input and output features.
#[derive(Module, Debug)]
#[module(custom_display)]
pub struct TransformerEncoder<B: Backend> {
    /// The transformer encoder layers.
    pub layers: Vec<TransformerEncoderLayer<B>>,
    /// The size of the model.
    pub d_model: usize,
    /// The size of the position-wise feed-forward network.
    pub d_ff: usize,
    /// The number of attention heads.
    pub n_heads: usize,
    /// The number of layers.
    pub n_layers: usize,
    /// The dropout rate.
    pub dropout: f64,
    /// Layer norm will be applied first instead of after the other modules.
    pub norm_first: bool,
    /// Use "quiet softmax" instead of regular softmax.
    pub quiet_softmax: bool,
}

impl<B: Backend> ModuleDisplay for TransformerEncoder<B> {
    fn custom_settings(&self) -> Option<DisplaySettings> {
        DisplaySettings::new().with_new_line_after_attribute(false).optional()
    }

    fn custom_content(&self, content: Content) -> Option<Content> {
        content
            .add("d_model", &self.d_model)
            .add("d_ff", &self.d_ff)
            .add("n_heads", &self.n_heads)
            .add("n_layers", &self.n_layers)
            .add("dropout", &self.dropout)
            .add("norm_first", &self.norm_first)
            .add("quiet_softmax", &self.quiet_softmax)
            .optional()
    }
}

/// [Transformer encoder](TransformerEncoder) forward pass input argument.
#[derive(Debug)]
pub struct TransformerEncoderInput<B: Backend> {
    tensor: Tensor<B, 3>,
    mask_pad: Option<Tensor<B, 2, Bool>>,
    mask_attn: Option<Tensor<B, 3, Bool>>,
}

impl<B: Backend> TransformerEncoderInput<B> {
    /// The input `[batch_size, seq_length, d_model]`.
    pub fn new(tensor: Tensor<B, 3>) -> Self {
        Self { tensor, mask_pad: None, mask_attn: None }
    }

    /// Register the padding mask `[batch_size, seq_length]`, `true` = padded.
    pub fn mask_pad(mut self, mask_pad: Tensor<B, 2, Bool>) -> Self {
        self.mask_pad = Some(mask_pad);
        self
    }

    /// Register the attention mask `[batch_size, seq_length, seq_length]`, `true` = masked.
    pub fn mask_attn(mut self, mask_attn: Tensor<B, 3, Bool>) -> Self {
        self.mask_attn = Some(mask_attn);
        self
    }
}

impl TransformerEncoderConfig {
    /// Initialize a new [transformer encoder](TransformerEncoder).
    pub fn init<B: Backend>(&self, device: &B::Device) -> TransformerEncoder<B> {
        TransformerEncoder {
            layers: (0..self.n_layers).map(|_| TransformerEncoderLayer::new(self, device)).collect(),
            d_model: self.d_model,
            d_ff: self.d_ff,
            n_heads: self.n_heads,
            n_layers: self.n_layers,
            dropout: self.dropout,
            norm_first: self.norm_first,
            quiet_softmax: self.quiet_softmax,
        }
    }
}

impl<B: Backend> TransformerEncoder<B> {
    /// Applies the forward pass on the input tensor.
    ///
    /// # Shapes
    ///
    /// - tensor: `[batch_size, seq_length, d_model]`
    /// - output: `[batch_size, seq_length, d_model]`
    pub fn forward(&self, input: TransformerEncoderInput<B>) -> Tensor<B, 3> {
        self.layers.iter().fold(input.tensor, |x, layer| {
            layer.forward(x, input.mask_pad.clone(), input.mask_attn.clone())
        })
    }

    /// Applies the forward pass on the input tensor using an autoregressive cache: `input`
    /// holds the whole sequence so far, the rows past the cached ones are computed, all rows
    /// are returned. With the causal mask of the whole sequence, or none when each call adds
    /// one row, the rows equal those of [`forward`](Self::forward) with the causal mask.
    ///
    /// # Shapes
    ///
    /// - tensor: `[batch_size, seq_length, d_model]`
    /// - output: `[batch_size, seq_length, d_model]`
    ///
    /// # Panics
    ///
    /// If the input has no row past the cached ones.
    pub fn forward_autoregressive_inference(
        &self,
        input: TransformerEncoderInput<B>,
        cache: &mut TransformerEncoderAutoregressiveCache<B>,
    ) -> Tensor<B, 3> {
        self.layers.iter().zip(&mut cache.layers).fold(input.tensor, |x, (layer, cache)| {
            layer.forward_autoregressive_inference(x, input.mask_pad.clone(), input.mask_attn.clone(), cache)
        })
    }

    /// Create an empty autoregressive cache.
    pub fn new_autoregressive_cache(&self) -> TransformerEncoderAutoregressiveCache<B> {
        TransformerEncoderAutoregressiveCache {
            layers: self.layers.iter().map(|_| TransformerEncoderLayerAutoregressiveCache::empty()).collect(),
        }
    }
}

/// Transformer encoder layer module.
#[derive(Module, Debug)]
pub struct TransformerEncoderLayer<B: Backend> {
    /// Multi-head self-attention sub-layer.
    pub mha: MultiHeadAttention<B>,
    /// Position-wise feed-forward sub-layer.
    pub pwff: PositionWiseFeedForward<B>,
    /// Layer normalization around the feed-forward sub-layer.
    pub norm_1: LayerNorm<B>,
    /// Layer normalization around the attention sub-layer.
    pub norm_2: LayerNorm<B>,
    /// Dropout applied to the residual paths.
    pub dropout: Dropout,
    /// If `true`, layer normalization comes before the sub-layers (pre-norm), else after
    /// (post-norm).
    pub norm_first: bool,
}

impl<B: Backend> TransformerEncoderLayer<B> {
    /// Create a new transformer encoder layer from the given configuration.
    pub fn new(config: &TransformerEncoderConfig, device: &B::Device) -> Self {
        let norm = || LayerNormConfig::new(config.d_model).with_epsilon(config.layer_norm_eps).init(device);
        Self {
            mha: MultiHeadAttentionConfig::new(config.d_model, config.n_heads)
                .with_initializer(config.initializer.clone())
                .with_dropout(config.dropout)
                .with_quiet_softmax(config.quiet_softmax)
                .init(device),
            pwff: PositionWiseFeedForwardConfig::new(config.d_model, config.d_ff)
                .with_initializer(config.initializer.clone())
                .with_dropout(config.dropout)
                .with_activation(config.activation.clone())
                .init(device),
            norm_1: norm(),
            norm_2: norm(),
            dropout: DropoutConfig::new(config.dropout).init(),
            norm_first: config.norm_first,
        }
    }

    /// Applies the forward pass on the input tensor.
    ///
    /// # Shapes
    ///
    /// - input: `[batch_size, seq_length, d_model]`
    /// - output: `[batch_size, seq_length, d_model]`
    pub fn forward(
        &self,
        input: Tensor<B, 3>,
        mask_pad: Option<Tensor<B, 2, Bool>>,
        mask_attn: Option<Tensor<B, 3, Bool>>,
    ) -> Tensor<B, 3> {
        let masks = Masks { pad: mask_pad, attn: mask_attn };
        self.sublayers(input, |x| self.mha.forward(MhaInput::self_attn(x).with_masks(masks)).context)
    }

    /// Applies the forward pass using an autoregressive cache (see
    /// [`TransformerEncoder::forward_autoregressive_inference`]): the rows of `input` past the
    /// cached ones go through the layer, their attention reads the cached keys and values.
    ///
    /// # Panics
    ///
    /// If the input has no row past the cached ones.
    pub fn forward_autoregressive_inference(
        &self,
        input: Tensor<B, 3>,
        mask_pad: Option<Tensor<B, 2, Bool>>,
        mask_attn: Option<Tensor<B, 3, Bool>>,
        cache: &mut TransformerEncoderLayerAutoregressiveCache<B>,
    ) -> Tensor<B, 3> {
        let new = new_rows(input, cache.output.len());
        let masks = Masks { pad: mask_pad, attn: mask_attn }.last_rows(new.dims()[SEQ_DIM]);
        let output = self.sublayers(new, |x| {
            self.mha
                .forward_new_rows(x.clone(), x.clone(), x, masks, &mut cache.attention)
                .unwrap_or_else(|error| panic!("TransformerEncoderLayer: {error}"))
        });
        cache.output.append(output)
    }

    /// The layer on the rows `x`, with `attention` the self-attention of those rows (see
    /// [`residual`] for the two norms of each sub-layer).
    fn sublayers(&self, x: Tensor<B, 3>, attention: impl FnOnce(Tensor<B, 3>) -> Tensor<B, 3>) -> Tensor<B, 3> {
        let norm_first = self.norm_first;
        let x = residual(x, Norms { norm_first, pre: &self.norm_2, post: &self.norm_1 }, &self.dropout, attention);
        residual(x, Norms { norm_first, pre: &self.norm_1, post: &self.norm_2 }, &self.dropout, |x| {
            feed_forward(&self.pwff, x)
        })
    }
}

/// Autoregressive cache for a single [transformer encoder layer](TransformerEncoderLayer): the
/// keys and values of its attention and its outputs so far.
///
/// Unlike burn-nn's, which also caches the queries, both layer norms and the feed-forward
/// network row by row, the new rows go through the whole layer at once.
pub struct TransformerEncoderLayerAutoregressiveCache<B: Backend> {
    attention: KvCache<B>,
    output: RowCache<B, 3>,
}

impl<B: Backend> TransformerEncoderLayerAutoregressiveCache<B> {
    /// Create an empty cache.
    pub fn empty() -> Self {
        Self { attention: KvCache::growing(), output: RowCache::empty(SEQ_DIM) }
    }
}

/// Autoregressive cache for the [transformer encoder](TransformerEncoder), to be used during
/// inference when decoding tokens.
pub struct TransformerEncoderAutoregressiveCache<B: Backend> {
    layers: Vec<TransformerEncoderLayerAutoregressiveCache<B>>,
}
