//! The FlashAttention-2 forward pass: `o = softmax(logits(q k^T)) v` and the row log-sum-exp.
//!
//! [`flash_attention_forward`] checks the tensors against the problem and the plan (from
//! [`crate::plan`]), and launches the plan's kernel, one of three:
//! - [`portable`]: scalar tiles in shared memory, runs everywhere (lavapipe, WGPU, HIP bf16, f32);
//! - [`matrix`]: `cmma` fragments where the device registers them for the dtype;
//! - [`mma`]: register-level `mma` with the softmax on the accumulators (CUDA f16/bf16).
//!
//! Shapes (any strides, `true` in the mask = masked):
//! ```text
//! q    [batch, num_heads, seq_q,  head_dim]      k    [batch, num_kv_heads, seq_kv, head_dim]
//! v    [batch, num_kv_heads, seq_kv, val_dim]    o    [batch, num_heads, seq_q,  val_dim]  (dtype of q)
//! mask [batch, num_heads, seq_q,  seq_kv] u8/u32 bias [batch, num_heads, seq_q,  seq_kv] (dtype of q)
//! lse  [batch, num_heads, seq_q] f32             slopes [num_heads] f32 (ALiBi)
//! ```
//! Logits: `s = q·k * scale` (default `1/sqrt(head_dim)`), then `softcap * tanh(s / softcap)`,
//! then mask, causal and the sliding window, then `+ bias` and ALiBi (see
//! [`crate::primitives::score`]). Query head `h` reads key/value head
//! `h / (num_heads / num_kv_heads)` (grouped-query attention, K/V never repeated). Causal is aligned bottom-right: row `i` attends to
//! column `j` iff `j <= i + seq_kv - seq_q`. With seq_q = 3, seq_kv = 5:
//! ```text
//!     j: 0 1 2 3 4
//! i=0    x x x . .      x = attended, . = masked
//! i=1    x x x x .
//! i=2    x x x x x
//! ```
pub mod matrix;
pub mod mma;
pub mod portable;
mod unit_rows;

use cubecl::prelude::*;

use crate::checks::{
    ExpectedShape, Shapes, check_cmma, check_plan_fits, check_plan_for, check_shapes, optional_args,
};
use crate::config::{ForwardConfig, MMA_CHUNK};
use crate::error::FlashError;
use crate::plan::{ForwardPlan, Layout, rows_in_vectors};
use crate::primitives::score::{ScoreParamsLaunch, score_params};
use crate::primitives::tile_io::load_width;
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
    /// ALiBi slopes, f32 `[num_heads]` (present iff `AttentionProblem::alibi`).
    pub slopes: Option<TensorBinding<R>>,
    pub o: TensorBinding<R>,
    pub lse: TensorBinding<R>,
}

impl<R: Runtime> ForwardTensors<R> {
    /// The layout of q, k, v (what the plan must be made for).
    pub fn layout(&self, dtype: FloatKind) -> Layout {
        Layout::of(dtype, &[&self.q, &self.k, &self.v])
    }
}

