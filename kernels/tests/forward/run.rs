//! Running one case: inputs drawn and uploaded, the launch, and the checks of o and lse.

use burn_flash_attn_kernels::FloatKind::F32;
use burn_flash_attn_kernels::forward::{ForwardTensors, flash_attention_forward};
use burn_flash_attn_kernels::plan::{DeviceCaps, Layout};
use burn_flash_attn_kernels::reference::{self, Inputs, Precision};
use burn_flash_attn_kernels::plan::Tuning;
use burn_flash_attn_kernels::{AttentionProblem, FlashError, ForwardConfig, ForwardPath};

use crate::case::{Case, MASKED_FRACTION, V_AMPLITUDE};
use crate::support::planning::forward_plan_tuned;
use crate::support::{
    Client, Elem, MaskPattern, POISON, Role, check_forward, client, filled, precision, random_mask,
    random_values, read, rng, upload,
};

/// Runs one case; panics with the case name, the seed and the worst coordinate on failure.
pub(crate) fn run(name: &str, case: Case) {
    let client = client();
    let problem = case.problem();
    let tuning = case.tuning();
    if let Err(reason) = runnable(&client, &problem, &tuning) {
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
    let mask = case.mask.map(|(pattern, _)| {
        let masked_rows = pattern == MaskPattern::RandomWithMaskedRows;
        let rows = drawn_heads * p.seq_q;
        random_mask(&mut rng, rows, p.seq_kv, MASKED_FRACTION, |row| {
            masked_rows && row % 3 == 0
        })
        .repeat(copies)
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
    let (rows, scores_layout) = (case.layout.of(Role::Rows), case.layout.of(Role::Scores));
    let q_dev = upload(&client, &q, &q_shape, float, &rows);
    let k_dev = upload(&client, &k, &kv_shape, float, &rows);
    let v_dev = upload(&client, &v, &v_shape, float, &rows);
    let upload_scores = |values: &[f64], elem: Elem| {
        if case.broadcast {
            let one_head = [1, 1, p.seq_q, p.seq_kv];
            let mut tensor = upload(
                &client,
                &values[..p.seq_q * p.seq_kv],
                &one_head,
                elem,
                &scores_layout,
            );
            tensor.shape = s_shape.to_vec();
            tensor.strides[0] = 0;
            tensor.strides[1] = 0;
            tensor
        } else {
            upload(&client, values, &s_shape, elem, &scores_layout)
        }
    };
    let mask_dev = mask.as_ref().zip(p.mask).map(|(mask, mask_kind)| {
        let values: Vec<f64> = mask.iter().map(|&m| if m { 1.0 } else { 0.0 }).collect();
        upload_scores(&values, Elem::Mask(mask_kind))
    });
    let bias_dev = bias.as_ref().map(|bias| upload_scores(bias, float));
    // O in the inputs' layout: the strided cases write through a transposed (and padded) view.
    let poison = vec![POISON; o_shape.iter().product()];
    let o_dev = upload(&client, &poison, &o_shape, float, &rows);
    let lse_dev = filled(&client, &o_shape[..3], Elem::Float(F32), POISON);

    let tensors = ForwardTensors {
        q: q_dev.binding(),
        k: k_dev.binding(),
        v: v_dev.binding(),
        mask: mask_dev.as_ref().map(|m| m.binding()),
        bias: bias_dev.as_ref().map(|b| b.binding()),
        slopes: None,
        o: o_dev.binding(),
        lse: lse_dev.binding(),
    };
    let plan = forward_plan_tuned(&DeviceCaps::of(&client), p, tensors.layout(kind), &tuning)
        .unwrap_or_else(|e| panic!("{name} (seed {seed}): planning refused: {e}"));
    if let Some(path) = tuning.forward_path {
        assert_eq!(plan.config.path(), path, "{name}: planned {plan}");
    }
    // A case that asks for a plane's rows runs with them (every plane it meets is wide enough).
    if let (Some(rows), ForwardConfig::Matrix(config)) = (case.plane_rows, &plan.config) {
        assert_eq!(config.plane_rows(), rows, "{name}: planned {plan}");
    }
    if let (Some(shared), ForwardConfig::Matrix(config)) = (case.shared_stage, &plan.config) {
        assert_eq!(config.shared_stage, shared, "{name}: planned {plan}");
    }
    flash_attention_forward(&client, p, &plan, tensors)
        .unwrap_or_else(|e| panic!("{name} (seed {seed}): launch refused: {e}"));
    println!("{name}: {plan}");
    let o = read(&client, &o_dev);
    let lse = read(&client, &lse_dev);

    let inputs = Inputs {
        q: &q,
        k: &k,
        v: &v,
        mask: mask.as_deref(),
        bias: bias.as_deref(),
        alibi: None,
    };
    let oracle = reference::forward(p, &inputs, Precision::F64);
    let plain = reference::forward(p, &inputs, precision(kind));
    let context = format!("{name} (seed {seed}, {case:?})");
    if let Err(message) = check_forward(&context, p, &o, &lse, &plain, &oracle) {
        panic!("{message}");
    }
}

/// Whether the device can run the case, or why not.
fn runnable(client: &Client, problem: &AttentionProblem, tuning: &Tuning) -> Result<(), String> {
    let caps = DeviceCaps::of(client);
    let path = tuning.forward_path;
    let tiles = if tuning.matrix_f32_tiles { F32 } else { problem.dtype };
    if path == Some(ForwardPath::Matrix) && !caps.has_matrix_units(tiles) && !tuning.matrix_stand_in {
        return Err(format!(
            "no 16x16x16 {:?} cmma, the matrix path cannot run",
            problem.dtype
        ));
    }
    if path == Some(ForwardPath::Mma) && !caps.has_register_mma(problem.dtype) {
        return Err(format!(
            "no 16x8x16 {:?} register mma, the mma path cannot run",
            problem.dtype
        ));
    }
    match forward_plan_tuned(&caps, problem, Layout::CHUNKED, tuning) {
        Err(FlashError::Device(reason)) => Err(reason),
        Err(other) => panic!("valid problem refused: {other}"),
        Ok(_) => Ok(()),
    }
}
