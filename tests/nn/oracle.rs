//! The f64 oracle: burn-nn's modules recomputed on the host in f64 from their parameters, the
//! attention naively (scores materialized, two-pass softmax), masked positions excluded
//! exactly (a row with every key masked attends to nothing: 0).
use burn::module::Param;
use burn::nn::attention::{CrossAttentionConfig, CrossAttentionRecord, MultiHeadAttention};
use burn::nn::transformer::{PositionWiseFeedForward, TransformerDecoder, TransformerEncoder};
use burn::nn::{LayerNorm, Linear, LinearRecord};
use burn::tensor::{Tensor, backend::Backend};

/// Row-major `[rows, cols]` values.
#[derive(Clone, Debug)]
pub struct Rows {
    pub data: Vec<f64>,
    pub cols: usize,
}

impl Rows {
    pub fn new(data: Vec<f64>, cols: usize) -> Self {
        assert_eq!(data.len() % cols, 0);
        Self { data, cols }
    }

    pub fn len(&self) -> usize {
        self.data.len() / self.cols
    }

    pub fn row(&self, i: usize) -> &[f64] {
        &self.data[i * self.cols..(i + 1) * self.cols]
    }

    fn map_rows(&self, cols: usize, f: impl Fn(&[f64]) -> Vec<f64>) -> Rows {
        Rows::new((0..self.len()).flat_map(|i| f(self.row(i))).collect(), cols)
    }

    fn add(&self, other: &Rows) -> Rows {
        Rows::new(self.data.iter().zip(&other.data).map(|(a, b)| a + b).collect(), self.cols)
    }
}

fn values<B: Backend, const D: usize>(param: &Param<Tensor<B, D>>) -> Vec<f64> {
    param.val().into_data().convert::<f64>().to_vec::<f64>().expect("f64 data")
}

/// `y = x W + b`, `W` `[d_in, d_out]` (Burn's row layout).
pub struct HostLinear {
    weight: Vec<f64>,
    bias: Option<Vec<f64>>,
    d_out: usize,
}

impl HostLinear {
    pub fn new<B: Backend>(linear: &Linear<B>) -> Self {
        Self::from_params(&linear.weight, linear.bias.as_ref())
    }

    pub fn from_params<B: Backend>(weight: &Param<Tensor<B, 2>>, bias: Option<&Param<Tensor<B, 1>>>) -> Self {
        let [_, d_out] = weight.dims();
        Self { weight: values(weight), bias: bias.map(values), d_out }
    }

    pub fn apply(&self, x: &Rows) -> Rows {
        x.map_rows(self.d_out, |row| {
            (0..self.d_out)
                .map(|o| {
                    let dot: f64 = row.iter().enumerate().map(|(i, xi)| xi * self.weight[i * self.d_out + o]).sum();
                    dot + self.bias.as_ref().map_or(0.0, |b| b[o])
                })
                .collect()
        })
    }
}

/// Which (batch, query row, key) pairs are masked.
pub type Masked<'a> = &'a dyn Fn(usize, usize, usize) -> bool;

/// Multi-head attention with `n_heads` query heads and `n_kv_heads` key and value heads of
/// `d_head` (query head `h` reads kv head `h / (n_heads / n_kv_heads)`).
pub struct HostMha {
    query: HostLinear,
    key: HostLinear,
    value: HostLinear,
    output: HostLinear,
    n_heads: usize,
    n_kv_heads: usize,
    d_head: usize,
    quiet: bool,
}

impl HostMha {
    pub fn new<B: Backend>(mha: &MultiHeadAttention<B>) -> Self {
        Self {
            query: HostLinear::new(&mha.query),
            key: HostLinear::new(&mha.key),
            value: HostLinear::new(&mha.value),
            output: HostLinear::new(&mha.output),
            n_heads: mha.n_heads,
            n_kv_heads: mha.n_heads,
            d_head: mha.d_k,
            quiet: mha.quiet_softmax,
        }
    }

    /// burn-nn's `CrossAttention`, from its record (its fields are private) and config.
    pub fn cross<B: Backend>(record: &CrossAttentionRecord<B>, config: &CrossAttentionConfig) -> Self {
        let linear = |record: &LinearRecord<B>| HostLinear::from_params(&record.weight, record.bias.as_ref());
        Self {
            query: linear(&record.query),
            key: linear(&record.key),
            value: linear(&record.value),
            output: linear(&record.output),
            n_heads: config.n_heads,
            n_kv_heads: config.n_heads_kv,
            d_head: config.d_head,
            quiet: config.quiet_softmax,
        }
    }

