//! The model features of the kernels, forward and backward against the f64 oracle: grouped-query
//! attention (K/V heads a divisor of the query heads, ratios 1, 2, 8 and num_heads), sliding
//! windows (smaller and larger than a block, one-sided, with causal, rows that see no key),
//! ALiBi, and each combined with the older options (mask, bias, softcap, quiet softmax,
//! seq_q != seq_kv). Every case runs the planner's forward, then the planner's backward.
use crate::support::forward::run_forward_cases;
use crate::support::planning::launch_forward;
use crate::support::*;
use burn_flash_attn_kernels::problem::FloatKind::{self, BF16, F16, F32};

fn run_both(cases: &[Case]) {
    run_forward_cases(cases, &|client, problem, tensors| {
        launch_forward(client, problem, tensors)
    });
    run_cases(cases);
}

#[test]
fn f32_grouped_query_attention() {
    run_both(&[
        Case::new(F32, 37, 53, 16).heads(2, 4).gqa(2).causal(),
        Case::new(F32, 29, 29, 32).heads(1, 8).gqa(1),
        Case::new(F32, 41, 17, 16).heads(1, 16).gqa(2).val_dim(8),
        Case::new(F32, 20, 33, 24)
            .heads(2, 3)
            .gqa(3)
            .mask(MaskPattern::RandomWithMaskedRows)
            .bias(),
    ]);
}

#[test]
fn f32_sliding_windows() {
    run_both(&[
        // Smaller than a block, both sides.
        Case::new(F32, 113, 203, 64).window(Some(16), Some(8)),
        // Left only, with causal: Mistral's window.
        Case::new(F32, 113, 203, 32).window(Some(40), None).causal(),
        // Right only, seq_q > seq_kv.
        Case::new(F32, 90, 61, 32).window(None, Some(5)),
        // The diagonal alone.
        Case::new(F32, 64, 64, 16).window(Some(0), Some(0)),
        // Larger than the sequences: the same as no window.
        Case::new(F32, 37, 45, 16)
            .window(Some(500), Some(500))
            .causal(),
        // Rows 0..90 have their window left of every key: they see nothing (output and dQ 0).
        Case::new(F32, 203, 113, 16).window(Some(3), Some(0)),
    ]);
}

#[test]
fn f32_alibi() {
    run_both(&[
        Case::new(F32, 37, 53, 16).heads(2, 3).alibi(),
        Case::new(F32, 70, 65, 32)
            .heads(1, 2)
            .alibi()
            .causal()
            .bias(),
        Case::new(F32, 64, 96, 16)
            .heads(1, 2)
            .alibi()
            .window(Some(20), Some(10)),
    ]);
}

#[test]
fn f32_features_combined() {
    run_both(&[
        Case::new(F32, 45, 58, 24)
            .heads(2, 4)
            .gqa(2)
            .window(Some(12), Some(6))
            .alibi()
            .mask(MaskPattern::RandomWithMaskedRows)
            .softcap(4.0)
            .quiet(),
        Case::new(F32, 77, 50, 16)
            .heads(1, 4)
            .gqa(1)
            .window(Some(9), None)
            .causal()
            .alibi()
            .scale(0.3),
    ]);
}

fn half_cases(dtype: FloatKind) -> Vec<Case> {
    vec![
        // The mma path's shapes on CUDA (dims multiples of 8), portable elsewhere.
        Case::new(dtype, 203, 113, 64)
            .heads(1, 4)
            .gqa(2)
            .causal()
            .window(Some(32), None),
        Case::new(dtype, 96, 130, 32).heads(1, 16).gqa(2).alibi(),
        Case::new(dtype, 64, 64, 64).heads(1, 8).gqa(1).causal(),
        Case::new(dtype, 150, 150, 64)
            .window(Some(20), Some(20))
            .alibi()
            .bias(),
        Case::new(dtype, 90, 61, 16)
            .window(Some(3), Some(0))
            .quiet(),
        // Head dim 31: the matrix forward on CUDA.
        Case::new(dtype, 37, 45, 31)
            .heads(2, 4)
            .gqa(2)
            .window(Some(10), Some(4))
            .alibi(),
    ]
}

#[test]
fn f16_features() {
    run_both(&half_cases(F16));
}

#[test]
fn bf16_features() {
    run_both(&half_cases(BF16));
}

/// Dropout against the oracle, which regenerates the kernels' mask on the host
/// (`primitives::dropout::keep_host`): forward and backward, alone and with the other options.
#[test]
fn dropout_matches_the_host_mask_forward_and_backward() {
    let mut cases = Vec::new();
    for dtype in [F32, F16, BF16] {
        cases.extend([
            Case::new(dtype, 37, 53, 16).heads(2, 2).dropout(0.2, 5),
            Case::new(dtype, 113, 90, 64).causal().dropout(0.1, 1 << 40),
            Case::new(dtype, 45, 58, 32).heads(1, 4).gqa(2).window(Some(12), Some(6)).alibi().quiet().dropout(0.5, 9),
            Case::new(dtype, 37, 29, 16).mask(MaskPattern::RandomWithMaskedRows).bias().softcap(3.0).dropout(0.3, 2),
        ]);
    }
    run_both(&cases);
}

