//! One case of the extended API, its seeded inputs, and the same problem written out
//! explicitly on the host: K and V repeated per query head, causal, window and padding as one
//! `[batch, num_heads, seq_q, seq_kv]` bool mask, user bias and ALiBi as one float bias. Those
//! explicit inputs feed Burn's `attention_fallback` (the plain implementation) and the f64
//! reference (the oracle), neither of which knows GQA, windows, padding or ALiBi.
use burn::tensor::{Int, Tensor, TensorData, backend::Backend};
use burn_flash_attn::kernels::{
    AttentionProblem, FloatKind, MaskKind,
    reference::{self, Inputs, Precision},
};
use burn_flash_attn::{FlashAttentionOptions, KeyPadding, SlidingWindow};

use crate::common::{device, float, random_data, random_mask, to_f64};

/// Padding of a case, as static lengths per batch entry.
#[derive(Debug, Clone, Copy)]
pub enum Padding {
    None,
    /// `KeyPadding::Lengths { keys, queries }`.
    Lengths(&'static [i64], Option<&'static [i64]>),
    /// `KeyPadding::Mask` built on the host from these key lengths.
    Mask(&'static [i64]),
}

/// One problem of the extended API: shapes and options.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    pub name: &'static str,
    pub batch: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub seq_q: usize,
    pub seq_kv: usize,
    pub head_dim: usize,
    pub val_dim: usize,
    pub scale: Option<f64>,
    pub softcap: Option<f64>,
    pub causal: bool,
    pub window: Option<SlidingWindow>,
    pub padding: Padding,
    pub alibi: bool,
    pub quiet: bool,
    /// A random user mask `[batch, 1, seq_q, seq_kv]` (broadcast over heads).
    pub mask: bool,
    /// A random user bias `[1, heads, seq_q, seq_kv]` (broadcast over the batch).
    pub bias: bool,
}

/// The smallest shapes that still have GQA groups, seq_q != seq_kv and a few rows per window.
pub const BASE: Case = Case {
    name: "",
    batch: 2,
    heads: 4,
    kv_heads: 4,
    seq_q: 6,
    seq_kv: 9,
    head_dim: 8,
    val_dim: 4,
    scale: None,
    softcap: None,
    causal: false,
    window: None,
    padding: Padding::None,
    alibi: false,
    quiet: false,
    mask: false,
    bias: false,
};

/// Host inputs of a case, as given to `flash_attention`.
pub struct Data {
    pub q: TensorData,
    pub k: TensorData,
    pub v: TensorData,
    pub d_out: TensorData,
    pub mask: Option<TensorData>,
    pub bias: Option<TensorData>,
    pub slopes: Option<Vec<f32>>,
}

/// The case written out: everything `[batch, heads, ..]`, no option left but scale, softcap
/// and quiet softmax.
pub struct Explicit {
    pub k: TensorData,
    pub v: TensorData,
    pub mask: Option<TensorData>,
    pub bias: Option<TensorData>,
    /// Flat indices (`(b · heads + h) · seq_q + i`) of the rows past the query lengths.
    pub padded_rows: Vec<usize>,
    /// Flat indices of the rows that see no key.
    pub empty_rows: Vec<usize>,
}

impl Case {
    pub fn group(&self) -> usize {
        self.heads / self.kv_heads
    }

    pub fn data(&self, seed: u64) -> Data {
        let (b, h, hkv) = (self.batch, self.heads, self.kv_heads);
        Data {
            q: random_data([b, h, self.seq_q, self.head_dim], seed),
            k: random_data([b, hkv, self.seq_kv, self.head_dim], seed + 1),
            v: random_data([b, hkv, self.seq_kv, self.val_dim], seed + 2),
            d_out: random_data([b, h, self.seq_q, self.val_dim], seed + 3),
            mask: self.mask.then(|| {
                let mask = random_mask([b, 1, self.seq_q, self.seq_kv], 0.25, seed + 4);
                // Row 0 of batch entry 0 fully masked: a row that sees no key.
                let mut values = mask.to_vec::<bool>().expect("bool mask");
                values[..self.seq_kv].fill(true);
                TensorData::new(values, [b, 1, self.seq_q, self.seq_kv])
            }),
            bias: self.bias.then(|| random_data([1, h, self.seq_q, self.seq_kv], seed + 5)),
            // The geometric slopes of the ALiBi paper, 2^(-8 (h+1) / heads).
            slopes: self.alibi.then(|| (0..h).map(|head| (-8.0 * (head + 1) as f32 / h as f32).exp2()).collect()),
        }
    }

