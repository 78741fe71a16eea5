//! The extended API (`flash_attention`) on the plain backends, where it runs its Burn-ops path,
//! against the same problems written out explicitly (see [`explicit`]): GQA against K/V
//! repeated on the host, window, causal and padding against one host-built bool mask, ALiBi
//! against a host-built bias. Outputs and gradients (through `Autodiff`) meet the
//! FlashAttention rule with the f64 reference as the oracle and, as the plain implementation,
//! Burn's `attention_fallback` on the explicit inputs, on the same backend (so that its
//! matmuls round as the backend's do: TF32 on CUDA): the quiet softmax as one more key of logit
//! 0 and value 0 ([`explicit::Case::with_quiet_key`]), rows that see no key with their d_out
//! and dq zeroed (Burn's softmax over a fully masked row is not 0).
//!
//! Small shapes throughout: lavapipe runs on the CPU.
mod dropout;
mod errors;
mod explicit;

use burn::tensor::{
    Tensor, TensorData,
    backend::{AutodiffBackend, Backend},
    module::attention_fallback,
    ops::AttentionModuleOptions,
};
use burn_flash_attn::kernels::{
    reference::Precision,
    tolerance::{GRADIENT_FACTOR, OUTPUT_FACTOR, check},
};
use burn_flash_attn::{SlidingWindow, flash_attention};
use serial_test::serial;

use crate::common::{Inner, Train, bool4, first_key_visible, float, skip_without_device, to_f64};
use explicit::{BASE, Case, Data, Explicit, Padding, zero_rows};

fn window(left: Option<usize>, right: Option<usize>) -> Option<SlidingWindow> {
    Some(SlidingWindow::new(left, right))
}

/// Softmax cases: GQA ratios 1, 2 and num_heads; windows narrower and wider than the
/// sequences, with and without causal, seq_q on both sides of seq_kv; key lengths (0, and
/// beyond seq_kv) and key masks, alone and with a user mask; query lengths (also beyond
/// seq_q); ALiBi; everything at once (with a broadcast user mask and bias).
fn cases() -> Vec<Case> {
    vec![
        Case { name: "gqa_ratio1_q6_kv9", ..BASE },
        Case { name: "gqa_ratio2_q6_kv9", kv_heads: 2, ..BASE },
        Case { name: "mqa_ratio4_q6_kv9", kv_heads: 1, ..BASE },
        Case { name: "window_l2_r1_q6_kv9", window: window(Some(2), Some(1)), ..BASE },
        Case { name: "window_l1_unbounded_right_q6_kv9", window: window(Some(1), None), ..BASE },
        Case { name: "window_unbounded_left_r2_q6_kv9", window: window(None, Some(2)), ..BASE },
        Case { name: "window_l2_r3_causal_q11_kv7_empty_rows", seq_q: 11, seq_kv: 7, causal: true, window: window(Some(2), Some(3)), ..BASE },
        Case { name: "window_l20_r20_wider_than_seq_q6_kv9", window: window(Some(20), Some(20)), ..BASE },
        Case { name: "window_l20_causal_q11_kv7", seq_q: 11, seq_kv: 7, causal: true, window: window(Some(20), None), ..BASE },
        Case { name: "key_lengths_5_and_20_q6_kv9", padding: Padding::Lengths(&[5, 20], None), ..BASE },
        Case { name: "key_lengths_0_and_7_query_lengths_6_and_4_q6_kv9", padding: Padding::Lengths(&[0, 7], Some(&[6, 4])), ..BASE },
        Case { name: "key_mask_3_and_9_q6_kv9", padding: Padding::Mask(&[3, 9]), ..BASE },
        Case { name: "key_mask_with_user_mask_q6_kv9", padding: Padding::Mask(&[4, 9]), mask: true, ..BASE },
        Case { name: "alibi_q6_kv9", alibi: true, ..BASE },
        Case { name: "alibi_causal_q11_kv7", seq_q: 11, seq_kv: 7, causal: true, alibi: true, ..BASE },
        Case {
            name: "all_options_gqa2_q6_kv9",
            kv_heads: 2,
            scale: Some(0.5),
            softcap: Some(2.0),
            causal: true,
            window: window(Some(3), None),
            padding: Padding::Lengths(&[8, 5], Some(&[20, 3])),
            alibi: true,
            mask: true,
            bias: true,
            ..BASE
        },
    ]
}

