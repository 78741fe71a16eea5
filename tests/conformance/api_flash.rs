//! `flash_attention` on `Flash<..>`: the kernels take the extended options (grouped-query
//! attention, windows, ALiBi, quiet softmax, key and query padding, dropout) through
//! `B::attention`
//! with nothing but `B: Backend` at the call site, forward (`Flash<Fusion<..>>`) and backward
//! (`Flash<Autodiff<..>>`). The kernels themselves are checked against the f64 oracle in the kernels crate
//! (`tests/backward/features.rs`); here the plumbing: the kernel route, the FlashAttention rule
//! against the oracle with the Burn-ops path as the plain implementation, the typed refusal.
use burn::tensor::{Int, Tensor, backend::{AutodiffBackend, Backend}};
use burn_flash_attn::kernels::{
    AttentionProblem, FloatKind, MaskKind,
    reference::{self, Inputs, Precision},
    tolerance::{GRADIENT_FACTOR, OUTPUT_FACTOR, check},
};
use burn_flash_attn::kernels::backward::BackwardPath;
use burn_flash_attn::kernels::plan::{DqAccumulation, Tuning};
use burn_flash_attn::{
    AttentionError, Dropout, FlashAttentionOptions, KeyPadding, Route, SlidingWindow, flash_attention, last_route,
};
use serial_test::serial;

use crate::common::{FlashInner, FlashTrain, Inner, Train, float, random_data, skip_without_device, to_f64};

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

/// One case: its options, described once and built on any backend, and the same problem for the
/// f64 oracle.
#[derive(Clone, Copy)]
struct Features {
    name: &'static str,
    causal: bool,
    window: Option<SlidingWindow>,
    quiet: bool,
    softcap: Option<f64>,
    alibi: bool,
    /// Key and query lengths per batch entry.
    lengths: Option<([usize; 2], [usize; 2])>,
    dropout: Option<Dropout>,
}

const NONE: Features = Features {
    name: "",
    causal: false,
    window: None,
    quiet: false,
    softcap: None,
    alibi: false,
    lengths: None,
    dropout: None,
};

const CASES: [Features; 7] = [
    Features { name: "gqa-causal", causal: true, ..NONE },
    Features { name: "window", window: Some(SlidingWindow { left: Some(5), right: Some(3) }), ..NONE },
    Features { name: "quiet-softcap", quiet: true, softcap: Some(2.0), ..NONE },
    Features {
        name: "alibi-causal-window",
        causal: true,
        alibi: true,
        window: Some(SlidingWindow { left: Some(8), right: None }),
        ..NONE
    },
    Features { name: "key-and-query-lengths", causal: true, lengths: Some(([20, 27], [19, 11])), ..NONE },
    Features { name: "dropout-gqa-causal", causal: true, dropout: Some(Dropout { prob: 0.2, seed: 11 }), ..NONE },
    Features {
        name: "dropout-quiet-window-lengths",
        quiet: true,
        window: Some(SlidingWindow { left: Some(6), right: Some(2) }),
        lengths: Some(([27, 13], [15, 19])),
        dropout: Some(Dropout { prob: 0.4, seed: 1 << 33 }),
        ..NONE
    },
];

impl Features {
    fn slopes(&self) -> Vec<f32> {
        (0..SHAPE.heads).map(|h| 0.5f32.powi(h as i32 + 1)).collect()
    }

    fn options<B: Backend>(&self) -> FlashAttentionOptions<B> {
        let device = Default::default();
        let lengths = |values: [usize; 2]| Tensor::<B, 1, Int>::from_ints(values.map(|x| x as i64), &device);
        FlashAttentionOptions::new()
            .with_causal(self.causal)
            .with_window(self.window)
            .with_quiet_softmax(self.quiet)
            .with_softcap(self.softcap)
            .with_dropout(self.dropout)
            .with_alibi_slopes(self.alibi.then(|| Tensor::from_floats(self.slopes().as_slice(), &device)))
            .with_key_padding(
                self.lengths
                    .map(|(keys, queries)| KeyPadding::Lengths { keys: lengths(keys), queries: Some(lengths(queries)) }),
            )
    }

