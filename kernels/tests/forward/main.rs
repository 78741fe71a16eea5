//! The forward kernels against the f64 reference, with the FlashAttention tolerance rule.
//!
//! Each case draws fresh seeded inputs (the seed is printed; replay with FLASH_TEST_SEED),
//! poisons the outputs with NaN, launches, and checks o (factor OUTPUT_FACTOR) and lse (rows
//! with something visible; fully masked rows must have lse == f32::MAX and o == 0).
//! Cases the device cannot run (bf16 or u8 masks on lavapipe, the matrix path without cmma)
//! print why and pass.
mod common;

use burn_flash_attn_kernels::forward::{ForwardTensors, flash_attention_forward_on};
use burn_flash_attn_kernels::heuristics::{has_matrix_units, has_register_mma, plan_forward};
use burn_flash_attn_kernels::primitives::online_softmax::FULLY_MASKED_LSE;
use burn_flash_attn_kernels::reference::{self, Inputs, Precision};
use burn_flash_attn_kernels::tolerance::{OUTPUT_FACTOR, check};
use burn_flash_attn_kernels::{AttentionProblem, FlashError, FloatKind, ForwardPath, MaskKind};
use common::{
    Elem, Layout, client, filled, precision, random_mask, random_values, read, rng, upload,
};

use FloatKind::{BF16, F16, F32};

/// Amplitude of q and k: with head_dim >= 32 and the default scale, logits spread over a few
/// units, so the softmax is far from uniform.
const QK_AMPLITUDE: f64 = 2.0;
/// Amplitude of v and of the bias.
const V_AMPLITUDE: f64 = 1.0;
/// Probability that a random mask entry is masked.
const MASKED_FRACTION: f64 = 0.3;

#[derive(Debug, Clone)]
enum MaskFill {
    /// Each entry masked with probability MASKED_FRACTION.
    Random,
    /// Random, plus every third query row fully masked.
    FullyMaskedRows,
}

#[derive(Debug, Clone)]
struct Case {
    dtype: FloatKind,
    batch: usize,
    num_heads: usize,
    seq_q: usize,
    seq_kv: usize,
    head_dim: usize,
    val_dim: usize,
    scale: Option<f64>,
    softcap: Option<f64>,
    causal: bool,
    mask: Option<(MaskFill, MaskKind)>,
    bias: bool,
    layout: Layout,
    /// Mask and bias given for one (batch, head) and bound with stride 0 over batch and heads
    /// (what `expand` produces).
    broadcast: bool,
    qk_amplitude: f64,
    path: Option<ForwardPath>,
}

fn case(dtype: FloatKind, head_dim: usize, seq_q: usize, seq_kv: usize) -> Case {
    Case {
        dtype,
        batch: 1,
        num_heads: 1,
        seq_q,
        seq_kv,
        head_dim,
        val_dim: head_dim,
        scale: None,
        softcap: None,
        causal: false,
        mask: None,
        bias: false,
        layout: Layout::Contiguous,
        broadcast: false,
        qk_amplitude: QK_AMPLITUDE,
        path: None,
    }
}

impl Case {
    fn heads(self, batch: usize, num_heads: usize) -> Self {
        Case {
            batch,
            num_heads,
            ..self
        }
    }
    fn val_dim(self, val_dim: usize) -> Self {
        Case { val_dim, ..self }
    }
    fn scale(self, scale: f64) -> Self {
        Case {
            scale: Some(scale),
            ..self
        }
    }
    /// Softcap with larger q, k so that tanh saturates for part of the logits.
    fn softcap(self, cap: f64) -> Self {
        Case {
            softcap: Some(cap),
            qk_amplitude: 2.0 * QK_AMPLITUDE,
            ..self
        }
    }
    fn causal(self) -> Self {
        Case {
            causal: true,
            ..self
        }
    }
    fn mask(self) -> Self {
        Case {
            mask: Some((MaskFill::Random, MaskKind::U32)),
            ..self
        }
    }
    fn mask_u8(self) -> Self {
        Case {
            mask: Some((MaskFill::Random, MaskKind::U8)),
            ..self
        }
    }
    fn masked_rows(self) -> Self {
        Case {
            mask: Some((MaskFill::FullyMaskedRows, MaskKind::U32)),
            ..self
        }
    }
    fn bias(self) -> Self {
        Case { bias: true, ..self }
    }
    fn strided(self) -> Self {
        Case {
            layout: Layout::transposed_padded(),
            ..self
        }
    }
    fn broadcast(self) -> Self {
        Case {
            broadcast: true,
            ..self
        }
    }
    fn matrix(self) -> Self {
        Case {
            path: Some(ForwardPath::Matrix),
            ..self
        }
    }
    fn mma(self) -> Self {
        Case {
            path: Some(ForwardPath::Mma),
            ..self
        }
    }

