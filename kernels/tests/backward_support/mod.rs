//! Test support of the backward suite: cases, seeded inputs, strided device tensors, and the
//! comparison with the f64 oracle under the FlashAttention tolerance rule.
#![allow(dead_code)]

use burn_flash_attn_kernels::backward::{BackwardTensors, GradientInputs};
use burn_flash_attn_kernels::problem::{AttentionProblem, FloatKind, MaskKind};
use burn_flash_attn_kernels::reference::{self, Inputs, Precision};
use burn_flash_attn_kernels::tolerance::{GRADIENT_FACTOR, check};
use cubecl::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The runtime under test, chosen by cargo feature: `cuda`, else `hip`, else wgpu (default).
#[cfg(feature = "cuda")]
pub type TestRuntime = cubecl::cuda::CudaRuntime;
#[cfg(all(feature = "hip", not(feature = "cuda")))]
pub type TestRuntime = cubecl::hip::HipRuntime;
#[cfg(not(any(feature = "cuda", feature = "hip")))]
pub type TestRuntime = cubecl::wgpu::WgpuRuntime;

mod device;
pub mod forward;
pub use device::*;

/// Written into every output before a launch: an element the kernel forgets stays NaN, which
/// the comparison counts as infinitely wrong.
const POISON: f64 = f64::NAN;
/// Fraction of entries an explicit random mask hides.
const MASKED_FRACTION: f64 = 0.25;

pub fn client() -> ComputeClient<TestRuntime> {
    TestRuntime::client(&Default::default())
}

/// An explicit mask pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaskPattern {
    /// Each entry masked with probability [`MASKED_FRACTION`].
    Random,
    /// Random, and every third query row fully masked.
    RandomWithMaskedRows,
}

#[derive(Clone, Debug)]
pub struct Case {
    pub batch: usize,
    pub heads: usize,
    pub seq_q: usize,
    pub seq_kv: usize,
    pub head_dim: usize,
    pub val_dim: usize,
    pub dtype: FloatKind,
    pub causal: bool,
    pub mask: Option<(MaskPattern, MaskKind)>,
    pub bias: bool,
    pub softcap: Option<f64>,
    /// `None`: the default 1/sqrt(head_dim).
    pub scale: Option<f64>,
    pub layout: Layout,
}

impl Case {
    pub fn new(dtype: FloatKind, seq_q: usize, seq_kv: usize, head_dim: usize) -> Self {
        Case {
            batch: 1,
            heads: 1,
            seq_q,
            seq_kv,
            head_dim,
            val_dim: head_dim,
            dtype,
            causal: false,
            mask: None,
            bias: false,
            softcap: None,
            scale: None,
            layout: Layout::Contiguous,
        }
    }

    pub fn heads(self, batch: usize, heads: usize) -> Self {
        Case {
            batch,
            heads,
            ..self
        }
    }
    pub fn val_dim(self, val_dim: usize) -> Self {
        Case { val_dim, ..self }
    }
    pub fn causal(self) -> Self {
        Case {
            causal: true,
            ..self
        }
    }
    pub fn mask(self, pattern: MaskPattern) -> Self {
        Case {
            mask: Some((pattern, MaskKind::U32)),
            ..self
        }
    }
    pub fn mask_u8(self, pattern: MaskPattern) -> Self {
        Case {
            mask: Some((pattern, MaskKind::U8)),
            ..self
        }
    }
    pub fn bias(self) -> Self {
        Case { bias: true, ..self }
    }
    pub fn softcap(self, cap: f64) -> Self {
        Case {
            softcap: Some(cap),
            ..self
        }
    }
    pub fn scale(self, scale: f64) -> Self {
        Case {
            scale: Some(scale),
            ..self
        }
    }
    pub fn transposed(self) -> Self {
        Case {
            layout: Layout::Transposed,
            ..self
        }
    }

    pub fn name(&self) -> String {
        let mut name = format!(
            "{:?}_b{}h{}_q{}_kv{}_hd{}_vd{}",
            self.dtype,
            self.batch,
            self.heads,
            self.seq_q,
            self.seq_kv,
            self.head_dim,
            self.val_dim
        );
        for (on, tag) in [
            (self.causal, "_causal"),
            (self.bias, "_bias"),
            (self.layout == Layout::Transposed, "_strided"),
        ] {
            if on {
                name.push_str(tag);
            }
        }
        if let Some((pattern, kind)) = self.mask {
            name.push_str(&format!("_mask{pattern:?}{kind:?}"));
        }
        if let Some(cap) = self.softcap {
            name.push_str(&format!("_softcap{cap}"));
        }
        if let Some(scale) = self.scale {
            name.push_str(&format!("_scale{scale}"));
        }
        name.to_lowercase()
    }