/// The mask the forward applies, read back: with V the identity over the keys
/// (`val_dim = seq_kv`), output row `i` is `P_i * z_i`, exactly 0 where an entry is dropped
/// (every P is well above underflow here). Returns (kept flags, plan) over `[b, h, i, j]`.
fn applied_mask(dtype: FloatKind, head_dim: usize, seq_q: usize, seq_kv: usize, prob: f64, seed: u64) -> (Vec<bool>, String) {
    use burn_flash_attn_kernels::forward::ForwardTensors;
    use burn_flash_attn_kernels::problem::Dropout;
    let client = client();
    let (batch, heads) = (2, 3);
    let p = burn_flash_attn_kernels::AttentionProblem {
        batch,
        num_heads: heads,
        num_kv_heads: heads,
        dropout: Some(Dropout::new(prob, seed)),
        ..problem(dtype, head_dim, seq_kv, seq_q, seq_kv)
    };
    let (mut rng, _) = rng(&format!("applied_mask_{dtype:?}_{head_dim}"));
    let bh = batch * heads;
    let q = random_values(&mut rng, bh * seq_q * head_dim, 0.3, dtype);
    let k = random_values(&mut rng, bh * seq_kv * head_dim, 0.3, dtype);
    let v: Vec<f64> = (0..bh * seq_kv * seq_kv).map(|x| ((x / seq_kv) % seq_kv == x % seq_kv) as u8 as f64).collect();
    let float = Elem::Float(dtype);
    let rows = Layout::Contiguous;
    let q_dev = upload(&client, &q, &[batch, heads, seq_q, head_dim], float, &rows);
    let k_dev = upload(&client, &k, &[batch, heads, seq_kv, head_dim], float, &rows);
    let v_dev = upload(&client, &v, &[batch, heads, seq_kv, seq_kv], float, &rows);
    let o = filled(&client, &[batch, heads, seq_q, seq_kv], float, POISON);
    let lse = filled(&client, &[batch, heads, seq_q], Elem::Float(F32), POISON);
    let tensors = ForwardTensors {
        q: q_dev.binding(),
        k: k_dev.binding(),
        v: v_dev.binding(),
        mask: None,
        bias: None,
        slopes: None,
        o: o.binding(),
        lse: lse.binding(),
    };
    let plan = launch_forward(&client, &p, tensors).expect("planned and launched");
    (read(&client, &o).iter().map(|&x| x != 0.0).collect(), plan.to_string())
}

/// Dropout's statistics and determinism: the applied mask is exactly the host's for several
/// head dims (different blocks) and dtypes (different paths on CUDA), keeps `1 - p` of the
/// entries within 5 standard deviations overall and per row, changes with the seed and only
/// with it.
#[test]
fn dropout_mask_is_the_hosts_whatever_the_blocks_and_keeps_one_minus_p() {
    use burn_flash_attn_kernels::primitives::dropout::keep_host;
    let (seq_q, seq_kv, prob, seed) = (96, 128, 0.25, 0x5eed_u64);
    let host: Vec<bool> = (0..6 * seq_q * seq_kv)
        .map(|x| {
            let (bh, i, j) = (x / (seq_q * seq_kv), (x / seq_kv) % seq_q, x % seq_kv);
            keep_host(seed, prob, bh as u32, i as u32, j as u32)
        })
        .collect();
    for (dtype, head_dim) in [(F32, 16), (F32, 64), (F16, 64), (BF16, 32)] {
        let elem = burn_flash_attn_kernels::plan::elem_type(dtype);
        if !client().properties().supports_type(elem) {
            println!("SKIPPED {dtype:?}: the test device does not support it");
            continue;
        }
        let (kept, plan) = applied_mask(dtype, head_dim, seq_q, seq_kv, prob, seed);
        println!("{dtype:?} hd{head_dim}: {plan}");
        let differ = kept.iter().zip(&host).filter(|(a, b)| a != b).count();
        assert_eq!(differ, 0, "{dtype:?} hd{head_dim} ({plan}): {differ} entries differ from the host mask");
    }
    let n = host.len() as f64;
    let rate = host.iter().filter(|&&k| k).count() as f64 / n;
    let sigma = (prob * (1.0 - prob) / n).sqrt();
    assert!((rate - (1.0 - prob)).abs() < 5.0 * sigma, "keep rate {rate}, expected {} ± {}", 1.0 - prob, 5.0 * sigma);
    let row_sigma = (prob * (1.0 - prob) / seq_kv as f64).sqrt();
    for row in host.chunks(seq_kv) {
        let row_rate = row.iter().filter(|&&k| k).count() as f64 / seq_kv as f64;
        assert!((row_rate - (1.0 - prob)).abs() < 5.0 * row_sigma, "a row keeps {row_rate}");
    }
    let other: usize = (0..host.len())
        .filter(|&x| {
            let (bh, i, j) = (x / (seq_q * seq_kv), (x / seq_kv) % seq_q, x % seq_kv);
            keep_host(seed + 1, prob, bh as u32, i as u32, j as u32) != host[x]
        })
        .count();
    // Independent masks differ in 2 p (1 - p) of the entries.
    let expected = 2.0 * prob * (1.0 - prob) * n;
    assert!((other as f64 - expected).abs() < 0.05 * expected, "seed + 1 changes {other} entries, expected ~{expected}");
}
