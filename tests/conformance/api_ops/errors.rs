//! Every kind of bad input returns its typed [`AttentionError`], naming the values, and never
//! panics. Nothing is computed: validation reads metadata only (the inputs still live on the
//! test device, so each test skips where it cannot be touched).
use burn::tensor::{Bool, DType, Int, Tensor, TensorData};
use burn_flash_attn::{AttentionError, Dropout, FlashAttentionOptions, KeyPadding, flash_attention};

use crate::common::{Inner, float, random_data, skip_without_device};

type Options = FlashAttentionOptions<Inner>;

/// query [2, 4, 3, 8], key and value [2, 2, 5, 8] unless a test says otherwise.
const QUERY: [usize; 4] = [2, 4, 3, 8];
const KV: [usize; 4] = [2, 2, 5, 8];
const SCORES: [usize; 4] = [2, 4, 3, 5];

fn tensor(shape: [usize; 4]) -> Tensor<Inner, 4> {
    float(&random_data(shape, 9000))
}

fn call(query: [usize; 4], key: [usize; 4], value: [usize; 4], options: Options) -> AttentionError {
    match flash_attention(tensor(query), tensor(key), tensor(value), options) {
        Ok(_) => panic!("bad input accepted: query {query:?}, key {key:?}, value {value:?}"),
        Err(error) => {
            println!("{error}");
            error
        }
    }
}

fn error(options: Options) -> AttentionError {
    call(QUERY, KV, KV, options)
}

fn ints(values: &[i64]) -> Tensor<Inner, 1, Int> {
    Tensor::from_data(TensorData::new(values.to_vec(), [values.len()]), &Default::default())
}

fn bools<const D: usize>(shape: [usize; D]) -> Tensor<Inner, D, Bool> {
    Tensor::from_data(TensorData::new(vec![false; shape.iter().product()], shape), &Default::default())
}

#[test]
fn error_empty_dimension_names_the_tensor() {
    if skip_without_device("error_empty_dimension_names_the_tensor") {
        return;
    }
    let empty = TensorData::new(Vec::<f32>::new(), [2, 4, 0, 8]);
    let got = flash_attention(float(&empty), tensor(KV), tensor(KV), Options::new()).unwrap_err();
    assert_eq!(got, AttentionError::EmptyDimension { tensor: "query", shape: [2, 4, 0, 8] });
}

#[test]
fn error_key_shape_mismatch_gives_expected_and_got() {
    if skip_without_device("error_key_shape_mismatch_gives_expected_and_got") {
        return;
    }
    let key = [2, 2, 5, 6];
    let got = call(QUERY, key, KV, Options::new());
    assert_eq!(got, AttentionError::ShapeMismatch { tensor: "key", expected: [Some(2), None, None, Some(8)], got: key });
    assert_eq!(got.to_string(), "key has shape [2, 2, 5, 6], expected [2, _, _, 8]");
}

#[test]
fn error_value_shape_mismatch_gives_expected_and_got() {
    if skip_without_device("error_value_shape_mismatch_gives_expected_and_got") {
        return;
    }
    let value = [2, 2, 4, 8];
    let got = call(QUERY, KV, value, Options::new());
    assert_eq!(got, AttentionError::ShapeMismatch { tensor: "value", expected: [Some(2), Some(2), Some(5), None], got: value });
}

#[test]
fn error_heads_not_divisible() {
    if skip_without_device("error_heads_not_divisible") {
        return;
    }
    let kv = [2, 3, 5, 8];
    assert_eq!(call(QUERY, kv, kv, Options::new()), AttentionError::HeadsNotDivisible { num_heads: 4, num_kv_heads: 3 });
}

#[test]
fn error_dtype_mismatch_names_the_tensor() {
    if skip_without_device("error_dtype_mismatch_names_the_tensor") {
        return;
    }
    // Uploaded as f16 (converted on the host): no kernel runs.
    let slopes = Tensor::<Inner, 1>::from_data(TensorData::new(vec![0.5f32; 4], [4]), (&Default::default(), DType::F16));
    let got = error(Options::new().with_alibi_slopes(Some(slopes)));
    assert_eq!(got, AttentionError::DtypeMismatch { tensor: "alibi_slopes", expected: DType::F32, got: DType::F16 });
}

