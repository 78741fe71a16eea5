//! A GPT-2-shaped decoder over bytes: learned token and position embeddings, pre-LayerNorm
//! blocks (causal self-attention, then a 4x GELU MLP), a final LayerNorm and an untied head.
//!
//! ```text
//! bytes [b, t] -> wte + wpe -> 12 x { x += proj(attention(ln1 x)); x += out(gelu(fc(ln2 x))) }
//!              -> ln_f -> head -> logits [b, t, 256]
//! ```
//! The head is untied from `wte`: with 256 byte tokens it holds 0.2 M of gpt2-small's 85 M
//! parameters, and a separate `Linear` keeps the model plain Burn modules. Dropout is off.
use std::str::FromStr;

use burn::{
    module::Module,
    nn::{
        Embedding, EmbeddingConfig, Initializer, LayerNorm, LayerNormConfig, Linear, LinearConfig,
        loss::CrossEntropyLossConfig,
    },
    tensor::{
        Int, Tensor, activation::gelu, backend::Backend, module::attention,
        ops::AttentionModuleOptions,
    },
};

use crate::Error;

/// Byte-level tokens.
pub const VOCAB: usize = 256;
/// GPT-2's initializer: N(0, 0.02) for every weight matrix and embedding.
const INIT_STD: f64 = 0.02;
/// The MLP's hidden width is this many times the model width (GPT-2).
const MLP_RATIO: usize = 4;

/// The shape of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GptConfig {
    pub layers: usize,
    pub heads: usize,
    pub width: usize,
    pub context: usize,
}

/// Named shapes: `tiny` for CPU / lavapipe checks, `mid` for a mid-size GPU, `gpt2-small`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Preset {
    /// 2 layers, 2 heads, width 64, context 64 (about 0.1 M parameters).
    Tiny,
    /// 6 layers, 6 heads, width 384, context 256 (about 11 M parameters).
    Mid,
    /// 12 layers, 12 heads, width 768, context 1024 (about 85 M parameters).
    #[value(name = "gpt2-small")]
    Gpt2Small,
}

impl Preset {
    pub fn config(self) -> GptConfig {
        let (layers, heads, width, context) = match self {
            Preset::Tiny => (2, 2, 64, 64),
            Preset::Mid => (6, 6, 384, 256),
            Preset::Gpt2Small => (12, 12, 768, 1024),
        };
        GptConfig { layers, heads, width, context }
    }
}

impl FromStr for Preset {
    type Err = Error;

    fn from_str(name: &str) -> Result<Self, Error> {
        <Preset as clap::ValueEnum>::from_str(name, true)
            .map_err(|_| Error::UnknownPreset(name.to_string()))
    }
}

fn linear<B: Backend>(d_input: usize, d_output: usize, std: f64, device: &B::Device) -> Linear<B> {
    LinearConfig::new(d_input, d_output)
        .with_initializer(Initializer::Normal { mean: 0.0, std })
        .init(device)
}

#[derive(Module, Debug)]
pub struct Block<B: Backend> {
    ln1: LayerNorm<B>,
    qkv: Linear<B>,
    proj: Linear<B>,
    ln2: LayerNorm<B>,
    fc: Linear<B>,
    out: Linear<B>,
    heads: usize,
}

impl<B: Backend> Block<B> {
    fn new(config: &GptConfig, device: &B::Device) -> Self {
        let width = config.width;
        // GPT-2 scales the residual projections by 1/sqrt(2 * layers).
        let residual_std = INIT_STD / ((2 * config.layers) as f64).sqrt();
        Self {
            ln1: LayerNormConfig::new(width).init(device),
            qkv: linear(width, 3 * width, INIT_STD, device),
            proj: linear(width, width, residual_std, device),
            ln2: LayerNormConfig::new(width).init(device),
            fc: linear(width, MLP_RATIO * width, INIT_STD, device),
            out: linear(MLP_RATIO * width, width, residual_std, device),
            heads: config.heads,
        }
    }

    /// `x: [batch, seq, width]`.
    fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let [batch, seq, width] = x.dims();
        let head_dim = width / self.heads;
        let split = |t: Tensor<B, 3>| t.reshape([batch, seq, self.heads, head_dim]).swap_dims(1, 2);
        let [query, key, value] =
            self.qkv.forward(self.ln1.forward(x.clone())).chunk(3, 2).try_into().expect("3 chunks");
        let options = AttentionModuleOptions { is_causal: true, ..Default::default() };
        let y = attention(split(query), split(key), split(value), None, None, options);
        let x = x + self.proj.forward(y.swap_dims(1, 2).reshape([batch, seq, width]));
        let mlp = self.out.forward(gelu(self.fc.forward(self.ln2.forward(x.clone()))));
        x + mlp
    }
}

#[derive(Module, Debug)]
pub struct Gpt<B: Backend> {
    wte: Embedding<B>,
    wpe: Embedding<B>,
    blocks: Vec<Block<B>>,
    ln_f: LayerNorm<B>,
    head: Linear<B>,
}

impl<B: Backend> Gpt<B> {
    pub fn new(config: &GptConfig, device: &B::Device) -> Self {
        let embedding = |n| {
            EmbeddingConfig::new(n, config.width)
                .with_initializer(Initializer::Normal { mean: 0.0, std: INIT_STD })
                .init(device)
        };
        Self {
            wte: embedding(VOCAB),
            wpe: embedding(config.context),
            blocks: (0..config.layers).map(|_| Block::new(config, device)).collect(),
            ln_f: LayerNormConfig::new(config.width).init(device),
            head: LinearConfig::new(config.width, VOCAB)
                .with_bias(false)
                .with_initializer(Initializer::Normal { mean: 0.0, std: INIT_STD })
                .init(device),
        }
    }

    /// `tokens: [batch, seq]` (seq <= context) -> logits `[batch, seq, VOCAB]`.
    pub fn forward(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        let [_, seq] = tokens.dims();
        let positions = Tensor::<B, 1, Int>::arange(0..seq as i64, &tokens.device()).unsqueeze();
        let mut x = self.wte.forward(tokens) + self.wpe.forward(positions);
        for block in &self.blocks {
            x = block.forward(x);
        }
        self.head.forward(self.ln_f.forward(x))
    }

    /// Mean next-byte cross-entropy (nats) of `inputs -> targets`, both `[batch, seq]`.
    pub fn loss(&self, inputs: Tensor<B, 2, Int>, targets: Tensor<B, 2, Int>) -> Tensor<B, 1> {
        let [batch, seq] = inputs.dims();
        let logits = self.forward(inputs).reshape([batch * seq, VOCAB]);
        let loss = CrossEntropyLossConfig::new().init(&logits.device());
        loss.forward(logits, targets.reshape([batch * seq]))
    }
}
