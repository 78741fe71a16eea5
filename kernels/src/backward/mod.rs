//! The FlashAttention-2 backward pass: dQ, dK, dV of `sum(o ∘ d_out)` (mask and bias are
//! constants: no dBias).
//!
//! [`flash_attention_backward`] validates the problem, plans both gradient kernels from
//! `client.properties()` and launches, in order:
//! 1. [`preprocess`]: `delta = rowsum(d_out ∘ o)` into an f32 scratch it allocates;
//! 2. [`dkdv`]: outer loop over key/value blocks, accumulates dK and dV;
//! 3. [`dq`]: outer loop over query blocks, accumulates dQ.
//!
//! No atomics: each gradient element is written by one unit, and every sum runs in a fixed
//! order, so reruns are bit-identical. Portable path only (scalar f32 FMAs on shared-memory
//! tiles, no cmma, no plane operations): it runs on every runtime, f32 accumulation for f16,
//! bf16 and f32 inputs.
//!
//! Shapes (any strides, `true` in the mask = masked), semantics as in [`crate::forward`]:
//! ```text
//! q, dq   [batch, num_heads, seq_q,  head_dim]     k, dk [batch, num_heads, seq_kv, head_dim]
//! o, d_out[batch, num_heads, seq_q,  val_dim]      v, dv [batch, num_heads, seq_kv, val_dim]
//! mask    [batch, num_heads, seq_q,  seq_kv] u8/u32 bias [batch, num_heads, seq_q, seq_kv]
//! lse     [batch, num_heads, seq_q] f32 (from the forward: f32::MAX for a fully masked row)
//! ```
//! Causal is aligned bottom-right (row `i` sees column `j` iff `j <= i + seq_kv - seq_q`).
//! Rows that see nothing get zero gradients.
pub mod block_pair;
pub mod compensated;
pub mod config;
pub mod dkdv;
pub mod dq;
pub mod mma;
pub mod preprocess;

use cubecl::prelude::*;

use crate::error::FlashError;
use crate::forward::chunked_rows;
use crate::heuristics::{elem_type, mask_elem_type};
use crate::primitives::score::ScoreParamsLaunch;
use crate::problem::{AttentionProblem, FloatKind, MaskKind};

pub use config::{
    plan_backward, plan_backward_portable, BackwardConfig, BackwardKernel, BackwardPath, BackwardPlan,
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
    pub dq: TensorBinding<R>,
    pub dk: TensorBinding<R>,
    pub dv: TensorBinding<R>,
}

/// What was launched, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct BackwardLaunch {
    pub dkdv: BackwardPlan,
    pub dq: BackwardPlan,
}

