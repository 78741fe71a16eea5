//! `attention features` and `attention features-memory`: the model features of
//! `burn_flash_attn::flash_attention` at the shapes of issue 13, bf16, beside Burn's path (the
//! same call on the plain backend: Burn ops, K/V repeated, scores materialized) and
//! `benches/anchors/torch_features.py` (PyTorch, same device run).
//!
//! - `gqa8`: B=4, H=32, H_kv=8, N=4096, D=128, causal;
//! - `window1024`: B=4, H=16, N=8192, D=128, causal, 1024 keys to the left;
//! - `dropout0.1`: B=16, H=16, N=2048, D=64, not causal, dropout 0.1 on the probabilities.
//!
//! FLOPs count the visible (query, key) pairs (4·D each forward, 3.5× for forward+backward), the
//! convention of `torch_features.py`. Memory: peak reserved MiB of one call at N = 8192 with key
//! padding (lengths) and with an `expand`-broadcast `[B, 1, 1, N]` mask.
use burn::tensor::{Bool, Distribution, Int, Tensor, backend::{AutodiffBackend, Backend}};
use burn_flash_attn::{Dropout, FlashAttentionOptions, KeyPadding, SlidingWindow, flash_attention};

use super::{Autodiff, Flash, Inner, TRAIN_FLOP_FACTOR, check_route, device, peak_mib, time};

/// One feature row's problem.
#[derive(Clone, Copy)]
struct Feature {
    tag: &'static str,
    batch: usize,
    heads: usize,
    kv_heads: usize,
    seq: usize,
    head_dim: usize,
    causal: bool,
    /// Keys to the left of the diagonal (with causal).
    window: Option<usize>,
    dropout: Option<f64>,
}

const FEATURES: [Feature; 3] = [
    Feature { tag: "gqa8", batch: 4, heads: 32, kv_heads: 8, seq: 4096, head_dim: 128, causal: true, window: None, dropout: None },
    Feature {
        tag: "window1024",
        batch: 4,
        heads: 16,
        kv_heads: 16,
        seq: 8192,
        head_dim: 128,
        causal: true,
        window: Some(1024),
        dropout: None,
    },
    Feature {
        tag: "dropout0.1",
        batch: 16,
        heads: 16,
        kv_heads: 16,
        seq: 2048,
        head_dim: 64,
        causal: false,
        window: None,
        dropout: Some(0.1),
    },
];

impl Feature {
    fn options<B: Backend>(&self) -> FlashAttentionOptions<B> {
        FlashAttentionOptions::new()
            .with_causal(self.causal)
            .with_window(self.window.map(|left| SlidingWindow::new(Some(left), None)))
            .with_dropout(self.dropout.map(|prob| Dropout::new(prob, 0)))
    }

    /// q, k, v.
    fn inputs<B: Backend>(&self) -> [Tensor<B, 4>; 3] {
        let dev = device::<B>();
        let random = |heads: usize| {
            Tensor::random([self.batch, heads, self.seq, self.head_dim], Distribution::Normal(0.0, 1.0), &dev)
        };
        [random(self.heads), random(self.kv_heads), random(self.kv_heads)]
    }

    /// Forward FLOPs of the visible pairs.
    fn flops(&self) -> f64 {
        let n = self.seq;
        let visible = |i: usize| {
            if self.causal { i + 1 - self.window.map_or(0, |w| (i + 1).saturating_sub(w + 1)) } else { n }
        };
        let pairs: usize = (0..n).map(visible).sum();
        4.0 * (self.batch * self.heads) as f64 * pairs as f64 * self.head_dim as f64
    }
}

fn forward<B: Backend>(feature: Feature) -> impl FnMut() {
    let [q, k, v] = feature.inputs::<B>();
    move || {
        let out = flash_attention(q.clone(), k.clone(), v.clone(), feature.options()).expect("valid call");
        drop(out);
    }
}

fn train<B: AutodiffBackend>(feature: Feature) -> impl FnMut() {
    let [q, k, v] = feature.inputs::<B>();
    move || {
        let [q, k, v] = [&q, &k, &v].map(|x| x.clone().detach().require_grad());
        let out = flash_attention(q.clone(), k, v, feature.options()).expect("valid call");
        // The output's gradient seeded with ones, as in `train` of the speed rows.
        let grads = out.backward();
        drop(q.grad(&grads));
    }
}

type Run = Box<dyn FnMut()>;
/// (impl, pass, flop factor over the forward, benchmark).
type Row = (&'static str, &'static str, f64, fn(Feature) -> Run);

pub fn features(flash_only: bool) {
    println!("impl,B,H,N,D,causal,pass,ms,tflops");
    for feature in FEATURES {
        let rows: [Row; 4] = [
            ("flash", "fwd", 1.0, |f| Box::new(forward::<Flash<Inner>>(f))),
            ("flash", "fwd+bwd", TRAIN_FLOP_FACTOR, |f| Box::new(train::<Flash<Autodiff<Inner>>>(f))),
            ("burn", "fwd", 1.0, |f| Box::new(forward::<Inner>(f))),
            ("burn", "fwd+bwd", TRAIN_FLOP_FACTOR, |f| Box::new(train::<Autodiff<Inner>>(f))),
        ];
        let Feature { tag, batch, heads, seq, head_dim, causal, .. } = feature;
        for (name, pass, factor, bench) in rows {
            if flash_only && name != "flash" {
                continue;
            }
            let ms = time(bench(feature));
            check_route(name, [batch, heads, seq, head_dim]);
            let tflops = feature.flops() * factor / ms / 1e9;
            println!("{name}-{tag},{batch},{heads},{seq},{head_dim},{causal},{pass},{ms:.3},{tflops:.1}");
        }
    }
}

/// Key padding (every batch entry keeps 3/4 of its keys) and a broadcast `[B, 1, 1, N]` mask.
fn padded_forward<B: Backend>(expanded_mask: bool) -> impl FnMut() {
    let (b, h, n, d) = (4, 16, 8192, 128);
    let dev = device::<B>();
    let [q, k, v] = [0; 3].map(|_| Tensor::<B, 4>::random([b, h, n, d], Distribution::Normal(0.0, 1.0), &dev));
    let lengths = Tensor::<B, 1, Int>::from_ints([n * 3 / 4, n, n / 2, n - 1].map(|x| x as i64), &dev);
    let keys = Tensor::<B, 1, Int>::arange(0..n as i64, &dev).reshape([1, n]);
    let key_mask: Tensor<B, 4, Bool> = keys.greater_equal(lengths.clone().reshape([b, 1])).reshape([b, 1, 1, n]);
    move || {
        let options = if expanded_mask {
            FlashAttentionOptions::new().with_mask(Some(key_mask.clone().expand([b, h, n, n])))
        } else {
            FlashAttentionOptions::new()
                .with_key_padding(Some(KeyPadding::Lengths { keys: lengths.clone(), queries: None }))
        };
        drop(flash_attention(q.clone(), k.clone(), v.clone(), options).expect("valid call"));
    }
}

pub fn features_memory() {
    println!("impl,B,H,N,D,causal,pass,peak_mib");
    for (tag, expanded) in [("keypad", false), ("expandedmask", true)] {
        let rows: [(&str, Run); 2] = [
            ("flash", Box::new(padded_forward::<Flash<Inner>>(expanded))),
            ("burn", Box::new(padded_forward::<Inner>(expanded))),
        ];
        for (name, run) in rows {
            let peak = peak_mib(run);
            check_route(name, [4, 16, 8192, 128]);
            println!("{name}-{tag},4,16,8192,128,false,fwd,{peak:.0}");
        }
    }
}