    fn problem(&self) -> AttentionProblem {
        AttentionProblem {
            batch: self.batch,
            num_heads: self.num_heads,
            seq_q: self.seq_q,
            seq_kv: self.seq_kv,
            head_dim: self.head_dim,
            val_dim: self.val_dim,
            dtype: self.dtype,
            scale: self
                .scale
                .unwrap_or_else(|| AttentionProblem::default_scale(self.head_dim)),
            softcap: self.softcap,
            causal: self.causal,
            mask: self.mask.as_ref().map(|(_, kind)| *kind),
            has_bias: self.bias,
        }
    }
}

/// Runs one case; panics with the case name, the seed and the worst coordinate on failure.
fn run(name: &str, case: Case) {
    let client = client();
    let problem = case.problem();
    if let Err(reason) = runnable(&client, &problem, case.path) {
        println!("{name}: skipped on this device: {reason}");
        return;
    }
    let (mut rng, seed) = rng(name);
    let p = &problem;
    let (bh, kind) = (p.heads_total(), case.dtype);
    let q = random_values(&mut rng, bh * p.seq_q * p.head_dim, case.qk_amplitude, kind);
    let k = random_values(
        &mut rng,
        bh * p.seq_kv * p.head_dim,
        case.qk_amplitude,
        kind,
    );
    let v = random_values(&mut rng, bh * p.seq_kv * p.val_dim, V_AMPLITUDE, kind);
    // With `broadcast`, one (batch, head) of mask and bias is drawn and repeated.
    let drawn_heads = if case.broadcast { 1 } else { bh };
    let scores = drawn_heads * p.seq_q * p.seq_kv;
    let copies = bh / drawn_heads;
    let mask = case.mask.as_ref().map(|(fill, _)| {
        let mut mask = random_mask(&mut rng, scores, MASKED_FRACTION);
        if let MaskFill::FullyMaskedRows = fill {
            for row in (0..drawn_heads * p.seq_q).step_by(3) {
                mask[row * p.seq_kv..(row + 1) * p.seq_kv].fill(true);
            }
        }
        mask.repeat(copies)
    });
    let bias = case
        .bias
        .then(|| random_values(&mut rng, scores, V_AMPLITUDE, kind).repeat(copies));

    let float = Elem::Float(kind);
    let (q_shape, kv_shape) = (
        [p.batch, p.num_heads, p.seq_q, p.head_dim],
        [p.batch, p.num_heads, p.seq_kv, p.head_dim],
    );
    let v_shape = [p.batch, p.num_heads, p.seq_kv, p.val_dim];
    let s_shape = [p.batch, p.num_heads, p.seq_q, p.seq_kv];
    let o_shape = [p.batch, p.num_heads, p.seq_q, p.val_dim];
    let q_dev = upload(&client, &q, &q_shape, float, &case.layout);
    let k_dev = upload(&client, &k, &kv_shape, float, &case.layout);
    let v_dev = upload(&client, &v, &v_shape, float, &case.layout);
    let upload_scores = |values: &[f64], elem: Elem| {
        if case.broadcast {
            let one_head = [1, 1, p.seq_q, p.seq_kv];
            let mut tensor = upload(
                &client,
                &values[..p.seq_q * p.seq_kv],
                &one_head,
                elem,
                &case.layout,
            );
            tensor.shape = s_shape.to_vec();
            tensor.strides[0] = 0;
            tensor.strides[1] = 0;
            tensor
        } else {
            upload(&client, values, &s_shape, elem, &case.layout)
        }
    };
    let mask_dev = mask.as_ref().zip(p.mask).map(|(mask, mask_kind)| {
        let values: Vec<f64> = mask.iter().map(|&m| if m { 1.0 } else { 0.0 }).collect();
        upload_scores(&values, Elem::Mask(mask_kind))
    });
    let bias_dev = bias.as_ref().map(|bias| upload_scores(bias, float));
    let o_dev = filled(&client, &o_shape, float, f64::NAN);
    let lse_dev = filled(&client, &o_shape[..3], Elem::Float(F32), f64::NAN);

    let tensors = ForwardTensors {
        q: q_dev.binding(),
        k: k_dev.binding(),
        v: v_dev.binding(),
        mask: mask_dev.as_ref().map(|m| m.binding()),
        bias: bias_dev.as_ref().map(|b| b.binding()),
        o: o_dev.binding(),
        lse: lse_dev.binding(),
    };
    let launch = flash_attention_forward_on(&client, p, tensors, case.path)
        .unwrap_or_else(|e| panic!("{name} (seed {seed}): launch refused: {e}"));
    println!("{name}: {}", launch.reason);
    let o = read(&client, &o_dev);
    let lse = read(&client, &lse_dev);

    let inputs = Inputs {
        q: &q,
        k: &k,
        v: &v,
        mask: mask.as_deref(),
        bias: bias.as_deref(),
    };
    let oracle = reference::forward(p, &inputs, Precision::F64);
    let plain = reference::forward(p, &inputs, precision(kind));
    let context = format!("{name} (seed {seed}, {case:?})");
    if let Err(message) = check(
        &format!("{context}: o"),
        &o,
        &plain.o,
        &oracle.o,
        OUTPUT_FACTOR,
        precision(kind),
    ) {
        panic!("{message}");
    }
    check_lse(&context, p, &o, &lse, &plain.lse, &oracle.lse);
}

