//! The backward run of a [`Case`]: its seeded host data, its device tensors (outputs poisoned),
//! the gradient kernels as planned, and the comparison with the f64 oracle.
use burn_flash_attn_kernels::backward::{BackwardTensors, GradientInputs};
use burn_flash_attn_kernels::problem::{AttentionProblem, FloatKind, MaskKind};
use burn_flash_attn_kernels::reference::{self, Inputs, Precision};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::case::*;
use super::compare::{check_gradient, precision, run_all};
use super::device::{DeviceTensor, Elem, Layout, read, upload};
use super::inputs::{random_mask, seed, uniform_values};
use super::planning::{launch_backward_with, tuning};
use burn_flash_attn_kernels::plan::{BackwardPlan, Tuning};
use super::runtime::{Client, TestRuntime, client};

/// Host data of one case, every value already rounded to its storage type.
pub struct HostData {
    pub q: Vec<f64>,
    pub k: Vec<f64>,
    pub v: Vec<f64>,
    pub d_out: Vec<f64>,
    pub mask: Option<Vec<bool>>,
    pub bias: Option<Vec<f64>>,
    /// ALiBi slopes `[num_heads]`, f32 values.
    pub alibi: Option<Vec<f64>>,
}

impl HostData {
    pub fn draw(case: &Case, seed: u64) -> Self {
        let p = case.problem();
        let mut rng = StdRng::seed_from_u64(seed);
        let mut uniform = |n: usize| uniform_values(&mut rng, n, case.dtype);
        let (bh, sq, skv) = (p.heads_total(), p.seq_q, p.seq_kv);
        let bkv = p.batch * p.num_kv_heads;
        let q = uniform(bh * sq * p.head_dim);
        let k = uniform(bkv * skv * p.head_dim);
        let v = uniform(bkv * skv * p.val_dim);
        let d_out = uniform(bh * sq * p.val_dim);
        let bias = case.bias.then(|| uniform(bh * sq * skv));
        let mask = case.mask.map(|(pattern, _)| {
            let masked_rows = pattern == MaskPattern::RandomWithMaskedRows;
            random_mask(&mut rng, bh * sq, skv, MASKED_FRACTION, |row| {
                masked_rows && (row % sq) % 3 == 1
            })
        });
        // Slopes as ALiBi's geometric sequence spans them (2^-8 .. 2^-0.5), drawn per head.
        let alibi = case.alibi.then(|| {
            (0..p.num_heads)
                .map(|_| 2f64.powf(-rng.random_range(0.5..8.0)) as f32 as f64)
                .collect()
        });
        HostData {
            q,
            k,
            v,
            d_out,
            mask,
            bias,
            alibi,
        }
    }

    pub fn inputs(&self) -> Inputs<'_> {
        Inputs {
            q: &self.q,
            k: &self.k,
            v: &self.v,
            mask: self.mask.as_deref(),
            bias: self.bias.as_deref(),
            alibi: self.alibi.as_deref(),
        }
    }
}

/// The forward results the backward consumes: `o` rounded to the dtype, `lse` as f32 with the
/// forward kernel's stand-in for +inf (fully masked rows).
pub fn forward_outputs(case: &Case, data: &HostData) -> (Vec<f64>, Vec<f64>) {
    let fwd = reference::forward(&case.problem(), &data.inputs(), Precision::F64);
    let prec = precision(case.dtype);
    let o = fwd.o.iter().map(|&x| prec.round(x)).collect();
    let lse = fwd
        .lse
        .iter()
        .map(|&x| {
            if x.is_infinite() {
                f32::MAX as f64
            } else {
                x as f32 as f64
            }
        })
        .collect();
    (o, lse)
}

/// Device tensors of one backward launch, outputs poisoned.
pub struct DeviceCase {
    pub q: DeviceTensor,
    pub k: DeviceTensor,
    pub v: DeviceTensor,
    pub o: DeviceTensor,
    pub d_out: DeviceTensor,
    pub lse: DeviceTensor,
    pub mask: Option<DeviceTensor>,
    pub bias: Option<DeviceTensor>,
    pub slopes: Option<DeviceTensor>,
    pub dq: DeviceTensor,
    pub dk: DeviceTensor,
    pub dv: DeviceTensor,
}

impl DeviceCase {
    pub fn upload(client: &Client, case: &Case, data: &HostData, o: &[f64], lse: &[f64]) -> Self {
        let p = case.problem();
        let (b, h) = (p.batch, p.num_heads);
        let q_shape = [b, h, p.seq_q, p.head_dim];
        let k_shape = [b, p.num_kv_heads, p.seq_kv, p.head_dim];
        let v_shape = [b, p.num_kv_heads, p.seq_kv, p.val_dim];
        let o_shape = [b, h, p.seq_q, p.val_dim];
        let scores = [b, h, p.seq_q, p.seq_kv];
        let at = |values: &[f64], shape: &[usize], elem, role| {
            upload(client, values, shape, elem, &case.layout.of(role))
        };
        let float = |values: &[f64], shape: &[usize], role| {
            at(values, shape, Elem::Float(case.dtype), role)
        };
        let poison =
            |shape: &[usize]| float(&vec![POISON; shape.iter().product()], shape, Role::Rows);
        let mask = data.mask.as_ref().map(|m| {
            let values: Vec<f64> = m.iter().map(|&x| x as u8 as f64).collect();
            let kind = case.mask.expect("mask data implies a mask kind").1;
            at(&values, &scores, Elem::Mask(kind), Role::Scores)
        });
        DeviceCase {
            q: float(&data.q, &q_shape, Role::Rows),
            k: float(&data.k, &k_shape, Role::Rows),
            v: float(&data.v, &v_shape, Role::Rows),
            o: float(o, &o_shape, Role::Rows),
            d_out: float(&data.d_out, &o_shape, Role::Rows),
            lse: at(
                lse,
                &[b, h, p.seq_q],
                Elem::Float(FloatKind::F32),
                Role::Stats,
            ),
            mask,
            bias: data
                .bias
                .as_ref()
                .map(|bias| float(bias, &scores, Role::Scores)),
            slopes: data
                .alibi
                .as_ref()
                .map(|slopes| at(slopes, &[h], Elem::Float(FloatKind::F32), Role::Stats)),
            dq: poison(&q_shape),
            dk: poison(&k_shape),
            dv: poison(&v_shape),
        }
    }

