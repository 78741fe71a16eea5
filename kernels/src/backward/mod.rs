//! The FlashAttention-2 backward pass: dQ, dK, dV of `sum(o ∘ d_out)` (mask and bias are
//! constants: no dBias).
//!
//! [`flash_attention_backward`] checks the tensors against the problem and the plan (from
//! [`crate::plan`]) and launches, in order:
//! 1. [`preprocess`]: `delta = rowsum(d_out ∘ o)` into an f32 scratch it allocates;
//! 2. [`dkdv`]: outer loop over key/value blocks, accumulates dK and dV;
//! 3. [`dq`]: outer loop over query blocks, accumulates dQ.
//!
//! That is the default, [`DqAccumulation::Kernel`](crate::plan::DqAccumulation::Kernel): no atomics, each gradient element is
//! written by one unit, and every sum runs in a fixed order, so reruns are bit-identical.
//! [`DqAccumulation::Atomic`](crate::plan::DqAccumulation::Atomic) (the one-pass backward, [`dq_sink`]; both paths, devices with
//! f32 atomic add) replaces step 3: the dK/dV kernel adds each block pair's `dS K` to an f32
//! accumulator with atomic adds, and a last kernel writes `dq` from it. Three paths per kernel:
//! the register-level mma ([`mma`], CUDA f16/bf16), the matrix one ([`matrix`], 16x16x16 cmma
//! tiles: gfx942 with rocWMMA) and the portable one (scalar f32 FMAs on shared-memory tiles, no
//! cmma, no plane operations), which runs on every runtime; f32 accumulation for f16, bf16 and
//! f32 inputs.
//!
//! Shapes (any strides, `true` in the mask = masked), semantics as in [`crate::forward`]:
//! ```text
//! q, dq   [batch, num_heads, seq_q,  head_dim]     k, dk [batch, num_kv_heads, seq_kv, head_dim]
//! o, d_out[batch, num_heads, seq_q,  val_dim]      v, dv [batch, num_kv_heads, seq_kv, val_dim]
//! mask    [batch, num_heads, seq_q,  seq_kv] u8/u32 bias [batch, num_heads, seq_q, seq_kv]
//! lse     [batch, num_heads, seq_q] f32 (from the forward: f32::MAX for a fully masked row)
//! ```
//! Causal is aligned bottom-right (row `i` sees column `j` iff `j <= i + seq_kv - seq_q`).
//! Rows that see nothing get zero gradients. Grouped-query attention (`num_kv_heads <
//! num_heads`): the dK/dV kernels write per query head into scratch, summed per group in a
//! fixed order by [`group_sum`] (still no atomics).
pub mod block_pair;
pub mod compensated;
pub mod config;
pub mod dkdv;
pub mod dq;
pub mod dq_sink;
mod elementwise;
mod group_sum;
pub mod matrix;
pub mod mma;
pub mod preprocess;

use cubecl::prelude::*;

use crate::checks::{
    ExpectedShape, Shapes, check_atomics, check_cmma, check_plan_fits, check_plan_for, check_shapes, optional_args,
};
use crate::error::FlashError;
use crate::plan::{BackwardPlan, DqAccumulation, Layout};
use crate::problem::{AttentionProblem, FloatKind, MaskKind};

pub use config::{
    BackwardKernel, BackwardPath, GradientConfig, MatrixGradientConfig, MmaGradientConfig,
    PortableGradientConfig,
};
pub use dkdv::flash_attention_backward_dkdv;
pub use dq::flash_attention_backward_dq;
pub use preprocess::flash_attention_backward_preprocess;