/// The gradient cases: every feature with its own gradient path (the group sum of GQA, masks,
/// the ALiBi bias, padded rows), and one of all together.
fn gradient_cases() -> Vec<Case> {
    let names = [
        "gqa_ratio2_q6_kv9",
        "mqa_ratio4_q6_kv9",
        "window_l2_r3_causal_q11_kv7_empty_rows",
        "key_lengths_0_and_7_query_lengths_6_and_4_q6_kv9",
        "key_mask_3_and_9_q6_kv9",
        "alibi_causal_q11_kv7",
        "all_options_gqa2_q6_kv9",
    ];
    cases().into_iter().filter(|case| names.contains(&case.name)).collect()
}

/// Quiet softmax, also on rows that see no key (output 0 there, as if the extra key of logit
/// 0 and value 0 were the only one).
fn quiet_cases() -> Vec<Case> {
    vec![
        Case { name: "quiet_q6_kv9", quiet: true, ..BASE },
        Case { name: "quiet_causal_q11_kv7_empty_rows", seq_q: 11, seq_kv: 7, causal: true, quiet: true, ..BASE },
        Case {
            name: "quiet_gqa2_window_padding_alibi_q6_kv9",
            kv_heads: 2,
            window: window(Some(2), Some(2)),
            padding: Padding::Lengths(&[0, 6], Some(&[6, 2])),
            alibi: true,
            quiet: true,
            mask: true,
            ..BASE
        },
    ]
}

fn forward<B: Backend>(case: &Case, data: &Data) -> Tensor<B, 4> {
    let (q, k, v) = (float::<B, 4>(&data.q), float::<B, 4>(&data.k), float::<B, 4>(&data.v));
    flash_attention(q, k, v, case.options::<B>(data)).expect("a valid case")
}

/// Gradients of `sum(flash_attention(q, k, v) · d_out)` with respect to q, k, v.
fn gradients<B: AutodiffBackend>(case: &Case, data: &Data) -> [Vec<f64>; 3] {
    let [q, k, v] = [&data.q, &data.k, &data.v].map(|x| float::<B, 4>(x).require_grad());
    let out = flash_attention(q.clone(), k.clone(), v.clone(), case.options::<B>(data)).expect("a valid case");
    let grads = (out * float::<B, 4>(&data.d_out)).sum().backward();
    [q, k, v].map(|x| to_f64(x.grad(&grads).expect("input is tracked").into_data()))
}

/// Burn's `attention_fallback` on the explicit inputs, padded rows zeroed on the host.
fn fallback_output(case: &Case, data: &Data, explicit: &Explicit) -> Vec<f64> {
    let options = AttentionModuleOptions { scale: case.scale, softcap: case.softcap, is_causal: false };
    let (q, k, v) = (float::<Inner, 4>(&data.q), float::<Inner, 4>(&explicit.k), float::<Inner, 4>(&explicit.v));
    let mask = explicit.mask.as_ref().map(bool4::<Inner>);
    let out = attention_fallback(q, k, v, mask, explicit.bias.as_ref().map(float::<Inner, 4>), options);
    let mut out = to_f64(out.into_data());
    zero_rows(&mut out, &explicit.padded_rows, case.val_dim);
    out
}

/// Gradients of Burn's fallback on the explicit inputs (d_out zero on the padded rows; dk, dv
/// summed over each GQA group).
fn fallback_gradients(case: &Case, data: &Data, explicit: &Explicit) -> [Vec<f64>; 3] {
    let [q, k, v] = [&data.q, &explicit.k, &explicit.v].map(|x| float::<Train, 4>(x).require_grad());
    // Rows that see no key are 0 whatever their d_out. Burn 0.21's `attention_fallback` under
    // autodiff takes each row's maximum by argmax + gather, which on a fully masked row reads
    // out of bounds (on CUDA an illegal address that poisons the device; see
    // `module_attention_with_ops` in src/api/ops.rs): each such row sees key 0 in the plain
    // implementation, with its d_out zeroed (so dk and dv do not see the row) and its dq set to
    // 0 below.
    let mut d_out = data.d_out.to_vec::<f32>().expect("f32 data");
    for &row in explicit.padded_rows.iter().chain(&explicit.empty_rows) {
        d_out[row * case.val_dim..][..case.val_dim].fill(0.0);
    }
    let d_out = TensorData::new(d_out, data.d_out.shape.clone());
    let options = AttentionModuleOptions { scale: case.scale, softcap: case.softcap, is_causal: false };
    let mask = explicit.mask.as_ref().map(|mask| bool4::<Train>(&first_key_visible(mask, &explicit.empty_rows)));
    let out = attention_fallback(q.clone(), k.clone(), v.clone(), mask, explicit.bias.as_ref().map(float::<Train, 4>), options);
    let grads = (out * float::<Train, 4>(&d_out)).sum().backward();
    let [mut dq, dk, dv] = [q, k, v].map(|x| to_f64(x.grad(&grads).expect("input is tracked").into_data()));
    zero_rows(&mut dq, &explicit.empty_rows, case.head_dim);
    let (dk, dv) = (case.drop_quiet_key(dk, case.head_dim), case.drop_quiet_key(dv, case.val_dim));
    [dq, case.sum_group(&dk, case.head_dim), case.sum_group(&dv, case.val_dim)]
}