    pub fn tensors(&self) -> BackwardTensors<TestRuntime> {
        BackwardTensors {
            q: self.q.binding(),
            k: self.k.binding(),
            v: self.v.binding(),
            o: self.o.binding(),
            d_out: self.d_out.binding(),
            lse: self.lse.binding(),
            mask: self.mask.as_ref().map(DeviceTensor::binding),
            bias: self.bias.as_ref().map(DeviceTensor::binding),
            slopes: self.slopes.as_ref().map(DeviceTensor::binding),
            dq: self.dq.binding(),
            dk: self.dk.binding(),
            dv: self.dv.binding(),
        }
    }

    /// What the gradient kernels read, with `delta` (the preprocess output) given.
    pub fn gradient_inputs(&self, delta: &DeviceTensor) -> GradientInputs<TestRuntime> {
        GradientInputs {
            q: self.q.binding(),
            k: self.k.binding(),
            v: self.v.binding(),
            d_out: self.d_out.binding(),
            lse: self.lse.binding(),
            delta: delta.binding(),
            mask: self.mask.as_ref().map(DeviceTensor::binding),
            bias: self.bias.as_ref().map(DeviceTensor::binding),
            slopes: self.slopes.as_ref().map(DeviceTensor::binding),
        }
    }
}

/// Rows of `[.., seq_q, dim]` that see no key: causal rows past the diagonal, rows whose
/// window holds no key and fully masked rows. Their dQ must be exactly 0.
pub fn blind_rows(case: &Case, data: &HostData) -> Vec<usize> {
    let p = case.problem();
    (0..p.heads_total() * p.seq_q)
        .filter(|&row| {
            let i = row % p.seq_q;
            (0..p.seq_kv).all(|j| {
                let mask_hidden = data.mask.as_ref().is_some_and(|m| m[row * p.seq_kv + j]);
                !p.sees(i, j) || mask_hidden
            })
        })
        .collect()
}

/// Runs the whole backward on `case` and compares dQ, dK, dV with the oracle.
pub fn run_case(case: &Case) -> Result<(), String> {
    run_case_with(case, &tuning()).map(|_| ())
}

/// [`run_case`] planned with `tuning`; the plan it ran (`None`: the device cannot hold the
/// case's types).
pub fn run_case_with(case: &Case, tuning: &Tuning) -> Result<Option<BackwardPlan>, String> {
    let client = client();
    if !supported(&client, case) {
        return Ok(None);
    }
    let seed = case.seed();
    let data = HostData::draw(case, seed);
    let (o, lse) = forward_outputs(case, &data);
    let device = DeviceCase::upload(&client, case, &data, &o, &lse);
    let problem = case.problem();
    let start = std::time::Instant::now();
    let launch = launch_backward_with(&client, &problem, device.tensors(), tuning)
        .map_err(|e| format!("{}: {e}", case.label()))?;
    let dq = read(&client, &device.dq);
    let dk = read(&client, &device.dk);
    let dv = read(&client, &device.dv);
    let kernels = start.elapsed();
    let oracle = reference::backward(&problem, &data.inputs(), &data.d_out, Precision::F64);
    let plain = reference::backward(&problem, &data.inputs(), &data.d_out, precision(case.dtype));
    println!(
        "case {} seed {seed} ({:?} path, dQ by {}): kernels {:.2?} (compile included), oracles {:.2?}",
        case.name(),
        launch.dkdv.config.path(),
        launch.dq_accumulation().name(),
        kernels,
        start.elapsed() - kernels
    );
    let label = case.label();
    for (what, got, plain, oracle) in [
        ("dq", &dq, &plain.dq, &oracle.dq),
        ("dk", &dk, &plain.dk, &oracle.dk),
        ("dv", &dv, &plain.dv, &oracle.dv),
    ] {
        check_gradient(&label, what, got, plain, oracle, case.dtype)?;
    }
    for row in blind_rows(case, &data) {
        let dims = problem.head_dim;
        if dq[row * dims..(row + 1) * dims].iter().any(|&x| x != 0.0) {
            return Err(format!(
                "{label}: dq row {row} sees no key but is not exactly 0"
            ));
        }
    }
    Ok(Some(launch))
}

/// Runs every case, reports all failures at once.
pub fn run_cases(cases: &[Case]) {
    run_all(cases, run_case);
}