/// The tensors of one backward launch. `dq`, `dk`, `dv` are pre-allocated by the caller (shape
/// and dtype of q, k, v; any strides) and fully overwritten.
pub struct BackwardTensors<R: Runtime> {
    pub q: TensorBinding<R>,
    pub k: TensorBinding<R>,
    pub v: TensorBinding<R>,
    /// The forward output.
    pub o: TensorBinding<R>,
    /// The gradient of the loss with respect to `o`.
    pub d_out: TensorBinding<R>,
    /// The forward's log-sum-exp, f32 natural log.
    pub lse: TensorBinding<R>,
    /// Bool mask, nonzero = masked; element type given by `AttentionProblem::mask`.
    pub mask: Option<TensorBinding<R>>,
    /// Additive bias in the dtype of q (a constant: no gradient).
    pub bias: Option<TensorBinding<R>>,
    /// ALiBi slopes, f32 `[num_heads]` (constants: no gradient).
    pub slopes: Option<TensorBinding<R>>,
    pub dq: TensorBinding<R>,
    pub dk: TensorBinding<R>,
    pub dv: TensorBinding<R>,
}

impl<R: Runtime> BackwardTensors<R> {
    /// The layout of q, k, v and d_out (what the plan must be made for).
    pub fn layout(&self, dtype: FloatKind) -> Layout {
        Layout::of(dtype, &[&self.q, &self.k, &self.v, &self.d_out])
    }
}

/// Runs the FlashAttention-2 backward pass that `plan` describes.
///
/// # Important
///
/// - `plan` comes from [`crate::plan::plan`] with [`crate::plan::Passes::ForwardBackward`] (or
///   [`crate::plan::backward::backward`]) for this problem: it is checked to be for the
///   problem, to fit the client's device, and (mma) that q, k, v, d_out rows are 16-byte chunks.
/// - Allocates its own f32 `delta` scratch (`batch * num_heads * seq_q` values), released when
///   the launches complete.
/// - `problem` must describe the tensors (shapes are checked, contents are not); `lse` must be
///   the forward's for the same q, k, mask, bias, scale and softcap.
/// - Launches are asynchronous: read the outputs through the client.
pub fn flash_attention_backward<R: Runtime>(
    client: &ComputeClient<R>,
    problem: &AttentionProblem,
    plan: &BackwardPlan,
    tensors: BackwardTensors<R>,
) -> Result<(), FlashError> {
    problem.validate()?;
    check_tensors(problem, &tensors)?;
    let layout = tensors.layout(problem.dtype);
    for gradient in [&plan.dkdv, &plan.dq] {
        let config = gradient.config;
        check_plan_for(
            problem,
            plan.dtype,
            config.dims(),
            config.score(),
            problem.quiet_softmax,
            gradient,
        )?;
        if let GradientConfig::Matrix(matrix) = config
            && !matrix.stand_in
        {
            let tiles = if matrix.f32_tiles { FloatKind::F32 } else { problem.dtype };
            check_cmma(client, tiles, matrix.plane_size)?;
        }
        let mma = config.path() == BackwardPath::Mma;
        check_plan_fits(
            client,
            config.shared_memory_bytes(),
            config.units(),
            mma,
            layout,
        )?;
    }
    if plan.dq_accumulation() == DqAccumulation::Atomic {
        let width = match plan.dkdv.config {
            GradientConfig::Mma(MmaGradientConfig { dq_width, .. })
            | GradientConfig::Matrix(MatrixGradientConfig { dq_width, .. }) => dq_width,
            GradientConfig::Portable(_) => 1,
        };
        check_atomics(client, width)?;
    }
    let delta = contiguous_scratch(client, &[problem.batch, problem.num_heads, problem.seq_q], size_of::<f32>());
    let inputs = GradientInputs {
        q: tensors.q,
        k: tensors.k,
        v: tensors.v,
        d_out: tensors.d_out.clone(),
        lse: tensors.lse,
        delta: delta.clone(),
        mask: tensors.mask,
        bias: tensors.bias,
        slopes: tensors.slopes,
    };
    let outputs = (tensors.dq, tensors.dk, tensors.dv);
    match problem.dtype {
        FloatKind::F16 => {
            launch_all::<R, half::f16>(client, problem, plan, tensors.o, inputs, outputs)
        }
        FloatKind::BF16 => {
            launch_all::<R, half::bf16>(client, problem, plan, tensors.o, inputs, outputs)
        }
        FloatKind::F32 => launch_all::<R, f32>(client, problem, plan, tensors.o, inputs, outputs),
    }
    Ok(())
}