/// Runs the FlashAttention-2 backward pass.
///
/// # Important
///
/// - Allocates its own f32 `delta` scratch (`batch * num_heads * seq_q` values), released when
///   the launches complete.
/// - `problem` must describe the tensors (shapes are checked, contents are not); `lse` must be
///   the forward's for the same q, k, mask, bias, scale and softcap.
/// - Launches are asynchronous: read the outputs through the client.
pub fn flash_attention_backward<R: Runtime>(
    client: &ComputeClient<R>,
    problem: &AttentionProblem,
    tensors: BackwardTensors<R>,
) -> Result<BackwardLaunch, FlashError> {
    problem.validate()?;
    check_types(client, problem)?;
    check_shapes(problem, &tensors)?;
    let props = client.properties();
    // The mma path loads rows in 16-byte chunks; other views take the portable path.
    let chunked = chunked_rows(problem.dtype, &[&tensors.q, &tensors.k, &tensors.v, &tensors.d_out]);
    let plan = if chunked { plan_backward } else { plan_backward_portable };
    let launch = BackwardLaunch {
        dkdv: plan(props, problem, BackwardKernel::KeyValue)?,
        dq: plan(props, problem, BackwardKernel::Query)?,
    };
    let rows = problem.heads_total() * problem.seq_q;
    let delta_shape = [problem.batch, problem.num_heads, problem.seq_q];
    let delta_strides = [problem.num_heads * problem.seq_q, problem.seq_q, 1];
    // SAFETY: a contiguous f32 buffer of exactly `rows` elements.
    let delta = unsafe {
        TensorBinding::<R>::from_raw_parts(
            client.empty(rows * size_of::<f32>()),
            delta_strides.into(),
            delta_shape.into(),
        )
    };
    let inputs = GradientInputs {
        q: tensors.q,
        k: tensors.k,
        v: tensors.v,
        d_out: tensors.d_out.clone(),
        lse: tensors.lse,
        delta: delta.clone(),
        mask: tensors.mask,
        bias: tensors.bias,
    };
    let outputs = (tensors.dq, tensors.dk, tensors.dv);
    match problem.dtype {
        FloatKind::F16 => launch_all::<R, half::f16>(client, problem, &launch, tensors.o, inputs, outputs),
        FloatKind::BF16 => launch_all::<R, half::bf16>(client, problem, &launch, tensors.o, inputs, outputs),
        FloatKind::F32 => launch_all::<R, f32>(client, problem, &launch, tensors.o, inputs, outputs),
    }
    Ok(launch)
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
}

impl<R: Runtime> GradientInputs<R> {
    /// Without a mask a 1-element u32 stand-in is bound, without a bias q is bound again: the
    /// kernels never read them (`has_mask` / `has_bias` are comptime false).
    pub(crate) fn into_args(self, client: &ComputeClient<R>) -> GradientArgs<R> {
        let stand_in = || {
            let handle = client.create_from_slice(u32::as_bytes(&[0u32]));
            // SAFETY: a 1-element tensor with 1 element of storage.
            unsafe { TensorArg::from_raw_parts(handle, [0, 0, 0, 0].into(), [1, 1, 1, 1].into()) }
        };
        GradientArgs {
            mask: self.mask.map_or_else(stand_in, TensorBinding::into_tensor_arg),
            bias: self.bias.unwrap_or_else(|| self.q.clone()).into_tensor_arg(),
            q: self.q.into_tensor_arg(),
            k: self.k.into_tensor_arg(),
            v: self.v.into_tensor_arg(),
            d_out: self.d_out.into_tensor_arg(),
            lse: self.lse.into_tensor_arg(),
            delta: self.delta.into_tensor_arg(),
        }
    }
}

/// The runtime scalars of the logit transform for `problem`.
pub fn score_params<R: Runtime>(problem: &AttentionProblem) -> ScoreParamsLaunch<R> {
    ScoreParamsLaunch::new(
        problem.scale as f32,
        // Unused without softcap (comptime off); 1 keeps the division harmless regardless.
        problem.softcap.unwrap_or(1.0) as f32,
        problem.seq_q as u32,
        problem.seq_kv as u32,
    )
}

fn launch_all<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    problem: &AttentionProblem,
    launch: &BackwardLaunch,
    o: TensorBinding<R>,
    inputs: GradientInputs<R>,
    (dq, dk, dv): (TensorBinding<R>, TensorBinding<R>, TensorBinding<R>),
) {
    flash_attention_backward_preprocess::<R, F>(client, problem, o, inputs.d_out.clone(), inputs.delta.clone())
        .expect("validated above");
    let (dkdv_config, dq_config) = (launch.dkdv.config, launch.dq.config);
    if dkdv_config.path == BackwardPath::Mma {
        match problem.mask {
            Some(MaskKind::U8) => {
                mma::flash_attention_backward_dkdv_mma::<R, F, u8>(client, problem, inputs.clone(), dk, dv, dkdv_config);
                mma::flash_attention_backward_dq_mma::<R, F, u8>(client, problem, inputs, dq, dq_config);
            }
            Some(MaskKind::U32) | None => {
                mma::flash_attention_backward_dkdv_mma::<R, F, u32>(client, problem, inputs.clone(), dk, dv, dkdv_config);
                mma::flash_attention_backward_dq_mma::<R, F, u32>(client, problem, inputs, dq, dq_config);
            }
        }
        return;
    }
    match problem.mask {
        Some(MaskKind::U8) => {
            flash_attention_backward_dkdv::<R, F, u8>(client, problem, inputs.clone(), dk, dv, dkdv_config);
            flash_attention_backward_dq::<R, F, u8>(client, problem, inputs, dq, dq_config);
        }
        Some(MaskKind::U32) | None => {
            flash_attention_backward_dkdv::<R, F, u32>(client, problem, inputs.clone(), dk, dv, dkdv_config);
            flash_attention_backward_dq::<R, F, u32>(client, problem, inputs, dq, dq_config);
        }
    }
}