/// Whether the device can run the case, or why not.
fn runnable(
    client: &common::Client,
    problem: &AttentionProblem,
    path: Option<ForwardPath>,
) -> Result<(), String> {
    let props = client.properties();
    if path == Some(ForwardPath::Matrix) && !has_matrix_units(props, problem.dtype) {
        return Err(format!(
            "no 16x16x16 {:?} cmma, the matrix path cannot run",
            problem.dtype
        ));
    }
    if path == Some(ForwardPath::Mma) && !has_register_mma(props, problem.dtype) {
        return Err(format!(
            "no 16x8x16 {:?} register mma, the mma path cannot run",
            problem.dtype
        ));
    }
    match plan_forward(props, problem, path) {
        Err(FlashError::Device(reason)) => Err(reason),
        Err(other) => panic!("valid problem refused: {other}"),
        Ok(_) => Ok(()),
    }
}

/// lse of rows that see something against the rule (the plain lse rounded to f32, the type
/// of the lse output: no f32 output can be closer than that); fully masked rows exactly
/// FULLY_MASKED_LSE with an all-zero output row.
fn check_lse(
    context: &str,
    p: &AttentionProblem,
    o: &[f64],
    lse: &[f64],
    plain: &[f64],
    oracle: &[f64],
) {
    let mut visible = (Vec::new(), Vec::new(), Vec::new());
    for row in 0..lse.len() {
        if oracle[row].is_infinite() {
            assert_eq!(
                lse[row], FULLY_MASKED_LSE as f64,
                "{context}: fully masked row {row}: lse"
            );
            let o_row = &o[row * p.val_dim..(row + 1) * p.val_dim];
            assert!(
                o_row.iter().all(|&x| x == 0.0),
                "{context}: fully masked row {row}: o = {o_row:?}"
            );
        } else {
            visible.0.push(lse[row]);
            visible.1.push(Precision::F32.round(plain[row]));
            visible.2.push(oracle[row]);
        }
    }
    let rounding = precision(p.dtype);
    if let Err(message) = check(
        &format!("{context}: lse"),
        &visible.0,
        &visible.1,
        &visible.2,
        OUTPUT_FACTOR,
        rounding,
    ) {
        panic!("{message}");
    }
}

