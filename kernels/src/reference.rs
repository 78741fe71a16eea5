//! The f64 CPU oracle: a naive attention that materializes S and P and uses a two-pass softmax
//! (max, then sum), so it shares none of the kernels' algorithm (no online softmax, no tiling).
//!
//! The same code run in a lower precision is the "plain same-precision implementation" of the
//! FlashAttention tolerance rule (see [`Precision`]): what a naive f32 / f16 / bf16 attention
//! computes, stored intermediates rounded to the dtype, arithmetic and sums in f32.
//! All tensors are contiguous row-major, shapes as in [`crate::problem`]: k, v, dk, dv have
//! `num_kv_heads` heads (grouped-query attention sums dK, dV over each group here by plain
//! accumulation, as a naive implementation that repeats K/V would).
use crate::problem::AttentionProblem;

/// How the naive implementation computes: `F64` is the oracle (everything in f64); `F32`, `F16`,
/// `BF16` are the plain implementations the kernels' error is compared with: inputs, S, P and
/// the outputs stored in that type; scale, exp, ln and every sum in f32, sums accumulated
/// sequentially with exact products (an FMA per term), as matrix units and plain f32 code do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    F64,
    F32,
    F16,
    BF16,
}

impl Precision {
    /// `x` rounded to the arithmetic type: f64 for the oracle, f32 for the plain versions.
    pub fn arith(self, x: f64) -> f64 {
        match self {
            Precision::F64 => x,
            _ => x as f32 as f64,
        }
    }

    /// A sum accumulated term by term in the arithmetic type (products passed in exactly).
    pub fn sum(self, terms: impl Iterator<Item = f64>) -> f64 {
        terms.fold(0.0, |acc, term| self.arith(acc + term))
    }

    /// `exp(x)` in the arithmetic type.
    fn exp(self, x: f64) -> f64 {
        match self {
            Precision::F64 => x.exp(),
            _ => (x as f32).exp() as f64,
        }
    }

    /// `ln(x)` in the arithmetic type.
    fn ln(self, x: f64) -> f64 {
        match self {
            Precision::F64 => x.ln(),
            _ => (x as f32).ln() as f64,
        }
    }

    /// `x` rounded to the storage type.
    pub fn round(self, x: f64) -> f64 {
        match self {
            Precision::F64 => x,
            Precision::F32 => x as f32 as f64,
            Precision::F16 => half::f16::from_f64(x).to_f64(),
            Precision::BF16 => half::bf16::from_f64(x).to_f64(),
        }
    }
}

/// Inputs of one problem, as f64 (already rounded to the test dtype by the caller).
#[derive(Debug, Clone)]
pub struct Inputs<'a> {
    pub q: &'a [f64],
    pub k: &'a [f64],
    pub v: &'a [f64],
    /// `true` = masked.
    pub mask: Option<&'a [bool]>,
    pub bias: Option<&'a [f64]>,
    /// ALiBi slopes `[num_heads]` (f32 values).
    pub alibi: Option<&'a [f64]>,
}

/// The dropout factor of entry `(i, j)` of query head `bh`: `1 / (1 - p)` kept, 0 dropped, 1
/// without dropout (the kernels' mask, regenerated on the host).
fn dropout_factor(p: &AttentionProblem, bh: usize, i: usize, j: usize) -> f64 {
    match p.dropout {
        Some(d) if d.prob > 0.0 => {
            if crate::primitives::dropout::keep_host(d.seed, d.prob, bh as u32, i as u32, j as u32) {
                1.0 / (1.0 - d.prob)
            } else {
                0.0
            }
        }
        _ => 1.0,
    }
}

/// The (batch * num_kv_heads) index of the key/value head query head `bh` (a batch * num_heads
/// index) reads.
fn kv_index(p: &AttentionProblem, bh: usize) -> usize {
    let (b, h) = (bh / p.num_heads, bh % p.num_heads);
    b * p.num_kv_heads + h / p.kv_group()
}

/// Forward results: `o [b,h,seq_q,val_dim]`, `lse [b,h,seq_q]` (natural log; `f64::INFINITY`
/// for a fully masked row, whose output is 0).
#[derive(Debug, Clone)]
pub struct Forward {
    pub o: Vec<f64>,
    pub lse: Vec<f64>,
}

/// Backward results, with the intermediate `delta = rowsum(d_out * o)` the kernels also compute.
#[derive(Debug, Clone)]
pub struct Backward {
    pub dq: Vec<f64>,
    pub dk: Vec<f64>,
    pub dv: Vec<f64>,
    pub delta: Vec<f64>,
}

/// Per (batch, head) scores after scale, softcap, mask, causal and bias. `None` = masked.
/// Also returns tanh(s / softcap) per entry for the softcap derivative.
fn logits(
    p: &AttentionProblem,
    x: &Inputs,
    bh: usize,
    prec: Precision,
) -> (Vec<Option<f64>>, Vec<f64>) {
    let (sq, skv, d) = (p.seq_q, p.seq_kv, p.head_dim);
    let bkv = kv_index(p, bh);
    let mut s = vec![None; sq * skv];
    let mut tanh = vec![0.0; sq * skv];
    for i in 0..sq {
        for j in 0..skv {
            let idx = i * skv + j;
            let dot =
                prec.sum((0..d).map(|c| x.q[(bh * sq + i) * d + c] * x.k[(bkv * skv + j) * d + c]));
            let mut logit = prec.round(prec.arith(dot * prec.arith(p.scale)));
            if let Some(cap) = p.softcap {
                // Three stored intermediates, as a plain implementation keeps them: s / cap,
                // its tanh, and cap * tanh.
                let x = prec.round(prec.arith(logit / prec.arith(cap)));
                tanh[idx] = prec.round(prec.arith(x.tanh()));
                logit = prec.round(prec.arith(prec.arith(cap) * tanh[idx]));
            }
            let masked = x.mask.is_some_and(|m| m[bh * sq * skv + idx]) || !p.sees(i, j);
            if !masked {
                let bias = x.bias.map_or(0.0, |b| b[bh * sq * skv + idx]);
                // ALiBi in the arithmetic type, not rounded to storage: the kernels compute it
                // in f32, never store it.
                let distance = ((i + skv) as f64 - (sq + j) as f64).abs();
                let alibi = x.alibi.map_or(0.0, |slopes| {
                    prec.arith(slopes[bh % p.num_heads] * distance)
                });
                s[idx] = Some(prec.round(logit + bias - alibi));
            }
        }
    }
    (s, tanh)
}