/// Checks that the device can hold the problem's element types at all.
fn check_types<R: Runtime>(client: &ComputeClient<R>, problem: &AttentionProblem) -> Result<(), FlashError> {
    let props = client.properties();
    if !props.supports_type(elem_type(problem.dtype)) {
        return Err(FlashError::Device(format!("{:?} tensors are not supported", problem.dtype)));
    }
    if let Some(kind) = problem.mask
        && !props.supports_type(mask_elem_type(kind))
    {
        return Err(FlashError::Device(format!("{kind:?} mask tensors are not supported")));
    }
    Ok(())
}

/// A tensor's name, binding (absent optional tensors are `None`) and expected shape.
type ExpectedShape<'a, R> = (&'static str, Option<&'a TensorBinding<R>>, Vec<usize>);

/// Checks every tensor's shape against the problem (the kernels trust them).
fn check_shapes<R: Runtime>(problem: &AttentionProblem, t: &BackwardTensors<R>) -> Result<(), FlashError> {
    let p = problem;
    let (b, h) = (p.batch, p.num_heads);
    let q_shape = vec![b, h, p.seq_q, p.head_dim];
    let k_shape = vec![b, h, p.seq_kv, p.head_dim];
    let v_shape = vec![b, h, p.seq_kv, p.val_dim];
    let o_shape = vec![b, h, p.seq_q, p.val_dim];
    let scores = vec![b, h, p.seq_q, p.seq_kv];
    let expected: [ExpectedShape<'_, R>; 11] = [
        ("query", Some(&t.q), q_shape.clone()),
        ("key", Some(&t.k), k_shape.clone()),
        ("value", Some(&t.v), v_shape.clone()),
        ("output", Some(&t.o), o_shape.clone()),
        ("output gradient", Some(&t.d_out), o_shape),
        ("lse", Some(&t.lse), vec![b, h, p.seq_q]),
        ("mask", t.mask.as_ref(), scores.clone()),
        ("attn_bias", t.bias.as_ref(), scores),
        ("query gradient", Some(&t.dq), q_shape),
        ("key gradient", Some(&t.dk), k_shape),
        ("value gradient", Some(&t.dv), v_shape),
    ];
    for (what, binding, shape) in expected {
        let Some(binding) = binding else { continue };
        if binding.shape.as_ref() != shape.as_slice() || binding.strides.len() != shape.len() {
            return Err(FlashError::ShapeMismatch {
                what,
                detail: format!(
                    "expected shape {shape:?}, got {:?} with {} strides",
                    binding.shape.as_ref(),
                    binding.strides.len()
                ),
            });
        }
    }
    if t.mask.is_some() != p.mask.is_some() || t.bias.is_some() != p.has_bias {
        return Err(FlashError::ShapeMismatch {
            what: "optional tensors",
            detail: format!(
                "problem says mask {:?}, bias {}; got mask {}, bias {}",
                p.mask,
                p.has_bias,
                t.mask.is_some(),
                t.bias.is_some()
            ),
        });
    }
    Ok(())
}