    pub fn problem(&self) -> AttentionProblem {
        AttentionProblem {
            batch: self.batch,
            num_heads: self.heads,
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
            mask: self.mask.map(|(_, kind)| kind),
            has_bias: self.bias,
        }
    }

    /// The seed: `BACKWARD_SEED` if set, else a hash of the case name (reproducible runs).
    pub fn seed(&self) -> u64 {
        if let Ok(seed) = std::env::var("BACKWARD_SEED") {
            return seed.parse().expect("BACKWARD_SEED must be a u64");
        }
        self.name().bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        })
    }
}

pub fn precision(dtype: FloatKind) -> Precision {
    match dtype {
        FloatKind::F16 => Precision::F16,
        FloatKind::BF16 => Precision::BF16,
        FloatKind::F32 => Precision::F32,
    }
}

/// Whether the test device can run the case's element types; prints why not.
pub fn supported(client: &ComputeClient<TestRuntime>, case: &Case) -> bool {
    use burn_flash_attn_kernels::plan::{elem_type, mask_elem_type};
    let props = client.properties();
    let ok = props.supports_type(elem_type(case.dtype))
        && case
            .mask
            .is_none_or(|(_, kind)| props.supports_type(mask_elem_type(kind)));
    if !ok {
        println!(
            "SKIPPED {}: the test device does not support its element types",
            case.name()
        );
    }
    ok
}

/// Host data of one case, every value already rounded to its storage type.
pub struct HostData {
    pub q: Vec<f64>,
    pub k: Vec<f64>,
    pub v: Vec<f64>,
    pub d_out: Vec<f64>,
    pub mask: Option<Vec<bool>>,
    pub bias: Option<Vec<f64>>,
}

impl HostData {
    pub fn draw(case: &Case, seed: u64) -> Self {
        let p = case.problem();
        let prec = precision(case.dtype);
        let mut rng = StdRng::seed_from_u64(seed);
        let mut uniform = |n: usize| -> Vec<f64> {
            (0..n)
                .map(|_| prec.round(rng.random_range(-1.0..1.0)))
                .collect()
        };
        let (bh, sq, skv) = (p.heads_total(), p.seq_q, p.seq_kv);
        let q = uniform(bh * sq * p.head_dim);
        let k = uniform(bh * skv * p.head_dim);
        let v = uniform(bh * skv * p.val_dim);
        let d_out = uniform(bh * sq * p.val_dim);
        let bias = case.bias.then(|| uniform(bh * sq * skv));
        let mask = case.mask.map(|(pattern, _)| {
            (0..bh * sq * skv)
                .map(|idx| {
                    let row = (idx / skv) % sq;
                    let masked_row = pattern == MaskPattern::RandomWithMaskedRows && row % 3 == 1;
                    masked_row || rng.random_bool(MASKED_FRACTION)
                })
                .collect()
        });
        HostData {
            q,
            k,
            v,
            d_out,
            mask,
            bias,
        }
    }