/// The inputs both gradient kernels read, `delta` included (from the preprocess kernel, f32
/// `[batch, num_heads, seq_q]`, any strides).
#[derive(Clone)]
pub struct GradientInputs<R: Runtime> {
    pub q: TensorBinding<R>,
    pub k: TensorBinding<R>,
    pub v: TensorBinding<R>,
    pub d_out: TensorBinding<R>,
    pub lse: TensorBinding<R>,
    pub delta: TensorBinding<R>,
    pub mask: Option<TensorBinding<R>>,
    pub bias: Option<TensorBinding<R>>,
    pub slopes: Option<TensorBinding<R>>,
}

/// The typed kernel arguments, in kernel order.
pub(crate) struct GradientArgs<R: Runtime> {
    pub q: TensorArg<R>,
    pub k: TensorArg<R>,
    pub v: TensorArg<R>,
    pub d_out: TensorArg<R>,
    pub lse: TensorArg<R>,
    pub delta: TensorArg<R>,
    pub mask: TensorArg<R>,
    pub bias: TensorArg<R>,
    pub slopes: TensorArg<R>,
}

impl<R: Runtime> GradientInputs<R> {
    /// Elements per global read of q, k, v and d_out in the matrix kernels
    /// ([`crate::primitives::tile_io::load_width`]).
    pub(crate) fn load_width(
        &self,
        client: &ComputeClient<R>,
        dtype: FloatKind,
        allowed: bool,
    ) -> usize {
        let rows = [&self.q, &self.k, &self.v, &self.d_out];
        crate::primitives::tile_io::load_width(client, dtype, allowed, &rows)
    }

    /// Binds the tensors in kernel order, with stand-ins for an absent mask or bias.
    pub(crate) fn into_args(self, client: &ComputeClient<R>) -> GradientArgs<R> {
        let optional = optional_args(client, self.mask, self.bias, self.slopes, &self.q);
        GradientArgs {
            mask: optional.mask,
            bias: optional.bias,
            slopes: optional.slopes,
            q: self.q.into_tensor_arg(),
            k: self.k.into_tensor_arg(),
            v: self.v.into_tensor_arg(),
            d_out: self.d_out.into_tensor_arg(),
            lse: self.lse.into_tensor_arg(),
            delta: self.delta.into_tensor_arg(),
        }
    }
}

fn launch_all<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    problem: &AttentionProblem,
    plan: &BackwardPlan,
    o: TensorBinding<R>,
    inputs: GradientInputs<R>,
    outputs: (TensorBinding<R>, TensorBinding<R>, TensorBinding<R>),
) {
    flash_attention_backward_preprocess::<R, F>(
        client,
        problem,
        o,
        inputs.d_out.clone(),
        inputs.delta.clone(),
    )
    .expect("validated above");
    match problem.mask {
        Some(MaskKind::U8) => launch_gradients::<R, F, u8>(client, problem, plan, inputs, outputs),
        Some(MaskKind::U32) | None => {
            launch_gradients::<R, F, u32>(client, problem, plan, inputs, outputs)
        }
    }
}