    fn problem(&self) -> AttentionProblem {
        let s = SHAPE;
        AttentionProblem {
            batch: s.batch,
            num_heads: s.heads,
            num_kv_heads: s.kv_heads,
            seq_q: s.seq_q,
            seq_kv: s.seq_kv,
            head_dim: s.dim,
            val_dim: s.dim,
            dtype: FloatKind::F32,
            scale: AttentionProblem::default_scale(s.dim),
            softcap: self.softcap,
            causal: self.causal,
            mask: self.lengths.map(|_| MaskKind::U8),
            has_bias: false,
            quiet_softmax: self.quiet,
            window: self.window,
            alibi: self.alibi,
            dropout: self.dropout,
        }
    }

    /// Key padding as the oracle's mask, `[b, h, i, j]`.
    fn key_mask(&self) -> Option<Vec<bool>> {
        let (keys, _) = self.lengths?;
        let s = SHAPE;
        Some((0..s.batch * s.heads * s.seq_q * s.seq_kv).map(|x| x % s.seq_kv >= keys[x / (s.heads * s.seq_q * s.seq_kv)]).collect())
    }

    /// Whether flat row `row` of `[b, h, i]` is a padded query row.
    fn padded(&self, row: usize) -> bool {
        let s = SHAPE;
        self.lengths.is_some_and(|(_, queries)| row % s.seq_q >= queries[row / (s.heads * s.seq_q)])
    }

    /// The oracle: output and gradients, padded query rows zeroed (and their d_out with them,
    /// as `mask_fill` passes no gradient).
    fn reference(&self, data: &[Vec<f64>; 4]) -> (Vec<f64>, [Vec<f64>; 3]) {
        let [q, k, v, d_out] = data;
        let (mask, slopes) = (self.key_mask(), self.slopes().iter().map(|&x| x as f64).collect::<Vec<_>>());
        let inputs = Inputs { q, k, v, mask: mask.as_deref(), bias: None, alibi: self.alibi.then_some(slopes.as_slice()) };
        let zero_padded = |values: &[f64]| -> Vec<f64> {
            values.chunks(SHAPE.dim).enumerate().flat_map(|(r, row)| row.iter().map(move |&x| if self.padded(r) { 0.0 } else { x })).collect()
        };
        let problem = self.problem();
        let o = zero_padded(&reference::forward(&problem, &inputs, Precision::F64).o);
        let d_out = zero_padded(d_out);
        let b = reference::backward(&problem, &inputs, &d_out, Precision::F64);
        (o, [b.dq, b.dk, b.dv])
    }
}

fn inputs<B: Backend>(seed: u64) -> [Tensor<B, 4>; 4] {
    let data = host_data(seed);
    [0, 1, 2, 3].map(|i| float(&data[i]))
}

fn host_data(seed: u64) -> [burn::tensor::TensorData; 4] {
    let s = SHAPE;
    [
        random_data([s.batch, s.heads, s.seq_q, s.dim], seed),
        random_data([s.batch, s.kv_heads, s.seq_kv, s.dim], seed + 1),
        random_data([s.batch, s.kv_heads, s.seq_kv, s.dim], seed + 2),
        random_data([s.batch, s.heads, s.seq_q, s.dim], seed + 3),
    ]
}

fn assert_kernel_route(name: &str) {
    let route = last_route().expect("attention was routed");
    assert!(route.is_kernel(), "{name}: {route}");
}

/// Forward on `Flash<Fusion<..>>` (the kernels) against the oracle, with the Burn-ops path of
/// the same call on the plain backend as the plain f32 implementation (FlashAttention rule).
#[test]
#[serial]
fn forward_reaches_the_kernels_and_meets_the_rule() {
    if skip_without_device("forward_reaches_the_kernels_and_meets_the_rule") {
        return;
    }
    for case in CASES {
        let [q, k, v, _] = inputs::<FlashInner>(41);
        let flash = flash_attention(q, k, v, case.options()).expect("valid call");
        assert_kernel_route(case.name);
        let [q, k, v, _] = inputs::<Inner>(41);
        let plain = flash_attention(q, k, v, case.options()).expect("valid call");
        let (want, _) = case.reference(&host_data(41).map(to_f64));
        let (flash, plain) = (to_f64(flash.into_data()), to_f64(plain.into_data()));
        check(case.name, &flash, &plain, &want, OUTPUT_FACTOR, Precision::F32).unwrap();
    }
}

fn gradients<B: AutodiffBackend>(case: &Features) -> [Vec<f64>; 3] {
    let [q, k, v, d_out] = inputs::<B>(43);
    let [q, k, v] = [q, k, v].map(|t| t.require_grad());
    let out = flash_attention(q.clone(), k.clone(), v.clone(), case.options()).expect("valid call");
    let grads = (out * d_out).sum().backward();
    [&q, &k, &v].map(|t| to_f64(t.grad(&grads).expect("a gradient").into_data()))
}