    /// `query` `[batch * seq_q, d_model]`, `key` and `value` `[batch * seq_kv, d_key]`.
    pub fn forward(&self, batch: usize, query: &Rows, key: &Rows, value: &Rows, masked: Masked) -> Rows {
        let (q, k, v) = (self.query.apply(query), self.key.apply(key), self.value.apply(value));
        let (seq_q, seq_kv, d_head) = (query.len() / batch, key.len() / batch, self.d_head);
        let (width, group) = (self.n_heads * d_head, self.n_heads / self.n_kv_heads);
        let scale = 1.0 / (d_head as f64).sqrt();
        let mut context = vec![0.0; batch * seq_q * width];
        for b in 0..batch {
            for h in 0..self.n_heads {
                let (head, kv_head) = (h * d_head..(h + 1) * d_head, (h / group) * d_head..(h / group + 1) * d_head);
                for i in 0..seq_q {
                    let qi = &q.row(b * seq_q + i)[head.clone()];
                    let scores: Vec<Option<f64>> = (0..seq_kv)
                        .map(|j| {
                            let kj = &k.row(b * seq_kv + j)[kv_head.clone()];
                            (!masked(b, i, j)).then(|| scale * qi.iter().zip(kj).map(|(x, y)| x * y).sum::<f64>())
                        })
                        .collect();
                    let probabilities = softmax(&scores, self.quiet);
                    for (j, p) in probabilities.iter().enumerate() {
                        let vj = &v.row(b * seq_kv + j)[kv_head.clone()];
                        for (c, vjc) in head.clone().zip(vj) {
                            context[(b * seq_q + i) * width + c] += p * vjc;
                        }
                    }
                }
            }
        }
        self.output.apply(&Rows::new(context, width))
    }

    /// `[batch, d_model]`: the output layer on the mean of the projected values of each
    /// sequence (the attention of a row with uniform weights).
    pub fn mean_value_output(&self, batch: usize, value: &Rows) -> Rows {
        let v = self.value.apply(value);
        let seq = v.len() / batch;
        let mean = |b: usize, c: usize| (0..seq).map(|j| v.row(b * seq + j)[c]).sum::<f64>() / seq as f64;
        let means = (0..batch).flat_map(|b| (0..v.cols).map(move |c| mean(b, c))).collect();
        self.output.apply(&Rows::new(means, v.cols))
    }
}

/// Two-pass softmax over the unmasked scores (`None` = masked, probability 0); the quiet one
/// adds a virtual score 0 to the denominator.
fn softmax(scores: &[Option<f64>], quiet: bool) -> Vec<f64> {
    let kept = scores.iter().flatten();
    let max = kept.clone().copied().fold(if quiet { 0.0 } else { f64::NEG_INFINITY }, f64::max);
    if max == f64::NEG_INFINITY {
        return vec![0.0; scores.len()];
    }
    let extra = if quiet { (-max).exp() } else { 0.0 };
    let sum: f64 = kept.map(|s| (s - max).exp()).sum::<f64>() + extra;
    scores.iter().map(|s| s.map_or(0.0, |s| (s - max).exp() / sum)).collect()
}

/// burn-nn's `LayerNorm` (biased variance) with the epsilon of the config.
pub struct HostLayerNorm {
    gamma: Vec<f64>,
    beta: Option<Vec<f64>>,
    epsilon: f64,
}

impl HostLayerNorm {
    pub fn new<B: Backend>(norm: &LayerNorm<B>, epsilon: f64) -> Self {
        Self { gamma: values(&norm.gamma), beta: norm.beta.as_ref().map(values), epsilon }
    }

    fn apply(&self, x: &Rows) -> Rows {
        x.map_rows(x.cols, |row| {
            let n = row.len() as f64;
            let mean = row.iter().sum::<f64>() / n;
            let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
            let inv = 1.0 / (var + self.epsilon).sqrt();
            row.iter()
                .enumerate()
                .map(|(c, v)| (v - mean) * inv * self.gamma[c] + self.beta.as_ref().map_or(0.0, |b| b[c]))
                .collect()
        })
    }
}

/// The exact GELU, `x Φ(x)` (burn-nn's default activation of the feed-forward network).
fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2))
}