/// One `#[test]` per case, named after it.
macro_rules! forward_cases {
    ($($name:ident: $case:expr;)*) => {
        $(
            #[test]
            fn $name() {
                run(stringify!($name), $case);
            }
        )*
    };
}

forward_cases! {
    // Tails and odd lengths.
    f32_hd32_q1_kv1: case(F32, 32, 1, 1);
    f16_hd32_q1_kv1: case(F16, 32, 1, 1);
    f32_hd64_q113_kv203: case(F32, 64, 113, 203);
    f16_hd64_q113_kv203: case(F16, 64, 113, 203);
    bf16_hd64_q113_kv203: case(BF16, 64, 113, 203);
    f32_hd64_q203_kv113: case(F32, 64, 203, 113);
    f16_hd64_q128_kv217: case(F16, 64, 128, 217);
    f32_hd64_q1_kv203: case(F32, 64, 1, 203);
    f16_hd64_q203_kv1: case(F16, 64, 203, 1);
    f32_hd64_q1023_kv1024: case(F32, 64, 1023, 1024);
    f16_hd64_q1024_kv1023: case(F16, 64, 1024, 1023);
    f16_hd128_q1024_kv1024: case(F16, 128, 1024, 1024);
    f32_hd64_q17_kv9: case(F32, 64, 17, 9);
    // Head dims, odd ones included.
    f32_hd33_q113_kv77: case(F32, 33, 113, 77);
    f16_hd33_q113_kv77: case(F16, 33, 113, 77);
    f32_hd80_q113_kv77: case(F32, 80, 113, 77);
    f16_hd80_q113_kv77: case(F16, 80, 113, 77);
    f32_hd96_q113_kv77: case(F32, 96, 113, 77);
    f16_hd96_q113_kv77: case(F16, 96, 113, 77);
    f32_hd127_q113_kv77: case(F32, 127, 113, 77);
    f16_hd127_q113_kv77: case(F16, 127, 113, 77);
    f32_hd128_q113_kv77: case(F32, 128, 113, 77);
    f16_hd256_q113_kv77: case(F16, 256, 113, 77);
    f32_hd256_q113_kv77: case(F32, 256, 113, 77);
    f16_hd256_q203_kv1023: case(F16, 256, 203, 1023);
    f32_hd256_q203_kv1023: case(F32, 256, 203, 1023);
    f16_hd256_q8_kv520: case(F16, 256, 8, 520);
    f32_hd1_q33_kv40: case(F32, 1, 33, 40);
    f16_hd7_q33_kv40: case(F16, 7, 33, 40);
    bf16_hd128_q113_kv77: case(BF16, 128, 113, 77);
    // Lengths at and around block edges.
    f32_hd64_q63_kv64: case(F32, 64, 63, 64);
    f16_hd64_q64_kv65: case(F16, 64, 64, 65);
    f16_causal_hd64_q65_kv65: case(F16, 64, 65, 65);
    f32_causal_hd32_q16_kv17: case(F32, 32, 16, 17);
    f16_causal_hd128_q33_kv31: case(F16, 128, 33, 31);
    f32_causal_hd48_q129_kv128: case(F32, 48, 129, 128);
    // More head dims, with causal.
    f16_causal_hd48_q100_kv120: case(F16, 48, 100, 120);
    f32_causal_hd160_q70_kv90: case(F32, 160, 70, 90);
    f16_causal_hd200_q70_kv90: case(F16, 200, 70, 90);
    f16_causal_softcap_bias_hd255_q40_kv60: case(F16, 255, 40, 60).softcap(3.0).bias();
    // val_dim != head_dim.
    f32_hd64_dv32_q113_kv203: case(F32, 64, 113, 203).val_dim(32);
    f16_hd33_dv80_q113_kv203: case(F16, 33, 113, 203).val_dim(80);
    f32_hd256_dv48_q65_kv70: case(F32, 256, 65, 70).val_dim(48);
    f16_hd40_dv256_q65_kv70: case(F16, 40, 65, 70).val_dim(256);
    f32_hd16_dv255_q31_kv100: case(F32, 16, 31, 100).val_dim(255);
    f16_causal_hd96_dv64_q203_kv113: case(F16, 96, 203, 113).val_dim(64).causal();
    // Scale alone.
    f32_scale_hd64_q113_kv203: case(F32, 64, 113, 203).scale(0.3);
    f16_scale_hd64_q113_kv203: case(F16, 64, 113, 203).scale(0.3);
    f32_negative_scale_hd32_q50_kv60: case(F32, 32, 50, 60).scale(-0.2);
    // Softcap alone.
    f32_softcap_hd64_q113_kv203: case(F32, 64, 113, 203).softcap(1.5);
    f16_softcap_hd64_q113_kv203: case(F16, 64, 113, 203).softcap(1.5);
    f32_softcap_large_hd64_q100_kv90: case(F32, 64, 100, 90).softcap(30.0);
    bf16_softcap_hd64_q113_kv203: case(BF16, 64, 113, 203).softcap(1.5);
    // Mask alone.
    f32_mask_hd64_q113_kv203: case(F32, 64, 113, 203).mask();
    f16_mask_hd64_q113_kv203: case(F16, 64, 113, 203).mask();
    f16_mask_u8_hd64_q113_kv203: case(F16, 64, 113, 203).mask_u8();
    f32_mask_hd128_q64_kv64: case(F32, 128, 64, 64).mask();
    bf16_mask_hd64_q113_kv203: case(BF16, 64, 113, 203).mask();
    // Bias alone.
    f32_bias_hd64_q113_kv203: case(F32, 64, 113, 203).bias();
    f16_bias_hd64_q113_kv203: case(F16, 64, 113, 203).bias();
    f32_bias_hd64_q64_kv128: case(F32, 64, 64, 128).bias();
    bf16_bias_hd64_q113_kv203: case(BF16, 64, 113, 203).bias();
    // Causal alone: seq_q = seq_kv, seq_q < seq_kv, seq_q > seq_kv (leading rows see nothing).
    f32_causal_hd64_q128_kv128: case(F32, 64, 128, 128).causal();
    f16_causal_hd64_q128_kv128: case(F16, 64, 128, 128).causal();
    f32_causal_hd64_q113_kv203: case(F32, 64, 113, 203).causal();
    f16_causal_hd64_q113_kv203: case(F16, 64, 113, 203).causal();
    bf16_causal_hd64_q113_kv203: case(BF16, 64, 113, 203).causal();
    f32_causal_hd64_q203_kv113: case(F32, 64, 203, 113).causal();
    f16_causal_hd64_q203_kv113: case(F16, 64, 203, 113).causal();
    f32_causal_hd64_q64_kv1: case(F32, 64, 64, 1).causal();
    f16_causal_hd32_q1_kv64: case(F16, 32, 1, 64).causal();
    f32_causal_hd32_q1_kv1: case(F32, 32, 1, 1).causal();
    f32_causal_hd64_q1023_kv1024: case(F32, 64, 1023, 1024).causal();
    f16_causal_hd64_q1024_kv1023: case(F16, 64, 1024, 1023).causal();
    f16_causal_hd128_q1024_kv1024: case(F16, 128, 1024, 1024).causal();
    f32_causal_hd256_q300_kv257: case(F32, 256, 300, 257).causal();
    f16_causal_hd33_q77_kv500: case(F16, 33, 77, 500).causal();
    f32_causal_hd80_q500_kv77: case(F32, 80, 500, 77).causal();
    // Fully masked rows: through the mask, and through causal with seq_q > seq_kv.
    f32_masked_rows_hd64_q113_kv203: case(F32, 64, 113, 203).masked_rows();
    f16_masked_rows_hd64_q113_kv203: case(F16, 64, 113, 203).masked_rows();
    f32_masked_rows_bias_hd64_q64_kv40: case(F32, 64, 64, 40).masked_rows().bias();
    f16_masked_rows_causal_hd64_q203_kv113: case(F16, 64, 203, 113).masked_rows().causal();
    f32_masked_rows_softcap_hd32_q30_kv7: case(F32, 32, 30, 7).masked_rows().softcap(1.0);
    f32_causal_all_but_last_rows_hd64_q300_kv3: case(F32, 64, 300, 3).causal();
    // Options combined.
    f32_causal_mask_hd64_q113_kv203: case(F32, 64, 113, 203).causal().mask();
    f16_causal_mask_hd64_q203_kv113: case(F16, 64, 203, 113).causal().mask();
    f32_causal_bias_hd64_q113_kv203: case(F32, 64, 113, 203).causal().bias();
    f16_causal_bias_hd64_q203_kv113: case(F16, 64, 203, 113).causal().bias();
    f32_causal_softcap_hd64_q113_kv203: case(F32, 64, 113, 203).causal().softcap(2.0);
    f16_causal_softcap_hd64_q203_kv113: case(F16, 64, 203, 113).causal().softcap(2.0);
    f32_mask_bias_hd64_q113_kv203: case(F32, 64, 113, 203).mask().bias();
    f16_mask_bias_hd64_q113_kv203: case(F16, 64, 113, 203).mask().bias();
    f32_softcap_bias_hd64_q113_kv203: case(F32, 64, 113, 203).softcap(1.5).bias();
    f32_scale_softcap_hd64_q113_kv203: case(F32, 64, 113, 203).scale(0.5).softcap(3.0);
    f32_all_options_hd64_q113_kv203: case(F32, 64, 113, 203).scale(0.2).softcap(2.0).mask().bias().causal();
    f16_all_options_hd64_q203_kv113: case(F16, 64, 203, 113).scale(0.2).softcap(2.0).mask().bias().causal();
    f32_all_options_hd33_dv80_q77_kv203: case(F32, 33, 77, 203).val_dim(80).scale(0.4).softcap(2.0).mask().bias().causal();
    f16_all_options_hd127_q1023_kv1024: case(F16, 127, 1023, 1024).softcap(5.0).mask().bias().causal();
    bf16_all_options_hd64_q203_kv113: case(BF16, 64, 203, 113).softcap(2.0).mask().bias().causal();
    f16_all_options_u8_hd64_q113_kv203: case(F16, 64, 113, 203).softcap(2.0).mask_u8().bias().causal();
    // Batch and heads.
    f32_b2_h3_hd64_q113_kv203: case(F32, 64, 113, 203).heads(2, 3);
    f16_b2_h3_causal_hd64_q203_kv113: case(F16, 64, 203, 113).heads(2, 3).causal();
    f32_b3_h2_all_options_hd32_q40_kv50: case(F32, 32, 40, 50).heads(3, 2).softcap(2.0).mask().bias().causal();
    f16_b1_h5_masked_rows_hd64_q33_kv17: case(F16, 64, 33, 17).heads(1, 5).masked_rows();
    // Non-contiguous inputs: [b, s, h, d] storage viewed as [b, h, s, d], rows padded.
    f32_strided_hd64_q113_kv203: case(F32, 64, 113, 203).heads(2, 3).strided();
    f16_strided_hd64_q113_kv203: case(F16, 64, 113, 203).heads(2, 3).strided();
    f32_strided_causal_hd64_q203_kv113: case(F32, 64, 203, 113).heads(2, 2).strided().causal();
    f16_strided_mask_bias_hd64_q113_kv203: case(F16, 64, 113, 203).heads(2, 2).strided().mask().bias();
    f32_strided_all_options_hd33_dv80_q77_kv90: case(F32, 33, 77, 90).val_dim(80).heads(2, 2).strided().softcap(2.0).mask().bias().causal();
    bf16_strided_hd64_q113_kv203: case(BF16, 64, 113, 203).heads(2, 3).strided();
    // Mask and bias broadcast over batch and heads (stride 0), as `expand` gives them.
    f32_broadcast_mask_bias_b2_h3_hd32_q50_kv70: case(F32, 32, 50, 70).heads(2, 3).broadcast().mask().bias();
    f16_broadcast_masked_rows_causal_b2_h2_hd64_q70_kv50: case(F16, 64, 70, 50).heads(2, 2).broadcast().masked_rows().causal();
    f16_strided_broadcast_bias_b2_h2_hd48_q40_kv90: case(F16, 48, 40, 90).heads(2, 2).strided().broadcast().bias();
    // The matrix path, forced (skips where the device has no cmma for the dtype).
    f16_matrix_hd64_q113_kv203: case(F16, 64, 113, 203).matrix();
    f16_matrix_hd128_q1024_kv1024: case(F16, 128, 1024, 1024).matrix();
    f16_matrix_causal_hd64_q203_kv113: case(F16, 64, 203, 113).matrix().causal();
    f16_matrix_causal_hd64_q113_kv203: case(F16, 64, 113, 203).matrix().causal();
    f16_matrix_hd33_dv80_q77_kv90: case(F16, 33, 77, 90).val_dim(80).matrix();
    f16_matrix_hd256_q113_kv203: case(F16, 256, 113, 203).matrix();
    f16_matrix_all_options_hd64_q203_kv113: case(F16, 64, 203, 113).matrix().softcap(2.0).mask().bias().causal();
    f16_matrix_masked_rows_hd64_q113_kv203: case(F16, 64, 113, 203).matrix().masked_rows();
    f16_matrix_strided_hd96_q113_kv203: case(F16, 96, 113, 203).heads(2, 2).matrix().strided();
    bf16_matrix_hd64_q113_kv203: case(BF16, 64, 113, 203).matrix();
    bf16_matrix_causal_hd128_q1023_kv1024: case(BF16, 128, 1023, 1024).matrix().causal();
    bf16_matrix_all_options_hd64_q203_kv113: case(BF16, 64, 203, 113).matrix().softcap(2.0).mask().bias().causal();
    // The mma path, forced (skips where the device has no register mma for the dtype).
    f16_mma_hd64_q113_kv203: case(F16, 64, 113, 203).mma();
    bf16_mma_hd128_q1024_kv1024: case(BF16, 128, 1024, 1024).mma();
    bf16_mma_causal_hd128_q1023_kv1024: case(BF16, 128, 1023, 1024).mma().causal();
    f16_mma_causal_hd64_q203_kv113: case(F16, 64, 203, 113).mma().causal();
    bf16_mma_causal_hd64_q113_kv203: case(BF16, 64, 113, 203).mma().causal();
    f16_mma_hd40_dv80_q77_kv90: case(F16, 40, 77, 90).val_dim(80).mma();
    bf16_mma_hd8_dv24_q1_kv1: case(BF16, 8, 1, 1).val_dim(24).mma();
    f16_mma_all_options_hd64_q203_kv113: case(F16, 64, 203, 113).mma().softcap(2.0).mask().bias().causal();
    bf16_mma_all_options_u8_hd96_q113_kv203: case(BF16, 96, 113, 203).heads(2, 2).mma().softcap(2.0).mask_u8().bias().causal();
    f16_mma_masked_rows_hd64_q113_kv203: case(F16, 64, 113, 203).mma().masked_rows();
    bf16_mma_broadcast_mask_bias_b2_h3_hd32_q50_kv70: case(BF16, 32, 50, 70).heads(2, 3).broadcast().mask().bias().mma();
}

#[test]
fn launcher_refuses_tensors_that_disagree_with_the_problem() {
    let client = client();
    let problem = case(F32, 32, 10, 12).problem();
    let float = Elem::Float(F32);
    let tensor = |shape: &[usize]| filled(&client, shape, float, 1.0);
    let (q, k, v) = (
        tensor(&[1, 1, 10, 32]),
        tensor(&[1, 1, 12, 32]),
        tensor(&[1, 1, 12, 32]),
    );
    let (wrong_o, lse) = (tensor(&[1, 1, 10, 31]), tensor(&[1, 1, 10]));
    let tensors = ForwardTensors {
        q: q.binding(),
        k: k.binding(),
        v: v.binding(),
        mask: None,
        bias: None,
        o: wrong_o.binding(),
        lse: lse.binding(),
    };
    let result = flash_attention_forward_on(&client, &problem, tensors, None);
    assert!(
        matches!(
            result,
            Err(FlashError::ShapeMismatch { what: "output", .. })
        ),
        "{result:?}"
    );
}