    pub fn inputs(&self) -> Inputs<'_> {
        Inputs {
            q: &self.q,
            k: &self.k,
            v: &self.v,
            mask: self.mask.as_deref(),
            bias: self.bias.as_deref(),
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
    pub dq: DeviceTensor,
    pub dk: DeviceTensor,
    pub dv: DeviceTensor,
}

impl DeviceCase {
    pub fn upload(
        client: &ComputeClient<TestRuntime>,
        case: &Case,
        data: &HostData,
        o: &[f64],
        lse: &[f64],
    ) -> Self {
        let p = case.problem();
        let (b, h, l) = (p.batch, p.num_heads, case.layout);
        let q_shape = [b, h, p.seq_q, p.head_dim];
        let k_shape = [b, h, p.seq_kv, p.head_dim];
        let v_shape = [b, h, p.seq_kv, p.val_dim];
        let o_shape = [b, h, p.seq_q, p.val_dim];
        let scores = [b, h, p.seq_q, p.seq_kv];
        let float = |values: &[f64], shape: &[usize], role| {
            upload_float(client, case.dtype, values, shape, l, role)
        };
        let poison =
            |shape: &[usize]| float(&vec![POISON; shape.iter().product()], shape, Role::Rows);
        let mask = data.mask.as_ref().map(|m| {
            let values: Vec<f64> = m.iter().map(|&x| x as u8 as f64).collect();
            match case.mask.expect("mask data implies a mask kind").1 {
                MaskKind::U8 => upload(client, &values, &scores, l, Role::Scores, |x| x as u8),
                MaskKind::U32 => upload(client, &values, &scores, l, Role::Scores, |x| x as u32),
            }
        });
        DeviceCase {
            q: float(&data.q, &q_shape, Role::Rows),
            k: float(&data.k, &k_shape, Role::Rows),
            v: float(&data.v, &v_shape, Role::Rows),
            o: float(o, &o_shape, Role::Rows),
            d_out: float(&data.d_out, &o_shape, Role::Rows),
            lse: upload(client, lse, &[b, h, p.seq_q], l, Role::Stats, |x| x as f32),
            mask,
            bias: data
                .bias
                .as_ref()
                .map(|bias| float(bias, &scores, Role::Scores)),
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
        }
    }
}

/// Checks `got` against the oracle with the gradient rule, and that it holds no NaN.
pub fn check_gradient(
    case: &Case,
    what: &str,
    got: &[f64],
    plain: &[f64],
    oracle: &[f64],
) -> Result<(), String> {
    if let Some(at) = got.iter().position(|x| !x.is_finite()) {
        return Err(format!(
            "{}: {what} has a non-finite value {} at flat index {at}",
            case.name(),
            got[at]
        ));
    }
    check(
        &format!("{} {what}", case.name()),
        got,
        plain,
        oracle,
        GRADIENT_FACTOR,
        precision(case.dtype),
    )
}

/// Rows of `[.., seq_q, dim]` that see no key: causal rows past the diagonal and fully masked
/// rows. Their dQ must be exactly 0.
pub fn blind_rows(case: &Case, data: &HostData) -> Vec<usize> {
    let p = case.problem();
    (0..p.heads_total() * p.seq_q)
        .filter(|&row| {
            let i = row % p.seq_q;
            (0..p.seq_kv).all(|j| {
                let causal_hidden = p.causal && j >= p.causal_end(i);
                let mask_hidden = data.mask.as_ref().is_some_and(|m| m[row * p.seq_kv + j]);
                causal_hidden || mask_hidden
            })
        })
        .collect()
}

/// Runs the whole backward on `case` and compares dQ, dK, dV with the oracle.
pub fn run_case(case: &Case) -> Result<(), String> {
    let client = client();
    if !supported(&client, case) {
        return Ok(());
    }
    let seed = case.seed();
    let data = HostData::draw(case, seed);
    let (o, lse) = forward_outputs(case, &data);
    let device = DeviceCase::upload(&client, case, &data, &o, &lse);
    let problem = case.problem();
    let start = std::time::Instant::now();
    let launch = crate::planning::launch_backward(&client, &problem, device.tensors())
        .map_err(|e| format!("{}: {e}", case.name()))?;
    let dq = read_float(&client, case.dtype, &device.dq);
    let dk = read_float(&client, case.dtype, &device.dk);
    let dv = read_float(&client, case.dtype, &device.dv);
    let kernels = start.elapsed();
    let oracle = reference::backward(&problem, &data.inputs(), &data.d_out, Precision::F64);
    let plain = reference::backward(&problem, &data.inputs(), &data.d_out, precision(case.dtype));
    println!(
        "case {} seed {seed} ({:?} path): kernels {:.2?} (compile included), oracles {:.2?}",
        case.name(),
        launch.dkdv.config.path(),
        kernels,
        start.elapsed() - kernels
    );
    check_gradient(case, "dq", &dq, &plain.dq, &oracle.dq)?;
    check_gradient(case, "dk", &dk, &plain.dk, &oracle.dk)?;
    check_gradient(case, "dv", &dv, &plain.dv, &oracle.dv)?;
    for row in blind_rows(case, &data) {
        let dims = problem.head_dim;
        if dq[row * dims..(row + 1) * dims].iter().any(|&x| x != 0.0) {
            return Err(format!(
                "{}: dq row {row} sees no key but is not exactly 0",
                case.name()
            ));
        }
    }
    Ok(())
}

/// Runs every case, reports all failures at once.
pub fn run_cases(cases: &[Case]) {
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|case| run_case(case).err())
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