/// burn-nn's `PositionWiseFeedForward` with its default GELU.
struct HostFeedForward {
    inner: HostLinear,
    outer: HostLinear,
}

impl HostFeedForward {
    fn new<B: Backend>(pwff: &PositionWiseFeedForward<B>) -> Self {
        Self { inner: HostLinear::new(&pwff.linear_inner), outer: HostLinear::new(&pwff.linear_outer) }
    }

    fn apply(&self, x: &Rows) -> Rows {
        let hidden = self.inner.apply(x);
        self.outer.apply(&hidden.map_rows(hidden.cols, |row| row.iter().map(|&v| gelu(v)).collect()))
    }
}

/// One residual sub-layer: `x + f(pre(x))` (pre-norm) or `post(x + f(x))`.
fn residual(x: &Rows, norm_first: bool, pre: &HostLayerNorm, post: &HostLayerNorm, f: impl Fn(&Rows) -> Rows) -> Rows {
    if norm_first { x.add(&f(&pre.apply(x))) } else { post.apply(&x.add(&f(x))) }
}

struct HostEncoderLayer {
    mha: HostMha,
    pwff: HostFeedForward,
    norm_1: HostLayerNorm,
    norm_2: HostLayerNorm,
    norm_first: bool,
}

pub struct HostEncoder {
    layers: Vec<HostEncoderLayer>,
}

impl HostEncoder {
    /// burn-nn's encoder with GELU in its feed-forward networks and layer norms of `epsilon`.
    pub fn new<B: Backend>(encoder: &TransformerEncoder<B>, epsilon: f64) -> Self {
        let layers = encoder
            .layers
            .iter()
            .map(|layer| HostEncoderLayer {
                mha: HostMha::new(&layer.mha),
                pwff: HostFeedForward::new(&layer.pwff),
                norm_1: HostLayerNorm::new(&layer.norm_1, epsilon),
                norm_2: HostLayerNorm::new(&layer.norm_2, epsilon),
                norm_first: layer.norm_first,
            })
            .collect();
        Self { layers }
    }

    /// `x` `[batch * seq, d_model]`.
    pub fn forward(&self, batch: usize, x: &Rows, masked: Masked) -> Rows {
        self.layers.iter().fold(x.clone(), |x, layer| {
            let attention = |x: &Rows| layer.mha.forward(batch, x, x, x, masked);
            let x = residual(&x, layer.norm_first, &layer.norm_2, &layer.norm_1, attention);
            residual(&x, layer.norm_first, &layer.norm_1, &layer.norm_2, |x| layer.pwff.apply(x))
        })
    }
}

struct HostDecoderLayer {
    self_attn: HostMha,
    cross_attn: HostMha,
    pwff: HostFeedForward,
    norms: [HostLayerNorm; 3],
    norm_first: bool,
}

pub struct HostDecoder {
    layers: Vec<HostDecoderLayer>,
}

impl HostDecoder {
    /// burn-nn's decoder with GELU in its feed-forward networks and layer norms of `epsilon`.
    pub fn new<B: Backend>(decoder: &TransformerDecoder<B>, epsilon: f64) -> Self {
        let layers = decoder
            .layers
            .iter()
            .map(|layer| HostDecoderLayer {
                self_attn: HostMha::new(&layer.self_attn),
                cross_attn: HostMha::new(&layer.cross_attn),
                pwff: HostFeedForward::new(&layer.pwff),
                norms: [&layer.norm_1, &layer.norm_2, &layer.norm_3].map(|norm| HostLayerNorm::new(norm, epsilon)),
                norm_first: layer.norm_first,
            })
            .collect();
        Self { layers }
    }

    /// `target` `[batch * seq, d_model]`, `memory` `[batch * seq_memory, d_model]`; the masks
    /// of the target's self-attention and of its attention to the memory.
    pub fn forward(&self, batch: usize, target: &Rows, memory: &Rows, target_masked: Masked, memory_masked: Masked) -> Rows {
        self.layers.iter().fold(target.clone(), |x, layer| {
            let [norm_1, norm_2, norm_3] = &layer.norms;
            let first = layer.norm_first;
            let x = residual(&x, first, norm_3, norm_1, |x| layer.self_attn.forward(batch, x, x, x, target_masked));
            let x = residual(&x, first, norm_1, norm_2, |x| layer.cross_attn.forward(batch, x, memory, memory, memory_masked));
            residual(&x, first, norm_2, norm_3, |x| layer.pwff.apply(x))
        })
    }
}