/// Two-pass softmax of one row: `P` and the row's log-sum-exp. A fully masked row gives P = 0
/// and lse = +inf (so that exp(s - lse) = 0 for every s).
fn softmax_row(row: &[Option<f64>], quiet: bool, prec: Precision) -> (Vec<f64>, f64) {
    let mut max = row
        .iter()
        .flatten()
        .copied()
        .fold(f64::NEG_INFINITY, f64::max);
    if quiet {
        // One more term exp(0): the reference max(max, 0) keeps every term <= 1.
        max = max.max(0.0);
    } else if max == f64::NEG_INFINITY {
        return (vec![0.0; row.len()], f64::INFINITY);
    }
    let exp = |s: f64| prec.exp(prec.arith(s - max));
    let extra = if quiet { exp(0.0) } else { 0.0 };
    let sum = prec.arith(extra + prec.sum(row.iter().flatten().map(|&s| exp(s))));
    let p = row
        .iter()
        .map(|s| s.map_or(0.0, |s| prec.round(prec.arith(exp(s) / sum))))
        .collect();
    (p, prec.arith(max + prec.ln(sum)))
}

pub fn forward(p: &AttentionProblem, x: &Inputs, prec: Precision) -> Forward {
    let (sq, skv, dv) = (p.seq_q, p.seq_kv, p.val_dim);
    let mut o = vec![0.0; p.heads_total() * sq * dv];
    let mut lse = vec![0.0; p.heads_total() * sq];
    for bh in 0..p.heads_total() {
        let (s, _) = logits(p, x, bh, prec);
        let bkv = kv_index(p, bh);
        for i in 0..sq {
            let (prob, row_lse) = softmax_row(&s[i * skv..(i + 1) * skv], p.quiet_softmax, prec);
            lse[bh * sq + i] = row_lse;
            for c in 0..dv {
                let acc = prec.sum(
                    (0..skv).map(|j| prec.arith(prob[j] * dropout_factor(p, bh, i, j)) * x.v[(bkv * skv + j) * dv + c]),
                );
                o[(bh * sq + i) * dv + c] = prec.round(acc);
            }
        }
    }
    Forward { o, lse }
}

/// Gradients of `sum(o * d_out)` with respect to q, k and v (the bias and mask are constants).
pub fn backward(p: &AttentionProblem, x: &Inputs, d_out: &[f64], prec: Precision) -> Backward {
    let (sq, skv, d, dv) = (p.seq_q, p.seq_kv, p.head_dim, p.val_dim);
    let fwd = forward(p, x, prec);
    let mut dq = vec![0.0; x.q.len()];
    let mut dk = vec![0.0; x.k.len()];
    let mut dvv = vec![0.0; x.v.len()];
    let mut delta = vec![0.0; p.heads_total() * sq];
    for bh in 0..p.heads_total() {
        let (s, tanh) = logits(p, x, bh, prec);
        let bkv = kv_index(p, bh);
        for i in 0..sq {
            let row = bh * sq + i;
            let (prob, _) = softmax_row(&s[i * skv..(i + 1) * skv], p.quiet_softmax, prec);
            delta[row] = prec.sum((0..dv).map(|c| d_out[row * dv + c] * fwd.o[row * dv + c]));
            for j in 0..skv {
                let kv_row = bkv * skv + j;
                let dp = prec.sum((0..dv).map(|c| d_out[row * dv + c] * x.v[kv_row * dv + c]));
                // Dropout: dV takes P * z, dS = P * (dP * z - delta).
                let z = dropout_factor(p, bh, i, j);
                let dropped = prec.arith(prob[j] * z);
                for c in 0..dv {
                    let at = kv_row * dv + c;
                    dvv[at] = prec.arith(dvv[at] + dropped * d_out[row * dv + c]);
                }
                let mut ds = prec.arith(prob[j] * prec.arith(prec.arith(dp * z) - delta[row]));
                if p.softcap.is_some() {
                    let t = tanh[i * skv + j];
                    ds = prec.arith(ds * prec.arith(1.0 - t * t));
                }
                let ds = prec.arith(prec.round(ds) * prec.arith(p.scale));
                for c in 0..d {
                    let (q_at, k_at) = (row * d + c, kv_row * d + c);
                    dq[q_at] = prec.arith(dq[q_at] + ds * x.k[k_at]);
                    dk[k_at] = prec.arith(dk[k_at] + ds * x.q[q_at]);
                }
            }
        }
    }
    for g in [&mut dq, &mut dk, &mut dvv] {
        g.iter_mut().for_each(|x| *x = prec.round(*x));
    }
    Backward {
        dq,
        dk,
        dv: dvv,
        delta,
    }
}