#[test]
fn error_mask_not_broadcastable() {
    if skip_without_device("error_mask_not_broadcastable") {
        return;
    }
    let mask = [2, 1, 2, 5];
    let got = error(Options::new().with_mask(Some(bools(mask))));
    assert_eq!(got, AttentionError::MaskNotBroadcastable { mask, scores: SCORES });
}

#[test]
fn error_bias_not_broadcastable() {
    if skip_without_device("error_bias_not_broadcastable") {
        return;
    }
    let bias = [1, 2, 3, 5];
    let got = error(Options::new().with_bias(Some(tensor(bias))));
    assert_eq!(got, AttentionError::BiasNotBroadcastable { bias, scores: SCORES });
}

#[test]
fn error_key_lengths_shape() {
    if skip_without_device("error_key_lengths_shape") {
        return;
    }
    let padding = KeyPadding::Lengths { keys: ints(&[5, 5, 5]), queries: None };
    assert_eq!(error(Options::new().with_key_padding(Some(padding))), AttentionError::KeyLengthsShape { got: 3, batch: 2 });
}

#[test]
fn error_query_lengths_shape() {
    if skip_without_device("error_query_lengths_shape") {
        return;
    }
    let padding = KeyPadding::Lengths { keys: ints(&[5, 5]), queries: Some(ints(&[3])) };
    assert_eq!(error(Options::new().with_key_padding(Some(padding))), AttentionError::QueryLengthsShape { got: 1, batch: 2 });
}

#[test]
fn error_key_mask_shape() {
    if skip_without_device("error_key_mask_shape") {
        return;
    }
    let padding = KeyPadding::Mask(bools([2, 4]));
    let got = error(Options::new().with_key_padding(Some(padding)));
    assert_eq!(got, AttentionError::KeyMaskShape { got: [2, 4], expected: [2, 5] });
}

#[test]
fn error_alibi_slopes_shape() {
    if skip_without_device("error_alibi_slopes_shape") {
        return;
    }
    let slopes = Tensor::<Inner, 1>::from_floats([0.5, 0.25], &Default::default());
    assert_eq!(error(Options::new().with_alibi_slopes(Some(slopes))), AttentionError::AlibiSlopesShape { got: 2, num_heads: 4 });
}

#[test]
fn error_dropout_prob_outside_0_1_or_not_finite() {
    if skip_without_device("error_dropout_prob_outside_0_1_or_not_finite") {
        return;
    }
    for prob in [1.0, 1.5, -0.1, f64::INFINITY, f64::NAN] {
        let got = error(Options::new().with_dropout(Some(Dropout::new(prob, 0))));
        // NaN != NaN: compare the bits.
        assert!(matches!(got, AttentionError::InvalidDropout { prob: p } if p.to_bits() == prob.to_bits()), "{prob}: {got:?}");
    }
}

#[test]
fn error_scale_not_finite() {
    if skip_without_device("error_scale_not_finite") {
        return;
    }
    for scale in [f64::INFINITY, f64::NEG_INFINITY, f64::NAN] {
        let got = error(Options::new().with_scale(Some(scale)));
        assert!(matches!(got, AttentionError::InvalidScale { scale: s } if s.to_bits() == scale.to_bits()), "{scale}: {got:?}");
    }
}

#[test]
fn error_softcap_not_positive_or_not_finite() {
    if skip_without_device("error_softcap_not_positive_or_not_finite") {
        return;
    }
    for softcap in [0.0, -1.0, f64::INFINITY, f64::NAN] {
        let got = error(Options::new().with_softcap(Some(softcap)));
        assert!(matches!(got, AttentionError::InvalidSoftcap { softcap: s } if s.to_bits() == softcap.to_bits()), "{softcap}: {got:?}");
    }
}