fn assert_zero_rows(name: &str, values: &[f64], explicit: &Explicit, width: usize) {
    for &row in explicit.padded_rows.iter().chain(&explicit.empty_rows) {
        let slice = &values[row * width..][..width];
        assert!(slice.iter().all(|&x| x == 0.0), "{name}: row {row} sees no key or is padding, is {slice:?}, want 0");
    }
}

/// Checks the output of `case` against the explicit formulation.
fn check_forward(case: &Case, seed: u64) {
    let data = case.data(seed);
    let explicit = case.explicit(&data);
    let [want, ..] = case.reference(&data, &explicit, Precision::F64);
    // The plain implementation is Burn's own attention on the backend (its matmuls may round,
    // e.g. TF32 on CUDA), the quiet softmax through one more key of logit 0.
    let plain = if case.quiet { fallback_output(case, &data, &case.with_quiet_key(&explicit)) } else { fallback_output(case, &data, &explicit) };
    let got = to_f64(forward::<Inner>(case, &data).into_data());
    check(case.name, &got, &plain, &want, OUTPUT_FACTOR, Precision::F32).unwrap();
    assert_zero_rows(case.name, &got, &explicit, case.val_dim);
}

/// Checks the q, k, v gradients of `case` against the explicit formulation.
fn check_gradients(case: &Case, seed: u64) {
    let data = case.data(seed);
    let explicit = case.explicit(&data);
    let [_, want @ ..] = case.reference(&data, &explicit, Precision::F64);
    let plain = if case.quiet {
        fallback_gradients(case, &data, &case.with_quiet_key(&explicit))
    } else {
        fallback_gradients(case, &data, &explicit)
    };
    let got = gradients::<Train>(case, &data);
    for (i, name) in ["dq", "dk", "dv"].into_iter().enumerate() {
        let name = format!("{} {name}", case.name);
        check(&name, &got[i], &plain[i], &want[i], GRADIENT_FACTOR, Precision::F32).unwrap();
    }
    assert_zero_rows(&format!("{} dq", case.name), &got[0], &explicit, case.head_dim);
}

#[test]
#[serial]
fn forward_matches_explicit_formulation() {
    if skip_without_device("forward_matches_explicit_formulation") {
        return;
    }
    for (index, case) in cases().iter().enumerate() {
        check_forward(case, 1000 + 10 * index as u64);
    }
}

#[test]
#[serial]
fn gradients_match_explicit_formulation() {
    if skip_without_device("gradients_match_explicit_formulation") {
        return;
    }
    for (index, case) in gradient_cases().iter().enumerate() {
        check_gradients(case, 2000 + 10 * index as u64);
    }
}

#[test]
#[serial]
fn quiet_softmax_matches_reference() {
    if skip_without_device("quiet_softmax_matches_reference") {
        return;
    }
    for (index, case) in quiet_cases().iter().enumerate() {
        check_forward(case, 3000 + 10 * index as u64);
        check_gradients(case, 3005 + 10 * index as u64);
    }
}

/// Rows that see no key (a fully masked mask row, key length 0, causal with seq_q > seq_kv) and
/// rows past the query lengths: output exactly 0 and dq exactly 0, with and without the quiet
/// softmax, and the other gradients still right.
#[test]
#[serial]
fn empty_and_padded_rows_give_zero_output_and_zero_gradients() {
    if skip_without_device("empty_and_padded_rows_give_zero_output_and_zero_gradients") {
        return;
    }
    for quiet in [false, true] {
        let case = Case {
            name: if quiet { "quiet_empty_and_padded_rows_q11_kv7" } else { "empty_and_padded_rows_q11_kv7" },
            seq_q: 11,
            seq_kv: 7,
            causal: true,
            padding: Padding::Lengths(&[0, 4], Some(&[9, 7])),
            mask: true,
            quiet,
            ..BASE
        };
        let explicit = case.explicit(&case.data(4000));
        assert!(!explicit.empty_rows.is_empty() && !explicit.padded_rows.is_empty(), "the case has both kinds of rows");
        check_forward(&case, 4000);
        check_gradients(&case, 4000);
    }
}