    /// The options of `flash_attention` for this case.
    pub fn options<B: Backend>(&self, data: &Data) -> FlashAttentionOptions<B> {
        let lengths = |values: &[i64]| Tensor::<B, 1, Int>::from_data(TensorData::new(values.to_vec(), [values.len()]), &device::<B>());
        let key_padding = match self.padding {
            Padding::None => None,
            Padding::Lengths(keys, queries) => Some(KeyPadding::Lengths { keys: lengths(keys), queries: queries.map(lengths) }),
            Padding::Mask(keys) => {
                let mask: Vec<bool> = (0..self.batch).flat_map(|b| (0..self.seq_kv).map(move |j| j as i64 >= keys[b])).collect();
                Some(KeyPadding::Mask(Tensor::from_data(TensorData::new(mask, [self.batch, self.seq_kv]), &device::<B>())))
            }
        };
        FlashAttentionOptions::new()
            .with_scale(self.scale)
            .with_softcap(self.softcap)
            .with_causal(self.causal)
            .with_window(self.window)
            .with_quiet_softmax(self.quiet)
            .with_key_padding(key_padding)
            .with_mask(data.mask.as_ref().map(|m| Tensor::from_data(m.clone(), &device::<B>())))
            .with_bias(data.bias.as_ref().map(float::<B, 4>))
            .with_alibi_slopes(data.slopes.as_ref().map(|s| Tensor::from_data(TensorData::new(s.clone(), [s.len()]), &device::<B>())))
    }

    /// Whether row `i` may see column `j` by causal, window and key padding of batch entry `b`.
    fn visible(&self, b: usize, i: usize, j: usize) -> bool {
        let (i_diag, j) = ((i + self.seq_kv) as i64 - self.seq_q as i64, j as i64);
        let causal = !self.causal || j <= i_diag;
        let window = self.window.is_none_or(|w| {
            w.left.is_none_or(|left| j >= i_diag - left as i64) && w.right.is_none_or(|right| j <= i_diag + right as i64)
        });
        let key_length = match self.padding {
            Padding::None => i64::MAX,
            Padding::Lengths(keys, _) | Padding::Mask(keys) => keys[b],
        };
        causal && window && j < key_length
    }

    pub fn explicit(&self, data: &Data) -> Explicit {
        let (b, h, sq, skv) = (self.batch, self.heads, self.seq_q, self.seq_kv);
        let scores = [b, h, sq, skv];
        let user_mask = data.mask.as_ref().map(|m| m.to_vec::<bool>().expect("bool mask"));
        let user_bias = data.bias.as_ref().map(|x| x.to_vec::<f32>().expect("f32 bias"));
        let (mut mask, mut bias) = (Vec::with_capacity(b * h * sq * skv), Vec::with_capacity(b * h * sq * skv));
        for (bi, hi, i, j) in (0..b).flat_map(|bi| (0..h).flat_map(move |hi| (0..sq).flat_map(move |i| (0..skv).map(move |j| (bi, hi, i, j))))) {
            let user = user_mask.as_ref().is_some_and(|m| m[(bi * sq + i) * skv + j]);
            mask.push(user || !self.visible(bi, i, j));
            let distance = ((i + skv) as f32 - sq as f32 - j as f32).abs();
            let alibi = data.slopes.as_ref().map_or(0.0, |s| -(s[hi] * distance));
            bias.push(user_bias.as_ref().map_or(0.0, |x| x[(hi * sq + i) * skv + j]) + alibi);
        }
        let query_lengths = match self.padding {
            Padding::Lengths(_, Some(queries)) => Some(queries),
            _ => None,
        };
        let rows = (0..b * h * sq).map(|row| (row / (h * sq), row % sq, row));
        let padded_rows: Vec<usize> =
            rows.clone().filter(|&(bi, i, _)| query_lengths.is_some_and(|q| i as i64 >= q[bi])).map(|(.., row)| row).collect();
        let empty_rows = rows
            .filter(|&(.., row)| mask[row * skv..][..skv].iter().all(|&m| m))
            .map(|(.., row)| row)
            .collect();
        Explicit {
            k: repeat_heads(&data.k, self.group()),
            v: repeat_heads(&data.v, self.group()),
            mask: mask.contains(&true).then(|| TensorData::new(mask, scores)),
            bias: (self.bias || self.alibi).then(|| TensorData::new(bias, scores)),
            padded_rows,
            empty_rows,
        }
    }

    fn problem(&self, explicit: &Explicit) -> AttentionProblem {
        AttentionProblem {
            batch: self.batch,
            num_heads: self.heads,
            // K and V repeated on the host: one kv head per query head.
            num_kv_heads: self.heads,
            seq_q: self.seq_q,
            seq_kv: self.seq_kv,
            head_dim: self.head_dim,
            val_dim: self.val_dim,
            dtype: FloatKind::F32,
            scale: self.scale.unwrap_or(AttentionProblem::default_scale(self.head_dim)),
            softcap: self.softcap,
            causal: false,
            mask: explicit.mask.as_ref().map(|_| MaskKind::U32),
            has_bias: explicit.bias.is_some(),
            quiet_softmax: self.quiet,
            window: None,
            alibi: false,
            dropout: None,
        }
    }