/// Backward through `Flash<Autodiff<..>>` (the kernels' node) against the oracle, the Burn-ops
/// path under `Autodiff` as the plain implementation.
#[test]
#[serial]
fn backward_reaches_the_kernels_and_meets_the_rule() {
    if skip_without_device("backward_reaches_the_kernels_and_meets_the_rule") {
        return;
    }
    check_backward_cases("", |name, _| assert_kernel_route(name));
}

/// Each case's gradients through `Flash<Autodiff<..>>` against the oracle with the rule, the
/// Burn-ops path under `Autodiff` as the plain implementation; `inspect` sees the case's name
/// and its route right after the kernels' call.
fn check_backward_cases(label: &str, inspect: impl Fn(&str, &Route)) {
    for case in CASES {
        let flash = gradients::<FlashTrain>(&case);
        inspect(case.name, &last_route().expect("attention was routed"));
        let plain = gradients::<Train>(&case);
        let (_, want) = case.reference(&host_data(43).map(to_f64));
        for (i, what) in ["dq", "dk", "dv"].iter().enumerate() {
            let name = format!("{} {what}{label}", case.name);
            check(&name, &flash[i], &plain[i], &want[i], GRADIENT_FACTOR, Precision::F32).unwrap();
        }
    }
}

/// The same calls with the one-pass backward (`Tuning::with_backward_dq(Atomic)`: dQ added by
/// the dK/dV kernel with f32 atomic adds) where the plan can take it (the portable dK/dV, a
/// device with f32 atomic add): the route's plan says so, and the gradients meet the rule.
#[test]
#[serial]
fn backward_one_pass_reaches_the_kernels_and_meets_the_rule() {
    if skip_without_device("backward_one_pass_reaches_the_kernels_and_meets_the_rule") {
        return;
    }
    /// Puts the default tuning back, also when an assertion fails.
    struct Restore;
    impl Drop for Restore {
        fn drop(&mut self) {
            burn_flash_attn::set_tuning(Tuning::default());
        }
    }
    let _restore = Restore;
    burn_flash_attn::set_tuning(Tuning::default().with_backward_dq(Some(DqAccumulation::Atomic)));
    check_backward_cases(" (one pass)", |name, route| {
        let Route::Kernel { plan, .. } = route else { panic!("{name}: {route}") };
        let backward = plan.backward.as_ref().expect("training plans the backward");
        let one_pass = backward.dkdv.config.path() == BackwardPath::Portable;
        println!("{name}: {backward}");
        assert_eq!(backward.dq_accumulation() == DqAccumulation::Atomic, one_pass && atomic_f32_add(), "{name}: {backward}");
    });
}

/// Whether the test device adds to f32 atomically.
fn atomic_f32_add() -> bool {
    let client = <crate::common::Runtime as cubecl::Runtime>::client(&Default::default());
    burn_flash_attn::kernels::DeviceCaps::of(&client).has_atomic_f32_add()
}

/// What the kernels cannot run is a typed refusal from `flash_attention` on `Flash` (here a
/// bias that requires grad: dBias is not produced), or the Burn-ops path with
/// `allow_fallback`.
#[test]
#[serial]
fn a_call_the_kernels_cannot_run_is_a_typed_refusal_unless_fallback_is_allowed() {
    if skip_without_device("a_call_the_kernels_cannot_run_is_a_typed_refusal_unless_fallback_is_allowed") {
        return;
    }
    let s = SHAPE;
    let [q, k, v, _] = inputs::<FlashTrain>(47);
    let bias = || {
        let bias: Tensor<FlashTrain, 4> = float(&random_data([1, 1, s.seq_q, s.seq_kv], 48));
        Some(bias.require_grad().expand([s.batch, s.heads, s.seq_q, s.seq_kv]))
    };
    let refused = flash_attention(q.clone(), k.clone(), v.clone(), FlashAttentionOptions::new().with_bias(bias()));
    assert!(
        matches!(&refused, Err(AttentionError::Unsupported { reason }) if reason.contains("requires grad")),
        "{refused:?}"
    );
    let options = FlashAttentionOptions::new().with_bias(bias()).with_allow_fallback(true);
    let computed = flash_attention(q, k, v, options).expect("Burn ops path");
    assert_eq!(computed.dims(), [s.batch, s.heads, s.seq_q, s.dim]);
}
