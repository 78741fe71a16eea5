//! The FlashAttention-2 forward pass: `o = softmax(logits(q k^T)) v` and the row log-sum-exp.
//!
//! [`flash_attention_forward`] validates the problem, picks a path and blocks through
//! [`crate::heuristics`], and launches one of three kernels:
//! - [`portable`]: scalar tiles in shared memory, runs everywhere (lavapipe, WGPU, HIP bf16, f32);
//! - [`matrix`]: `cmma` fragments where the device registers them for the dtype;
//! - [`mma`]: register-level `mma` with the softmax on the accumulators (CUDA f16/bf16).
//!
//! Shapes (any strides, `true` in the mask = masked):
//! ```text
//! q    [batch, num_heads, seq_q,  head_dim]      k    [batch, num_heads, seq_kv, head_dim]
//! v    [batch, num_heads, seq_kv, val_dim]       o    [batch, num_heads, seq_q,  val_dim]  (dtype of q)
//! mask [batch, num_heads, seq_q,  seq_kv] u8/u32 bias [batch, num_heads, seq_q,  seq_kv] (dtype of q)
//! lse  [batch, num_heads, seq_q] f32
//! ```
//! Logits: `s = q·k * scale` (default `1/sqrt(head_dim)`), then `softcap * tanh(s / softcap)`,
//! then mask and causal, then `+ bias`. Causal is aligned bottom-right: row `i` attends to
//! column `j` iff `j <= i + seq_kv - seq_q`. With seq_q = 3, seq_kv = 5:
//! ```text
//!     j: 0 1 2 3 4
//! i=0    x x x . .      x = attended, . = masked
//! i=1    x x x x .
//! i=2    x x x x x
//! ```
pub mod matrix;
pub mod mma;
pub mod planned;
pub mod portable;
mod unit_rows;

use cubecl::prelude::*;

use crate::config::{FlashConfig, ForwardPath, MMA_CHUNK};
use crate::error::FlashError;
use crate::heuristics::{ForwardPlan, plan_forward, planning_properties};
use crate::primitives::score::{ScoreOptions, ScoreParamsLaunch, ScoreTensors};
use crate::problem::{AttentionProblem, FloatKind, MaskKind};

/// The tensors of one forward launch. `o` and `lse` are pre-allocated by the caller and fully
/// overwritten.
pub struct ForwardTensors<R: Runtime> {
    pub q: TensorBinding<R>,
    pub k: TensorBinding<R>,
    pub v: TensorBinding<R>,
    /// Bool mask, `true` (nonzero) = masked; element type given by `AttentionProblem::mask`.
    pub mask: Option<TensorBinding<R>>,
    /// Additive bias in the dtype of q, added after masking.
    pub bias: Option<TensorBinding<R>>,
    pub o: TensorBinding<R>,
    pub lse: TensorBinding<R>,
}

/// What was launched, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct ForwardLaunch {
    pub path: ForwardPath,
    pub config: FlashConfig,
    /// Why this path and these block sizes (from the heuristics).
    pub reason: String,
}

/// Decides, without launching, whether the kernels run `problem` on `client` and how.
/// The Burn side calls this before choosing between the kernels and its fallback.
pub fn plan<R: Runtime>(
    client: &ComputeClient<R>,
    problem: &AttentionProblem,
) -> Result<ForwardPlan, FlashError> {
    plan_forward(
        &planning_properties(client.properties(), R::name(client)),
        problem,
        None,
    )
}

/// Runs the FlashAttention-2 forward pass, path chosen by the heuristics.
///
/// Writes `o [batch, num_heads, seq_q, val_dim]` (dtype of q) and
/// `lse [batch, num_heads, seq_q]` (f32, natural log of `sum_j exp(s_ij)`).
///
/// # Important
///
/// - The lse of a fully masked row is `f32::MAX` (standing for `+inf`, which WGSL cannot
///   emit), so `exp(s - lse) = 0` for every finite `s`; its output row is 0.
/// - `problem` must describe the tensors (shapes are checked, contents are not).
/// - Launches are asynchronous: read the outputs through the client.
pub fn flash_attention_forward<R: Runtime>(
    client: &ComputeClient<R>,
    problem: &AttentionProblem,
    tensors: ForwardTensors<R>,
) -> Result<ForwardLaunch, FlashError> {
    flash_attention_forward_on(client, problem, tensors, None)
}

