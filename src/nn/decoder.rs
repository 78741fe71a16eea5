//! [`TransformerDecoder`]: burn-nn's decoder of the same name over our [`MultiHeadAttention`].
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

/// Configuration to create a [`TransformerDecoder`] using the [init
/// function](TransformerDecoderConfig::init): burn-nn's `TransformerDecoderConfig`, the same
/// fields, defaults and serialized form.
#[derive(Config, Debug)]
pub struct TransformerDecoderConfig {
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

/// The transformer decoder of [Attention Is All You Need](https://arxiv.org/abs/1706.03762),
/// with burn-nn's parameters and record (a record of `burn::nn::transformer::TransformerDecoder`
/// loads into it and back).
///
/// # Params
///
/// - `layers`: transformer decoder layers with `d_model` input and output features.
#[derive(Module, Debug)]
#[module(custom_display)]
pub struct TransformerDecoder<B: Backend> {
    /// The transformer decoder layers.
    pub layers: Vec<TransformerDecoderLayer<B>>,
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

impl<B: Backend> ModuleDisplay for TransformerDecoder<B> {
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

impl TransformerDecoderConfig {
    /// Initialize a new [transformer decoder](TransformerDecoder).
    pub fn init<B: Backend>(&self, device: &B::Device) -> TransformerDecoder<B> {
        TransformerDecoder {
            layers: (0..self.n_layers).map(|_| TransformerDecoderLayer::new(self, device)).collect(),
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

/// [Transformer decoder](TransformerDecoder) forward pass input argument.
#[derive(Debug)]
pub struct TransformerDecoderInput<B: Backend> {
    target: Tensor<B, 3>,
    target_mask_pad: Option<Tensor<B, 2, Bool>>,
    target_mask_attn: Option<Tensor<B, 3, Bool>>,
    memory: Tensor<B, 3>,
    memory_mask_pad: Option<Tensor<B, 2, Bool>>,
    memory_mask_attn: Option<Tensor<B, 3, Bool>>,
}

impl<B: Backend> TransformerDecoderInput<B> {
    /// The target `[batch_size, seq_length, d_model]` and the memory (the encoder's output)
    /// `[batch_size, seq_length_memory, d_model]`.
    pub fn new(target: Tensor<B, 3>, memory: Tensor<B, 3>) -> Self {
        Self {
            target,
            target_mask_pad: None,
            target_mask_attn: None,
            memory,
            memory_mask_pad: None,
            memory_mask_attn: None,
        }
    }

    /// Register the memory padding mask `[batch_size, seq_length_memory]`, `true` = padded.
    pub fn memory_mask_pad(mut self, mask_pad: Tensor<B, 2, Bool>) -> Self {
        self.memory_mask_pad = Some(mask_pad);
        self
    }

    /// Register the memory attention mask `[batch_size, seq_length, seq_length_memory]`.
    pub fn memory_mask_attn(mut self, mask_attn: Tensor<B, 3, Bool>) -> Self {
        self.memory_mask_attn = Some(mask_attn);
        self
    }

    /// Register the target padding mask `[batch_size, seq_length]`, `true` = padded.
    pub fn target_mask_pad(mut self, mask_pad: Tensor<B, 2, Bool>) -> Self {
        self.target_mask_pad = Some(mask_pad);
        self
    }

    /// Register the target attention mask `[batch_size, seq_length, seq_length]` (the causal
    /// mask when training a generator).
    pub fn target_mask_attn(mut self, mask_attn: Tensor<B, 3, Bool>) -> Self {
        self.target_mask_attn = Some(mask_attn);
        self
    }

    fn target_masks(&self) -> Masks<B> {
        Masks { pad: self.target_mask_pad.clone(), attn: self.target_mask_attn.clone() }
    }

    fn memory_masks(&self) -> Masks<B> {
        Masks { pad: self.memory_mask_pad.clone(), attn: self.memory_mask_attn.clone() }
    }
}

impl<B: Backend> TransformerDecoder<B> {
    /// Applies the forward pass.
    ///
    /// # Shapes
    ///
    /// - target: `[batch_size, seq_length, d_model]`
    /// - memory: `[batch_size, seq_length_memory, d_model]`
    /// - output: `[batch_size, seq_length, d_model]`
    pub fn forward(&self, input: TransformerDecoderInput<B>) -> Tensor<B, 3> {
        self.layers.iter().fold(input, |input, layer| layer.forward(input)).target
    }

    /// Applies the forward pass using an autoregressive cache: the target holds the whole
    /// sequence so far, its rows past the cached ones are computed (the memory's keys and values
    /// are projected on the first call only), all rows are returned. With the causal target
    /// mask of the whole sequence, or none when each call adds one row, the rows equal those of
    /// [`forward`](Self::forward) with the causal mask.
    ///
    /// # Panics
    ///
    /// If the target has no row past the cached ones.
    pub fn forward_autoregressive_inference(
        &self,
        input: TransformerDecoderInput<B>,
        cache: &mut TransformerDecoderAutoregressiveCache<B>,
    ) -> Tensor<B, 3> {
        self.layers
            .iter()
            .zip(&mut cache.layers)
            .fold(input, |input, (layer, cache)| layer.forward_autoregressive_inference(input, cache))
            .target
    }

    /// Create an empty autoregressive cache.
    pub fn new_autoregressive_cache(&self) -> TransformerDecoderAutoregressiveCache<B> {
        TransformerDecoderAutoregressiveCache {
            layers: self.layers.iter().map(|_| TransformerDecoderLayerAutoregressiveCache::empty()).collect(),
        }
    }
}

/// Transformer decoder layer module.
#[derive(Module, Debug)]
pub struct TransformerDecoderLayer<B: Backend> {
    /// Cross-attention to the memory.
    pub cross_attn: MultiHeadAttention<B>,
    /// Self-attention of the target.
    pub self_attn: MultiHeadAttention<B>,
    /// Position-wise feed-forward sub-layer.
    pub pwff: PositionWiseFeedForward<B>,
    /// Layer normalization after the self-attention (post-norm) or before the cross-attention
    /// (pre-norm).
    pub norm_1: LayerNorm<B>,
    /// After the cross-attention (post-norm) or before the feed-forward network (pre-norm).
    pub norm_2: LayerNorm<B>,
    /// After the feed-forward network (post-norm) or before the self-attention (pre-norm).
    pub norm_3: LayerNorm<B>,
    /// Dropout applied to the residual paths.
    pub dropout: Dropout,
    /// If `true`, layer normalization comes before the sub-layers (pre-norm), else after
    /// (post-norm).
    pub norm_first: bool,
}

impl<B: Backend> TransformerDecoderLayer<B> {
    /// Create a new transformer decoder layer from the given configuration.
    pub fn new(config: &TransformerDecoderConfig, device: &B::Device) -> Self {
        let attention = || {
            MultiHeadAttentionConfig::new(config.d_model, config.n_heads)
                .with_initializer(config.initializer.clone())
                .with_dropout(config.dropout)
                .with_quiet_softmax(config.quiet_softmax)
                .init(device)
        };
        let norm = || LayerNormConfig::new(config.d_model).with_epsilon(config.layer_norm_eps).init(device);
        Self {
            cross_attn: attention(),
            self_attn: attention(),
            pwff: PositionWiseFeedForwardConfig::new(config.d_model, config.d_ff)
                .with_initializer(config.initializer.clone())
                .with_dropout(config.dropout)
                .with_activation(config.activation.clone())
                .init(device),
            norm_1: norm(),
            norm_2: norm(),
            norm_3: norm(),
            dropout: DropoutConfig::new(config.dropout).init(),
            norm_first: config.norm_first,
        }
    }

    /// Applies the forward pass on the target; returns the input with the new target.
    pub fn forward(&self, mut input: TransformerDecoderInput<B>) -> TransformerDecoderInput<B> {
        let (target_masks, memory_masks) = (input.target_masks(), input.memory_masks());
        let memory = input.memory.clone();
        input.target = self.sublayers(
            input.target,
            |x| self.self_attn.forward(MhaInput::self_attn(x).with_masks(target_masks)).context,
            |x| self.cross_attn.forward(MhaInput::new(x, memory.clone(), memory).with_masks(memory_masks)).context,
        );
        input
    }

    /// Applies the forward pass using an autoregressive cache (see
    /// [`TransformerDecoder::forward_autoregressive_inference`]): the target rows past the
    /// cached ones go through the layer, their self-attention reads the cached keys and values,
    /// their cross-attention those of the memory.
    ///
    /// # Panics
    ///
    /// If the target has no row past the cached ones.
    pub fn forward_autoregressive_inference(
        &self,
        mut input: TransformerDecoderInput<B>,
        cache: &mut TransformerDecoderLayerAutoregressiveCache<B>,
    ) -> TransformerDecoderInput<B> {
        let new = new_rows(input.target.clone(), cache.output.len());
        let rows = new.dims()[SEQ_DIM];
        let (target_masks, memory_masks) = (input.target_masks().last_rows(rows), input.memory_masks().last_rows(rows));
        let memory = input.memory.clone();
        let TransformerDecoderLayerAutoregressiveCache { self_attn, cross_attn, output } = cache;
        let expect = |result: Result<_, _>| result.unwrap_or_else(|error| panic!("TransformerDecoderLayer: {error}"));
        let new = self.sublayers(
            new,
            |x| expect(self.self_attn.forward_new_rows(x.clone(), x.clone(), x, target_masks, self_attn)),
            |x| expect(self.cross_attn.forward_new_rows(x, memory.clone(), memory, memory_masks, cross_attn)),
        );
        input.target = output.append(new);
        input
    }

    /// The layer on the target rows `x`, with the self-attention and the cross-attention of
    /// those rows (see [`residual`] for the two norms of each sub-layer).
    fn sublayers(
        &self,
        x: Tensor<B, 3>,
        self_attention: impl FnOnce(Tensor<B, 3>) -> Tensor<B, 3>,
        cross_attention: impl FnOnce(Tensor<B, 3>) -> Tensor<B, 3>,
    ) -> Tensor<B, 3> {
        let norm_first = self.norm_first;
        let x = residual(x, Norms { norm_first, pre: &self.norm_3, post: &self.norm_1 }, &self.dropout, self_attention);
        let x = residual(x, Norms { norm_first, pre: &self.norm_1, post: &self.norm_2 }, &self.dropout, cross_attention);
        residual(x, Norms { norm_first, pre: &self.norm_2, post: &self.norm_3 }, &self.dropout, |x| {
            feed_forward(&self.pwff, x)
        })
    }
}

/// Autoregressive cache for a single [transformer decoder layer](TransformerDecoderLayer): the
/// keys and values of its self-attention (growing) and of its cross-attention (the memory's,
/// projected once), and its outputs so far.
///
/// Unlike burn-nn's, which also caches the queries, the three layer norms and the feed-forward
/// network row by row, the new rows go through the whole layer at once.
pub struct TransformerDecoderLayerAutoregressiveCache<B: Backend> {
    self_attn: KvCache<B>,
    cross_attn: KvCache<B>,
    output: RowCache<B, 3>,
}

impl<B: Backend> TransformerDecoderLayerAutoregressiveCache<B> {
    /// Create an empty cache.
    pub fn empty() -> Self {
        Self { self_attn: KvCache::growing(), cross_attn: KvCache::fixed(), output: RowCache::empty(SEQ_DIM) }
    }
}

/// Autoregressive cache for the [transformer decoder](TransformerDecoder), to be used during
/// inference when decoding tokens.
pub struct TransformerDecoderAutoregressiveCache<B: Backend> {
    layers: Vec<TransformerDecoderLayerAutoregressiveCache<B>>,
}