/// Runs the FlashAttention-2 forward pass that `plan` describes.
///
/// Writes `o [batch, num_heads, seq_q, val_dim]` (dtype of q) and
/// `lse [batch, num_heads, seq_q]` (f32, natural log of `sum_j exp(s_ij)`).
///
/// # Important
///
/// - `plan` comes from [`crate::plan::plan`] (or [`crate::plan::forward::forward`]) for this
///   problem, on any device properties: it is checked to be for the problem, to fit the
///   client's shared memory and cube size, and (mma) that q, k, v rows are 16-byte chunks.
///   Planned for a plane size larger than the client's (the MI300X plans of
///   `tests/wave64.rs`), each plane's share of the cube runs on several hardware planes: on a
///   32-wide device, a wave64 matrix plan has two warps compute the same 16-row fragments and
///   store the same values, which stays correct and exercises the wave64 index arithmetic.
/// - A matrix plan (but its scalar stand-in) needs cmma for its tiles' type on the client: a
///   typed error otherwise.
/// - The lse of a fully masked row is `f32::MAX` (standing for `+inf`, which WGSL cannot
///   emit), so `exp(s - lse) = 0` for every finite `s`; its output row is 0.
/// - `problem` must describe the tensors (shapes are checked, contents are not).
/// - Launches are asynchronous: read the outputs through the client.
pub fn flash_attention_forward<R: Runtime>(
    client: &ComputeClient<R>,
    problem: &AttentionProblem,
    plan: &ForwardPlan,
    tensors: ForwardTensors<R>,
) -> Result<(), FlashError> {
    problem.validate()?;
    let shapes = Shapes::of(problem);
    let expected: [ExpectedShape<R>; 8] = [
        ("query", Some(&tensors.q), shapes.q),
        ("key", Some(&tensors.k), shapes.k),
        ("value", Some(&tensors.v), shapes.v),
        ("mask", tensors.mask.as_ref(), shapes.scores.clone()),
        ("attn_bias", tensors.bias.as_ref(), shapes.scores),
        ("alibi slopes", tensors.slopes.as_ref(), shapes.slopes),
        ("output", Some(&tensors.o), shapes.o),
        ("lse", Some(&tensors.lse), shapes.rows),
    ];
    check_shapes(
        problem,
        &expected,
        tensors.mask.is_some(),
        tensors.bias.is_some(),
    )?;
    let config = plan.config;
    check_plan_for(
        problem,
        plan.dtype,
        config.dims(),
        config.score(),
        config.quiet_softmax(),
        plan,
    )?;
    let layout = tensors.layout(problem.dtype);
    check_plan_fits(
        client,
        config.shared_memory_bytes(),
        config.units(),
        plan.needs_chunked_rows(),
        layout,
    )?;
    if let ForwardConfig::Matrix(matrix) = config
        && !matrix.stand_in
    {
        let tiles = if matrix.f32_tiles { FloatKind::F32 } else { problem.dtype };
        check_cmma(client, tiles, matrix.plane_size)?;
    }
    // The matrix kernel reads q, k, v in 16-byte vectors where it can.
    let matrix_width = match config {
        ForwardConfig::Matrix(matrix) => {
            let rows = [&tensors.q, &tensors.k, &tensors.v];
            load_width(client, problem.dtype, matrix.vector_loads, &rows)
        }
        _ => 1,
    };
    // The mma forward writes O in 16-byte chunks only where o's rows are contiguous whole
    // chunks (a tensor Burn allocates; a caller's strided view gets the element-wise stores).
    let config = match config {
        ForwardConfig::Mma(mut mma) => {
            mma.chunked_output &=
                rows_in_vectors(problem.dtype, MMA_CHUNK as usize, &[&tensors.o]);
            ForwardConfig::Mma(mma)
        }
        other => other,
    };
    let launch = Launch {
        client,
        config,
        matrix_width,
        params: score_params(problem),
        cube_count: CubeCount::Static(
            problem.seq_q.div_ceil(config.block_q() as usize) as u32,
            problem.heads_total() as u32,
            1,
        ),
    };
    match problem.dtype {
        FloatKind::F16 => launch.with_mask::<half::f16>(problem, tensors),
        FloatKind::BF16 => launch.with_mask::<half::bf16>(problem, tensors),
        FloatKind::F32 => launch.with_mask::<f32>(problem, tensors),
    }
    Ok(())
}

/// The typed kernel arguments, in kernel order.
pub(crate) struct ForwardArgs<R: Runtime> {
    pub q: TensorArg<R>,
    pub k: TensorArg<R>,
    pub v: TensorArg<R>,
    pub mask: TensorArg<R>,
    pub bias: TensorArg<R>,
    pub slopes: TensorArg<R>,
    pub o: TensorArg<R>,
    pub lse: TensorArg<R>,
}

struct Launch<'a, R: Runtime> {
    client: &'a ComputeClient<R>,
    config: ForwardConfig,
    /// Elements per global read of the matrix kernel's q, k, v tiles.
    matrix_width: usize,
    params: ScoreParamsLaunch<R>,
    cube_count: CubeCount,
}

impl<R: Runtime> Launch<'_, R> {
    /// Dispatches on the mask element type (u32 when there is none: its stand-in is u32).
    fn with_mask<F: Float>(self, problem: &AttentionProblem, tensors: ForwardTensors<R>) {
        match problem.mask {
            Some(MaskKind::U8) => self.run::<F, u8>(tensors),
            Some(MaskKind::U32) | None => self.run::<F, u32>(tensors),
        }
    }

    fn run<F: Float, M: Int>(self, tensors: ForwardTensors<R>) {
        let optional = optional_args(
            self.client,
            tensors.mask,
            tensors.bias,
            tensors.slopes,
            &tensors.q,
        );
        let args = ForwardArgs {
            mask: optional.mask,
            bias: optional.bias,
            slopes: optional.slopes,
            q: tensors.q.into_tensor_arg(),
            k: tensors.k.into_tensor_arg(),
            v: tensors.v.into_tensor_arg(),
            o: tensors.o.into_tensor_arg(),
            lse: tensors.lse.into_tensor_arg(),
        };
        let (client, params, config, cube_count, width) =
            (self.client, self.params, self.config, self.cube_count, self.matrix_width);
        match config {
            ForwardConfig::Portable(config) => {
                portable::launch::<R, F, M>(client, args, params, config, cube_count)
            }
            ForwardConfig::Matrix(config) => {
                matrix::launch::<R, F, M>(client, args, params, config, cube_count, width)
            }
            ForwardConfig::Mma(config) => {
                mma::launch::<R, F, M>(client, args, params, config, cube_count, MMA_CHUNK as usize)
            }
        }
    }
}