/// [`flash_attention_forward`] with the path forced (`None` = let the heuristics choose).
/// Forcing [`ForwardPath::Matrix`] on a device without cmma for the dtype is an error.
pub fn flash_attention_forward_on<R: Runtime>(
    client: &ComputeClient<R>,
    problem: &AttentionProblem,
    tensors: ForwardTensors<R>,
    path: Option<ForwardPath>,
) -> Result<ForwardLaunch, FlashError> {
    check_shapes(problem, &tensors)?;
    let props = planning_properties(client.properties(), R::name(client));
    let ForwardPlan { config, mut reason } = plan_forward(&props, problem, path)?;
    // The mma path loads rows in 16-byte chunks; views that do not allow it (a strided last
    // dimension, an odd offset) take the matrix path, which reads any strides.
    let chunked = chunked_rows(problem.dtype, &[&tensors.q, &tensors.k, &tensors.v]);
    let config = match (config.path, chunked, path) {
        (ForwardPath::Mma, false, None) => {
            let plan = plan_forward(&props, problem, Some(ForwardPath::Matrix))?;
            reason = format!(
                "matrix path (q, k, v rows are not contiguous 16-byte chunks, which the mma path \
                 loads); {}",
                plan.reason
            );
            plan.config
        }
        (ForwardPath::Mma, false, Some(_)) => {
            return Err(FlashError::Device(
                "the mma path was forced but q, k, v rows are not contiguous 16-byte chunks".into(),
            ));
        }
        _ => config,
    };
    let params = ScoreParamsLaunch::new(
        problem.scale as f32,
        problem.softcap.unwrap_or(1.0) as f32,
        problem.seq_q as u32,
        problem.seq_kv as u32,
    );
    let cube_count = CubeCount::Static(
        problem.seq_q.div_ceil(config.block_q as usize) as u32,
        problem.heads_total() as u32,
        1,
    );
    let launch = Launch {
        client,
        config,
        params,
        cube_count,
    };
    match problem.dtype {
        FloatKind::F16 => launch.with_mask::<half::f16>(problem, tensors),
        FloatKind::BF16 => launch.with_mask::<half::bf16>(problem, tensors),
        FloatKind::F32 => launch.with_mask::<f32>(problem, tensors),
    }
    Ok(ForwardLaunch {
        path: config.path,
        config,
        reason,
    })
}

/// The typed kernel arguments, in kernel order.
pub(crate) struct ForwardArgs<R: Runtime> {
    pub q: TensorArg<R>,
    pub k: TensorArg<R>,
    pub v: TensorArg<R>,
    pub mask: TensorArg<R>,
    pub bias: TensorArg<R>,
    pub o: TensorArg<R>,
    pub lse: TensorArg<R>,
}

struct Launch<'a, R: Runtime> {
    client: &'a ComputeClient<R>,
    config: FlashConfig,
    params: ScoreParamsLaunch<R>,
    cube_count: CubeCount,
}

impl<R: Runtime> Launch<'_, R> {
    /// Dispatches on the mask element type. Without a mask, a 1-element u32 stand-in is bound
    /// (the kernel never reads it: `has_mask` is comptime false).
    fn with_mask<F: Float>(self, problem: &AttentionProblem, tensors: ForwardTensors<R>) {
        match problem.mask {
            Some(MaskKind::U8) => self.run::<F, u8>(tensors),
            Some(MaskKind::U32) | None => self.run::<F, u32>(tensors),
        }
    }

    fn run<F: Float, M: Int>(self, tensors: ForwardTensors<R>) {
        let stand_in = || {
            let handle = self.client.create_from_slice(u32::as_bytes(&[0u32]));
            // SAFETY: a 1-element tensor with 1 element of storage.
            unsafe { TensorArg::from_raw_parts(handle, [0, 0, 0, 0].into(), [1, 1, 1, 1].into()) }
        };
        let args = ForwardArgs {
            mask: tensors
                .mask
                .map_or_else(stand_in, TensorBinding::into_tensor_arg),
            // Without a bias, q is bound again in its place (same element type, never read).
            bias: tensors
                .bias
                .unwrap_or_else(|| tensors.q.clone())
                .into_tensor_arg(),
            q: tensors.q.into_tensor_arg(),
            k: tensors.k.into_tensor_arg(),
            v: tensors.v.into_tensor_arg(),
            o: tensors.o.into_tensor_arg(),
            lse: tensors.lse.into_tensor_arg(),
        };
        match self.config.path {
            ForwardPath::Portable => portable::launch::<R, F, M>(
                self.client,
                args,
                self.params,
                self.config,
                self.cube_count,
            ),
            ForwardPath::Matrix => matrix::launch::<R, F, M>(
                self.client,
                args,
                self.params,
                self.config,
                self.cube_count,
            ),
            ForwardPath::Mma => mma::launch::<R, F, M>(
                self.client,
                args,
                self.params,
                self.config,
                self.cube_count,
                MMA_CHUNK as usize,
            ),
        }
    }
}