/// dK/dV, then dQ, each on its plan's path (mask elements `M`).
fn launch_gradients<R: Runtime, F: Float + CubeElement, M: Int>(
    client: &ComputeClient<R>,
    problem: &AttentionProblem,
    plan: &BackwardPlan,
    inputs: GradientInputs<R>,
    (dq, dk, dv): (TensorBinding<R>, TensorBinding<R>, TensorBinding<R>),
) {
    // Grouped-query attention: one dK/dV per query head, then summed over each group.
    let grouped = problem.kv_group() > 1;
    let per_head = |grad: &TensorBinding<R>| {
        if grouped {
            group_sum::expanded_gradient(client, grad, problem.num_heads, size_of::<F>())
        } else {
            grad.clone()
        }
    };
    let (dk_heads, dv_heads) = (per_head(&dk), per_head(&dv));
    let (dk_out, dv_out) = (dk_heads.clone(), dv_heads.clone());
    // The one-pass plan's dK/dV kernel adds dQ into `dq_acc`.
    let dq_acc = (plan.dq_accumulation() == DqAccumulation::Atomic).then(|| {
        dq_sink::zeroed_accumulator(client, [problem.batch, problem.num_heads, problem.seq_q, problem.head_dim])
    });
    match (plan.dkdv.config, dq_acc.clone()) {
        (GradientConfig::Mma(config), Some(acc)) => {
            mma::launch_dkdv_dq_mma::<R, F, M>(client, problem, inputs.clone(), (dk_out, dv_out, acc), config)
        }
        (GradientConfig::Mma(config), None) => mma::flash_attention_backward_dkdv_mma::<R, F, M>(
            client,
            problem,
            inputs.clone(),
            dk_out,
            dv_out,
            config,
        ),
        (GradientConfig::Portable(config), Some(acc)) => {
            dkdv::launch_dkdv_dq::<R, F, M>(client, problem, inputs.clone(), (dk_out, dv_out, acc), config)
        }
        (GradientConfig::Portable(config), None) => flash_attention_backward_dkdv::<R, F, M>(
            client,
            problem,
            inputs.clone(),
            dk_out,
            dv_out,
            config,
        ),
        (GradientConfig::Matrix(config), acc) => {
            matrix::launch_dkdv::<R, F, M>(client, problem, inputs.clone(), (dk_out, dv_out, acc), config)
        }
    }
    if grouped {
        group_sum::launch_sum_head_groups::<R, F>(client, dk_heads, dk);
        group_sum::launch_sum_head_groups::<R, F>(client, dv_heads, dv);
    }
    if let Some(acc) = dq_acc {
        // The dK/dV kernel has added every pair's dS K: dq = scale * that sum.
        dq_sink::launch_finish_dq::<R, F>(client, problem.dtype, acc, dq, problem.scale as f32);
        return;
    }
    match plan.dq.config {
        GradientConfig::Mma(config) => {
            mma::flash_attention_backward_dq_mma::<R, F, M>(client, problem, inputs, dq, config)
        }
        GradientConfig::Portable(config) => {
            flash_attention_backward_dq::<R, F, M>(client, problem, inputs, dq, config)
        }
        GradientConfig::Matrix(config) => matrix::launch_dq::<R, F, M>(client, problem, inputs, dq, config),
    }
}

/// A contiguous, uninitialized scratch tensor of `shape`, elements of `elem_size` bytes.
pub(crate) fn contiguous_scratch<R: Runtime>(
    client: &ComputeClient<R>,
    shape: &[usize],
    elem_size: usize,
) -> TensorBinding<R> {
    let mut strides = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    // SAFETY: a contiguous buffer of exactly the shape's element count.
    unsafe {
        TensorBinding::<R>::from_raw_parts(
            client.empty(shape.iter().product::<usize>() * elem_size),
            strides.into(),
            shape.into(),
        )
    }
}

/// Checks every tensor's shape against the problem (the kernels trust them).
fn check_tensors<R: Runtime>(
    problem: &AttentionProblem,
    t: &BackwardTensors<R>,
) -> Result<(), FlashError> {
    let shapes = Shapes::of(problem);
    let expected: [ExpectedShape<'_, R>; 12] = [
        ("query", Some(&t.q), shapes.q.clone()),
        ("key", Some(&t.k), shapes.k.clone()),
        ("value", Some(&t.v), shapes.v.clone()),
        ("output", Some(&t.o), shapes.o.clone()),
        ("output gradient", Some(&t.d_out), shapes.o),
        ("lse", Some(&t.lse), shapes.rows),
        ("mask", t.mask.as_ref(), shapes.scores.clone()),
        ("attn_bias", t.bias.as_ref(), shapes.scores),
        ("alibi slopes", t.slopes.as_ref(), shapes.slopes),
        ("query gradient", Some(&t.dq), shapes.q),
        ("key gradient", Some(&t.dk), shapes.k),
        ("value gradient", Some(&t.dv), shapes.v),
    ];
    check_shapes(problem, &expected, t.mask.is_some(), t.bias.is_some())
}
