//! The classifier: byte and position embeddings, a `TransformerEncoder` that reads the padding
//! mask, the mean of the encoded non-padded positions, a layer norm and a linear head.
//!
//! ```text
//! tokens [b, s] -> wte + wpe -> TransformerEncoder(mask_pad) -> mean over kept positions [b, d]
//!               -> LayerNorm -> Linear -> logits [b, classes] -> cross-entropy with labels [b]
//! ```
//! The `flash` feature changes the one `use` line below (and, in `flash_gpt::backend`, the
//! backend type): the encoder, its config, records and input are burn-flash-attn's drop-in
//! replacements of burn-nn's, whose attention runs the fused kernels (key padding in place of a
//! `[b, h, s, s]` mask, dropout on the probabilities).
use burn::{
    config::Config,
    module::Module,
    nn::{
        Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig,
        loss::CrossEntropyLossConfig,
    },
    tensor::{
        Tensor,
        backend::{AutodiffBackend, Backend},
    },
    train::{ClassificationOutput, InferenceStep, TrainOutput, TrainStep},
};
#[cfg(not(feature = "flash"))]
use burn::nn::transformer::{TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput};
#[cfg(feature = "flash")]
use burn_flash_attn::nn::transformer::{TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput};

use crate::{
    data::{TextBatch, VOCAB},
    output::ClassifierOutput,
};

/// The classifier's shape; `transformer` is the encoder's own config (burn-nn's fields and
/// defaults: dropout 0.1, post-norm unless `norm_first`).
#[derive(Config, Debug)]
pub struct ClassifierConfig {
    pub transformer: TransformerEncoderConfig,
    pub n_classes: usize,
    /// Longest text in bytes (the position embedding's size).
    pub max_len: usize,
}

#[derive(Module, Debug)]
pub struct Classifier<B: Backend> {
    wte: Embedding<B>,
    wpe: Embedding<B>,
    encoder: TransformerEncoder<B>,
    norm: LayerNorm<B>,
    head: Linear<B>,
}

impl ClassifierConfig {
    pub fn init<B: Backend>(&self, device: &B::Device) -> Classifier<B> {
        let width = self.transformer.d_model;
        Classifier {
            wte: EmbeddingConfig::new(VOCAB, width).init(device),
            wpe: EmbeddingConfig::new(self.max_len, width).init(device),
            encoder: self.transformer.init(device),
            norm: LayerNormConfig::new(width).init(device),
            head: LinearConfig::new(width, self.n_classes).init(device),
        }
    }
}

impl<B: Backend> Classifier<B> {
    /// Logits `[batch, classes]` of a padded batch.
    pub fn logits(&self, batch: &TextBatch<B>) -> Tensor<B, 2> {
        let [size, seq] = batch.tokens.dims();
        let device = batch.tokens.device();
        let positions = Tensor::arange(0..seq as i64, &device).unsqueeze::<2>().repeat_dim(0, size);
        let x = self.wte.forward(batch.tokens.clone()) + self.wpe.forward(positions);
        let input = TransformerEncoderInput::new(x).mask_pad(batch.mask_pad.clone());
        let encoded = self.encoder.forward(input);
        // Mean over the kept positions: padded ones weigh 0.
        let kept = batch.mask_pad.clone().bool_not().float().unsqueeze_dim::<3>(2);
        let pooled = (encoded * kept.clone()).sum_dim(1) / kept.sum_dim(1);
        let width = pooled.dims()[2];
        self.head.forward(self.norm.forward(pooled.reshape([size, width])))
    }

    pub fn forward(&self, batch: TextBatch<B>) -> ClassifierOutput<B> {
        let logits = self.logits(&batch);
        let loss = CrossEntropyLossConfig::new()
            .init(&logits.device())
            .forward(logits.clone(), batch.labels.clone());
        let tokens = batch.mask_pad.dims().iter().product();
        ClassifierOutput { output: ClassificationOutput::new(loss, logits, batch.labels), tokens }
    }
}

impl<B: AutodiffBackend> TrainStep for Classifier<B> {
    type Input = TextBatch<B>;
    type Output = ClassifierOutput<B>;

    fn step(&self, batch: TextBatch<B>) -> TrainOutput<ClassifierOutput<B>> {
        let output = self.forward(batch);
        TrainOutput::new(self, output.output.loss.backward(), output)
    }
}

impl<B: Backend> InferenceStep for Classifier<B> {
    type Input = TextBatch<B>;
    type Output = ClassifierOutput<B>;

    fn step(&self, batch: TextBatch<B>) -> ClassifierOutput<B> {
        self.forward(batch)
    }
}