/// Whether every tensor can be read in chunks of [`MMA_CHUNK`] elements (what the mma paths
/// load).
pub(crate) fn chunked_rows<R: Runtime>(dtype: FloatKind, tensors: &[&TensorBinding<R>]) -> bool {
    rows_in_vectors(dtype, MMA_CHUNK as usize, tensors)
}

/// Whether every tensor can be read in vectors of `chunk` elements: contiguous rows of a whole
/// number of vectors, every other stride and the offset multiples of a vector.
pub(crate) fn rows_in_vectors<R: Runtime>(
    dtype: FloatKind,
    chunk: usize,
    tensors: &[&TensorBinding<R>],
) -> bool {
    let chunk_bytes = (chunk * dtype.size()) as u64;
    tensors.iter().all(|t| {
        let strides = t.strides.as_ref();
        strides.len() == 4
            && strides[3] == 1
            && t.shape.as_ref()[3] % chunk == 0
            && strides[..3].iter().all(|s| s % chunk == 0)
            && t.handle.offset_start.unwrap_or(0) % chunk_bytes == 0
    })
}

/// A tensor's name, its binding (if given) and the shape the problem implies.
type ExpectedShape<'a, R> = (&'static str, Option<&'a TensorBinding<R>>, Vec<usize>);

/// Checks every tensor's shape against the problem (the kernels trust them).
fn check_shapes<R: Runtime>(
    problem: &AttentionProblem,
    tensors: &ForwardTensors<R>,
) -> Result<(), FlashError> {
    let p = problem;
    let (b, h) = (p.batch, p.num_heads);
    let expected: [ExpectedShape<R>; 7] = [
        ("query", Some(&tensors.q), vec![b, h, p.seq_q, p.head_dim]),
        ("key", Some(&tensors.k), vec![b, h, p.seq_kv, p.head_dim]),
        ("value", Some(&tensors.v), vec![b, h, p.seq_kv, p.val_dim]),
        ("mask", tensors.mask.as_ref(), vec![b, h, p.seq_q, p.seq_kv]),
        (
            "attn_bias",
            tensors.bias.as_ref(),
            vec![b, h, p.seq_q, p.seq_kv],
        ),
        ("output", Some(&tensors.o), vec![b, h, p.seq_q, p.val_dim]),
        ("lse", Some(&tensors.lse), vec![b, h, p.seq_q]),
    ];
    for (what, binding, shape) in expected {
        if let Some(binding) = binding
            && binding.shape.as_ref() != shape.as_slice()
        {
            return Err(FlashError::ShapeMismatch {
                what,
                detail: format!("expected {shape:?}, got {:?}", binding.shape.as_ref()),
            });
        }
        if let Some(binding) = binding
            && binding.strides.len() != shape.len()
        {
            return Err(FlashError::ShapeMismatch {
                what,
                detail: format!(
                    "{} strides for a rank-{} tensor",
                    binding.strides.len(),
                    shape.len()
                ),
            });
        }
    }
    if tensors.mask.is_some() != p.mask.is_some() || tensors.bias.is_some() != p.has_bias {
        return Err(FlashError::ShapeMismatch {
            what: "optional tensors",
            detail: format!(
                "problem says mask {:?}, bias {}; got mask {}, bias {}",
                p.mask,
                p.has_bias,
                tensors.mask.is_some(),
                tensors.bias.is_some()
            ),
        });
    }
    Ok(())
}

/// Base offsets and strides of the mask and bias for one (batch, head); zeros when absent.
#[cube]
pub(crate) fn score_tensors<F: Float, M: Int>(
    mask: &Tensor<M>,
    bias: &Tensor<F>,
    batch: u32,
    head: u32,
    #[comptime] options: ScoreOptions,
) -> ScoreTensors {
    let mut tensors = ScoreTensors {
        mask_base: 0,
        mask_row_stride: 0,
        mask_col_stride: 0,
        bias_base: 0,
        bias_row_stride: 0,
        bias_col_stride: 0,
    };
    if comptime!(options.has_mask) {
        tensors.mask_base = batch as usize * mask.stride(0) + head as usize * mask.stride(1);
        tensors.mask_row_stride = mask.stride(2);
        tensors.mask_col_stride = mask.stride(3);
    }
    if comptime!(options.has_bias) {
        tensors.bias_base = batch as usize * bias.stride(0) + head as usize * bias.stride(1);
        tensors.bias_row_stride = bias.stride(2);
        tensors.bias_col_stride = bias.stride(3);
    }
    tensors
}