    /// The naive implementation at `precision` on the explicit inputs: output and gradients of
    /// `sum(out · d_out)` (dk, dv summed over each GQA group), padded rows zeroed.
    pub fn reference(&self, data: &Data, explicit: &Explicit, precision: Precision) -> [Vec<f64>; 4] {
        let (q, k, v) = (to_f64(data.q.clone()), to_f64(explicit.k.clone()), to_f64(explicit.v.clone()));
        let mask = explicit.mask.as_ref().map(|m| m.to_vec::<bool>().expect("bool mask"));
        let bias = explicit.bias.clone().map(to_f64);
        let inputs = Inputs { q: &q, k: &k, v: &v, mask: mask.as_deref(), bias: bias.as_deref(), alibi: None };
        let problem = self.problem(explicit);
        let mut o = reference::forward(&problem, &inputs, precision).o;
        zero_rows(&mut o, &explicit.padded_rows, self.val_dim);
        // A padded row's output is the constant 0: no gradient flows back through it.
        let mut d_out = to_f64(data.d_out.clone());
        zero_rows(&mut d_out, &explicit.padded_rows, self.val_dim);
        let grads = reference::backward(&problem, &inputs, &d_out, precision);
        [o, grads.dq, self.sum_group(&grads.dk, self.head_dim), self.sum_group(&grads.dv, self.val_dim)]
    }

    /// `[batch, heads, seq_kv, dim]` → `[batch, kv_heads, seq_kv, dim]`, summing each group.
    /// The quiet softmax written out for Burn's plain softmax: one more key, of logit exactly 0
    /// (a zero key row), value 0, never masked, bias 0. `exp(s_j) / (1 + sum exp(s))` is then
    /// the softmax over the keys and that one, and a row that sees no other key gives 0.
    pub fn with_quiet_key(&self, explicit: &Explicit) -> Explicit {
        let rows = self.batch * self.heads;
        let extend = |x: &TensorData, width: usize, extra: f32| -> TensorData {
            let values = x.to_vec::<f32>().expect("f32 data");
            let mut shape = x.shape.clone();
            let len = shape[2] * width;
            shape[2] += 1;
            let out: Vec<f32> = values.chunks(len).take(rows).flat_map(|head| head.iter().copied().chain(std::iter::repeat_n(extra, width))).collect();
            TensorData::new(out, shape)
        };
        let extend_cols = |x: &TensorData, extra: bool| -> Vec<bool> {
            x.to_vec::<bool>().expect("bool mask").chunks(self.seq_kv).flat_map(|row| row.iter().copied().chain([extra])).collect()
        };
        let scores = [self.batch, self.heads, self.seq_q, self.seq_kv + 1];
        Explicit {
            k: extend(&explicit.k, self.head_dim, 0.0),
            v: extend(&explicit.v, self.val_dim, 0.0),
            mask: explicit.mask.as_ref().map(|m| TensorData::new(extend_cols(m, false), scores)),
            bias: explicit.bias.as_ref().map(|b| {
                let values = b.to_vec::<f32>().expect("f32 bias");
                TensorData::new(values.chunks(self.seq_kv).flat_map(|row| row.iter().copied().chain([0.0])).collect::<Vec<f32>>(), scores)
            }),
            padded_rows: explicit.padded_rows.clone(),
            empty_rows: Vec::new(),
        }
    }

    /// `x` `[batch, heads, keys, dim]` without its last key row when the quiet key was added.
    pub fn drop_quiet_key(&self, x: Vec<f64>, dim: usize) -> Vec<f64> {
        let keys = x.len() / (self.batch * self.heads * dim);
        if keys == self.seq_kv {
            return x;
        }
        x.chunks(keys * dim).flat_map(|head| head[..self.seq_kv * dim].to_vec()).collect()
    }

    pub fn sum_group(&self, x: &[f64], dim: usize) -> Vec<f64> {
        let head = self.seq_kv * dim;
        let mut out = vec![0.0; self.batch * self.kv_heads * head];
        for (index, &value) in x.iter().enumerate() {
            let (bh, within) = (index / head, index % head);
            let (b, h) = (bh / self.heads, bh % self.heads);
            out[(b * self.kv_heads + h / self.group()) * head + within] += value;
        }
        out
    }
}

/// `[batch, kv_heads, seq, dim]` → `[batch, kv_heads · group, seq, dim]`, each kv head
/// repeated for its `group` query heads.
pub fn repeat_heads(x: &TensorData, group: usize) -> TensorData {
    let [b, hkv, s, d] = x.shape.dims::<4>();
    let values = x.to_vec::<f32>().expect("f32 data");
    let repeated: Vec<f32> = values.chunks(s * d).flat_map(|head| std::iter::repeat_n(head, group).flatten().copied()).collect();
    TensorData::new(repeated, [b, hkv * group, s, d])
}

pub fn zero_rows(x: &mut [f64], rows: &[usize], width: usize) {
    for &row in rows {
        x[row * width..][..width].fill(0.0);
    }
}
