//! Dropout on the attention probabilities. With `v` the identity over the keys (`val_dim =
//! seq_kv`, `v[j] = e_j`) the output is the probability matrix itself, after dropout:
//! `out[.., i, j] = p_ij · keep_ij / (1 − prob)`, so the keep mask can be read off it.
use burn::tensor::{Tensor, TensorData};
use burn_flash_attn::{Dropout, FlashAttentionOptions, flash_attention};
use serial_test::serial;

use crate::common::{Inner, float, random_data, skip_without_device, to_f64};

const BATCH: usize = 2;
const HEADS: usize = 4;
/// seq_q = seq_kv: 8192 probabilities in all, enough for a fraction within about ±0.025.
const SEQ: usize = 32;
const HEAD_DIM: usize = 8;
/// Bound of the statistical checks in standard deviations: a correct implementation fails one
/// of them with probability about 6e-7 (two-sided normal tail at 5σ).
const SIGMAS: f64 = 5.0;
/// Kept probabilities against the undropped ones over `1 − prob`: the same operations but for
/// one multiplication by `1 / (1 − prob)` before the product with V, which rounds each
/// separately: a few f32 ulps, or 2^-11 relative where the backend's f32 matmul runs in TF32
/// (CUDA). A wrong scale (`1 − prob` missing: 43 % off at prob 0.3) is far outside.
const SCALE_RTOL: f64 = 1.0 / 1024.0;

/// The probability matrix `[BATCH, HEADS, SEQ, SEQ]` of fixed q, k after `dropout`.
fn probabilities(dropout: Option<Dropout>) -> Vec<f64> {
    let q = float::<Inner, 4>(&random_data([BATCH, HEADS, SEQ, HEAD_DIM], 5000));
    let k = float::<Inner, 4>(&random_data([BATCH, HEADS, SEQ, HEAD_DIM], 5001));
    let identity: Vec<f32> = (0..BATCH * HEADS * SEQ * SEQ).map(|at| f32::from(at / SEQ % SEQ == at % SEQ)).collect();
    let v = Tensor::from_data(TensorData::new(identity, [BATCH, HEADS, SEQ, SEQ]), &Default::default());
    let out = flash_attention(q, k, v, FlashAttentionOptions::new().with_dropout(dropout)).expect("valid options");
    to_f64(out.into_data())
}

#[test]
#[serial]
fn dropout_prob_0_is_no_dropout() {
    if skip_without_device("dropout_prob_0_is_no_dropout") {
        return;
    }
    assert_eq!(probabilities(Some(Dropout::new(0.0, 3))), probabilities(None));
}

/// The kept fraction is `1 − prob` and the mean of the output is preserved, each within
/// `SIGMAS` standard deviations; every kept probability is scaled by exactly `1 / (1 − prob)`.
#[test]
#[serial]
fn dropout_p03_keeps_0_7_scales_kept_and_preserves_the_mean() {
    if skip_without_device("dropout_p03_keeps_0_7_scales_kept_and_preserves_the_mean") {
        return;
    }
    let prob = 0.3;
    let plain = probabilities(None);
    let dropped = probabilities(Some(Dropout::new(prob, 42)));
    let count = plain.len() as f64;
    assert!(plain.iter().all(|&p| p > 0.0), "without a mask every probability is positive");

    // The kept count is Binomial(count, 1 − prob): standard deviation sqrt(p (1 − p) / count)
    // of the fraction.
    let kept = dropped.iter().filter(|&&x| x != 0.0).count() as f64 / count;
    let bound = SIGMAS * (prob * (1.0 - prob) / count).sqrt();
    assert!((kept - (1.0 - prob)).abs() <= bound, "kept fraction {kept}, want {} ± {bound}", 1.0 - prob);

    for (at, (&got, &p)) in dropped.iter().zip(&plain).enumerate() {
        let want = p / (1.0 - prob);
        assert!(got == 0.0 || (got - want).abs() <= SCALE_RTOL * want, "probability {at}: kept {got}, want {want}");
    }

    // Each entry is p_ij · keep_ij / (1 − prob): mean p_ij, variance p_ij² · prob / (1 − prob),
    // independent across entries; the mean over all entries has the sum of the variances
    // over count².
    let mean = |x: &[f64]| x.iter().sum::<f64>() / count;
    let variance = plain.iter().map(|p| p * p).sum::<f64>() * prob / (1.0 - prob) / (count * count);
    let bound = SIGMAS * variance.sqrt();
    let (got, want) = (mean(&dropped), mean(&plain));
    assert!((got - want).abs() <= bound, "mean {got}, want {want} ± {bound}");
}

#[test]
#[serial]
fn dropout_same_seed_same_output_other_seed_differs() {
    if skip_without_device("dropout_same_seed_same_output_other_seed_differs") {
        return;
    }
    let first = probabilities(Some(Dropout::new(0.5, 7)));
    assert_eq!(first, probabilities(Some(Dropout::new(0.5, 7))), "seed 7 twice");
    assert_ne!(first, probabilities(Some(Dropout::new(0.5, 8))), "seeds 7 and 8");
}
