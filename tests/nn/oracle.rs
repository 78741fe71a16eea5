//! The f64 oracle: burn-nn's modules recomputed on the host in f64 from their parameters, the
//! attention naively (scores materialized, two-pass softmax), masked positions excluded
//! exactly (a row with every key masked attends to nothing: 0).
use burn::module::Param;
use burn::nn::{LayerNorm, Linear, attention::MultiHeadAttention, transformer::TransformerEncoder};
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
        let [_, d_out] = linear.weight.dims();
        Self { weight: values(&linear.weight), bias: linear.bias.as_ref().map(values), d_out }
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

pub struct HostMha {
    query: HostLinear,
    key: HostLinear,
    value: HostLinear,
    output: HostLinear,
    n_heads: usize,
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
            quiet: mha.quiet_softmax,
        }
    }

    /// `query` `[batch * seq_q, d_model]`, `key` and `value` `[batch * seq_kv, d_model]`.
    pub fn forward(&self, batch: usize, query: &Rows, key: &Rows, value: &Rows, masked: Masked) -> Rows {
        let (q, k, v) = (self.query.apply(query), self.key.apply(key), self.value.apply(value));
        let (seq_q, seq_kv, d_model) = (query.len() / batch, key.len() / batch, q.cols);
        let d_k = d_model / self.n_heads;
        let scale = 1.0 / (d_k as f64).sqrt();
        let mut context = vec![0.0; batch * seq_q * d_model];
        for b in 0..batch {
            for h in 0..self.n_heads {
                let head = h * d_k..(h + 1) * d_k;
                for i in 0..seq_q {
                    let qi = &q.row(b * seq_q + i)[head.clone()];
                    let scores: Vec<Option<f64>> = (0..seq_kv)
                        .map(|j| {
                            let kj = &k.row(b * seq_kv + j)[head.clone()];
                            (!masked(b, i, j)).then(|| scale * qi.iter().zip(kj).map(|(x, y)| x * y).sum::<f64>())
                        })
                        .collect();
                    let probabilities = softmax(&scores, self.quiet);
                    for (j, p) in probabilities.iter().enumerate() {
                        let vj = &v.row(b * seq_kv + j)[head.clone()];
                        for (c, vjc) in head.clone().zip(vj) {
                            context[(b * seq_q + i) * d_model + c] += p * vjc;
                        }
                    }
                }
            }
        }
        self.output.apply(&Rows::new(context, d_model))
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

pub struct HostEncoderLayer {
    mha: HostMha,
    inner: HostLinear,
    outer: HostLinear,
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
                inner: HostLinear::new(&layer.pwff.linear_inner),
                outer: HostLinear::new(&layer.pwff.linear_outer),
                norm_1: HostLayerNorm::new(&layer.norm_1, epsilon),
                norm_2: HostLayerNorm::new(&layer.norm_2, epsilon),
                norm_first: layer.norm_first,
            })
            .collect();
        Self { layers }
    }

    /// `x` `[batch * seq, d_model]`.
    pub fn forward(&self, batch: usize, x: &Rows, masked: Masked) -> Rows {
        self.layers.iter().fold(x.clone(), |x, layer| layer.forward(batch, &x, masked))
    }
}

impl HostEncoderLayer {
    fn forward(&self, batch: usize, x: &Rows, masked: Masked) -> Rows {
        let attention = |x: &Rows| self.mha.forward(batch, x, x, x, masked);
        let pwff = |x: &Rows| {
            let hidden = self.inner.apply(x);
            self.outer.apply(&hidden.map_rows(hidden.cols, |row| row.iter().map(|&v| gelu(v)).collect()))
        };
        if self.norm_first {
            let x = x.add(&attention(&self.norm_2.apply(x)));
            x.add(&pwff(&self.norm_1.apply(&x)))
        } else {
            let x = self.norm_1.apply(&x.add(&attention(x)));
            self.norm_2.apply(&x.add(&pwff(&x)))
        }
    }
}
