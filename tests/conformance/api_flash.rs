//! `flash_attention` on `Flash<..>`: the kernels take the extended options (grouped-query
//! attention, windows, ALiBi, quiet softmax, key and query padding) through `B::attention`
//! with nothing but `B: Backend` at the call site, forward (`Flash<Fusion<..>>`) and backward
//! (`Flash<Autodiff<..>>`), and agree with the Burn-ops path of the same call on the plain
//! backend. The kernels themselves are checked against the f64 oracle in the kernels crate
//! (`tests/backward/features.rs`); here the plumbing is: same semantics, the kernel route, the
//! typed refusal.
use burn::tensor::{Int, Tensor, backend::Backend};
use burn_flash_attn::{
    AttentionError, Dropout, FlashAttentionOptions, KeyPadding, SlidingWindow, flash_attention, last_route,
};
use serial_test::serial;

use crate::common::{FlashInner, FlashTrain, Inner, Train, float, max_abs_diff, random_data, skip_without_device, to_f64};

/// f32 on both sides, different algorithms (online softmax in tiles vs materialized scores):
/// differences of a few ulps of the O(1) outputs and gradients.
const TOLERANCE: f64 = 2e-5;

#[derive(Clone, Copy)]
struct Shape {
    batch: usize,
    heads: usize,
    kv_heads: usize,
    seq_q: usize,
    seq_kv: usize,
    dim: usize,
}

const SHAPE: Shape = Shape { batch: 2, heads: 4, kv_heads: 2, seq_q: 19, seq_kv: 27, dim: 16 };

/// The options of one case, built on any backend.
type Options<B> = fn(&Shape, &burn::tensor::Device<B>) -> FlashAttentionOptions<B>;

fn cases<B: Backend>() -> Vec<(&'static str, Options<B>)> {
    vec![
        ("gqa-causal", |_, _| FlashAttentionOptions::new().with_causal(true)),
        ("window", |_, _| FlashAttentionOptions::new().with_window(Some(SlidingWindow::new(Some(5), Some(3))))),
        ("quiet-softcap", |_, _| FlashAttentionOptions::new().with_quiet_softmax(true).with_softcap(Some(2.0))),
        ("alibi-causal-window", |s, d| {
            let slopes: Vec<f32> = (0..s.heads).map(|h| 0.5f32.powi(h as i32 + 1)).collect();
            FlashAttentionOptions::new()
                .with_causal(true)
                .with_window(Some(SlidingWindow::new(Some(8), None)))
                .with_alibi_slopes(Some(Tensor::from_floats(slopes.as_slice(), d)))
        }),
        ("key-and-query-lengths", |s, d| {
            let lengths = |values: [i64; 2]| Tensor::<B, 1, Int>::from_ints(values, d);
            let _ = s;
            FlashAttentionOptions::new().with_causal(true).with_key_padding(Some(KeyPadding::Lengths {
                keys: lengths([20, 27]),
                queries: Some(lengths([19, 11])),
            }))
        }),
    ]
}

fn inputs<B: Backend>(s: &Shape, seed: u64) -> [Tensor<B, 4>; 4] {
    [
        float(&random_data([s.batch, s.heads, s.seq_q, s.dim], seed)),
        float(&random_data([s.batch, s.kv_heads, s.seq_kv, s.dim], seed + 1)),
        float(&random_data([s.batch, s.kv_heads, s.seq_kv, s.dim], seed + 2)),
        float(&random_data([s.batch, s.heads, s.seq_q, s.dim], seed + 3)),
    ]
}

fn assert_kernel_route(name: &str) {
    let route = last_route().expect("attention was routed");
    assert!(route.is_kernel(), "{name}: {route}");
}

#[test]
#[serial]
fn forward_reaches_the_kernels_and_matches_burn_ops() {
    if skip_without_device("forward_reaches_the_kernels_and_matches_burn_ops") {
        return;
    }
    let device = Default::default();
    for ((name, flash_options), (_, ops_options)) in cases::<FlashInner>().into_iter().zip(cases::<Inner>()) {
        let [q, k, v, _] = inputs::<FlashInner>(&SHAPE, 41);
        let flash = flash_attention(q, k, v, flash_options(&SHAPE, &device)).expect("valid call");
        assert_kernel_route(name);
        let [q, k, v, _] = inputs::<Inner>(&SHAPE, 41);
        let ops = flash_attention(q, k, v, ops_options(&SHAPE, &device)).expect("valid call");
        let diff = max_abs_diff(&to_f64(flash.into_data()), &to_f64(ops.into_data()));
        assert!(diff <= TOLERANCE, "{name}: kernels vs Burn ops differ by {diff}");
    }
}

#[test]
#[serial]
fn backward_reaches_the_kernels_and_matches_burn_ops() {
    if skip_without_device("backward_reaches_the_kernels_and_matches_burn_ops") {
        return;
    }
    let device = Default::default();
    for ((name, flash_options), (_, ops_options)) in cases::<FlashTrain>().into_iter().zip(cases::<Train>()) {
        let grads_of = |[q, k, v, d_out]: [Tensor<_, 4>; 4], options| {
            let [q, k, v] = [q, k, v].map(|t: Tensor<_, 4>| t.require_grad());
            let out = flash_attention(q.clone(), k.clone(), v.clone(), options).expect("valid call");
            let grads = (out * d_out).sum().backward();
            [&q, &k, &v].map(|t| to_f64(t.grad(&grads).expect("a gradient").into_data()))
        };
        let flash = grads_of(inputs::<FlashTrain>(&SHAPE, 43), flash_options(&SHAPE, &device));
        assert_kernel_route(name);
        let ops = {
            let [q, k, v, d_out] = inputs::<Train>(&SHAPE, 43);
            let [q, k, v] = [q, k, v].map(|t| t.require_grad());
            let out = flash_attention(q.clone(), k.clone(), v.clone(), ops_options(&SHAPE, &device)).expect("valid call");
            let grads = (out * d_out).sum().backward();
            [&q, &k, &v].map(|t| to_f64(t.grad(&grads).expect("a gradient").into_data()))
        };
        for (what, (flash, ops)) in ["dq", "dk", "dv"].iter().zip(flash.iter().zip(&ops)) {
            let diff = max_abs_diff(flash, ops);
            assert!(diff <= TOLERANCE, "{name}: {what} kernels vs Burn ops differ by {diff}");
        }
    }
}

#[test]
#[serial]
fn dropout_is_a_typed_refusal_on_flash_unless_fallback_is_allowed() {
    if skip_without_device("dropout_is_a_typed_refusal_on_flash_unless_fallback_is_allowed") {
        return;
    }
    let dropout = || FlashAttentionOptions::new().with_dropout(Some(Dropout::new(0.1, 7)));
    let [q, k, v, _] = inputs::<FlashInner>(&SHAPE, 47);
    let refused = flash_attention(q.clone(), k.clone(), v.clone(), dropout());
    assert!(
        matches!(&refused, Err(AttentionError::Unsupported { reason }) if reason.contains("dropout")),
        "{refused:?}"
    );
    let computed = flash_attention(q, k, v, dropout().with_allow_fallback(true)).expect("Burn ops path");
    assert_eq!(computed.dims(), [SHAPE.batch, SHAPE.heads, SHAPE.seq_q, SHAPE.dim]);
}
