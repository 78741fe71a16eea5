//! The f64 CPU oracle: a naive attention that materializes S and P and uses a two-pass softmax
//! (max, then sum), so it shares none of the kernels' algorithm (no online softmax, no tiling).
//!
//! The same code, with every stored intermediate rounded to a lower precision, is the "plain
//! same-precision implementation" of the FlashAttention tolerance rule (see [`Precision`]).
//! All tensors are contiguous row-major, shapes as in [`crate::problem`].
use crate::problem::AttentionProblem;

/// How the intermediates of the naive implementation are stored: `F64` is the oracle; `F32`,
/// `F16`, `BF16` are the plain implementations the kernels' error is compared with (inputs,
/// S, P and the outputs rounded to that type; sums accumulated in f32 or better).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    F64,
    F32,
    F16,
    BF16,
}

impl Precision {
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
fn logits(p: &AttentionProblem, x: &Inputs, bh: usize, prec: Precision) -> (Vec<Option<f64>>, Vec<f64>) {
    let (sq, skv, d) = (p.seq_q, p.seq_kv, p.head_dim);
    let mut s = vec![None; sq * skv];
    let mut tanh = vec![0.0; sq * skv];
    for i in 0..sq {
        for j in 0..skv {
            let idx = i * skv + j;
            let dot: f64 = (0..d)
                .map(|c| x.q[(bh * sq + i) * d + c] * x.k[(bh * skv + j) * d + c])
                .sum();
            let mut logit = prec.round(dot * p.scale);
            if let Some(cap) = p.softcap {
                // Three stored intermediates, as a plain implementation keeps them: s / cap,
                // its tanh, and cap * tanh.
                let x = prec.round(logit / cap);
                tanh[idx] = prec.round(x.tanh());
                logit = prec.round(cap * tanh[idx]);
            }
            let masked = x.mask.is_some_and(|m| m[bh * sq * skv + idx])
                || (p.causal && j >= p.causal_end(i));
            if !masked {
                let bias = x.bias.map_or(0.0, |b| b[bh * sq * skv + idx]);
                s[idx] = Some(prec.round(logit + bias));
            }
        }
    }
    (s, tanh)
}

/// Two-pass softmax of one row: `P` and the row's log-sum-exp. A fully masked row gives P = 0
/// and lse = +inf (so that exp(s - lse) = 0 for every s).
fn softmax_row(row: &[Option<f64>], prec: Precision) -> (Vec<f64>, f64) {
    let max = row.iter().flatten().copied().fold(f64::NEG_INFINITY, f64::max);
    if max == f64::NEG_INFINITY {
        return (vec![0.0; row.len()], f64::INFINITY);
    }
    let sum: f64 = row.iter().flatten().map(|s| (s - max).exp()).sum();
    let p = row.iter().map(|s| s.map_or(0.0, |s| prec.round((s - max).exp() / sum))).collect();
    (p, max + sum.ln())
}

pub fn forward(p: &AttentionProblem, x: &Inputs, prec: Precision) -> Forward {
    let (sq, skv, dv) = (p.seq_q, p.seq_kv, p.val_dim);
    let mut o = vec![0.0; p.heads_total() * sq * dv];
    let mut lse = vec![0.0; p.heads_total() * sq];
    for bh in 0..p.heads_total() {
        let (s, _) = logits(p, x, bh, prec);
        for i in 0..sq {
            let (prob, row_lse) = softmax_row(&s[i * skv..(i + 1) * skv], prec);
            lse[bh * sq + i] = row_lse;
            for c in 0..dv {
                let acc: f64 = (0..skv).map(|j| prob[j] * x.v[(bh * skv + j) * dv + c]).sum();
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
        for i in 0..sq {
            let row = bh * sq + i;
            let (prob, _) = softmax_row(&s[i * skv..(i + 1) * skv], prec);
            delta[row] = (0..dv).map(|c| d_out[row * dv + c] * fwd.o[row * dv + c]).sum();
            for j in 0..skv {
                let kv_row = bh * skv + j;
                let dp: f64 = (0..dv).map(|c| d_out[row * dv + c] * x.v[kv_row * dv + c]).sum();
                for c in 0..dv {
                    dvv[kv_row * dv + c] += prob[j] * d_out[row * dv + c];
                }
                let mut ds = prob[j] * (dp - delta[row]);
                if p.softcap.is_some() {
                    let t = tanh[i * skv + j];
                    ds *= 1.0 - t * t;
                }
                let ds = prec.round(ds) * p.scale;
                for c in 0..d {
                    dq[row * d + c] += ds * x.k[kv_row * d + c];
                    dk[kv_row * d + c] += ds * x.q[row * d + c];
                }
            }
        }
    }
    for g in [&mut dq, &mut dk, &mut dvv] {
        g.iter_mut().for_each(|x| *x = prec.round(*x));
    }
    Backward { dq, dk, dv: dvv, delta }
}
