//! The forward launched with a plan made for other device properties than the client's: how
//! `tests/wave64.rs` runs, on the test device, what an MI300X would run (wave64, 64 KiB of LDS).
use cubecl::prelude::*;

use crate::config::ForwardPath;
use crate::error::FlashError;
use crate::heuristics::ForwardPlan;
use crate::primitives::score::ScoreParamsLaunch;
use crate::problem::{AttentionProblem, FloatKind};

use super::{ForwardLaunch, ForwardTensors, Launch, check_shapes, chunked_rows};

/// Runs the forward pass with `plan` (from [`crate::heuristics::plan_forward`] on any device
/// properties) instead of the plan of `client`'s own properties.
///
/// # Important
///
/// - `plan` must be for `problem` (dims and logit options are checked) and must fit the
///   client's shared memory and cube size (checked).
/// - The matrix path needs cmma for the dtype on the client (not checked: the launch fails).
/// - A plan for a plane size larger than the client's runs each plane's share of the cube on
///   several hardware planes: on a 32-wide device, a wave64 matrix plan has two warps compute
///   the same 16-row fragments and store the same values, which stays correct and exercises
///   the kernels' wave64 index arithmetic.
pub fn flash_attention_forward_planned<R: Runtime>(
    client: &ComputeClient<R>,
    problem: &AttentionProblem,
    tensors: ForwardTensors<R>,
    plan: ForwardPlan,
) -> Result<ForwardLaunch, FlashError> {
    problem.validate()?;
    check_shapes(problem, &tensors)?;
    let ForwardPlan { config, reason } = plan;
    let for_problem = config.head_dim as usize == problem.head_dim
        && config.val_dim as usize == problem.val_dim
        && config.elem_bytes as usize == problem.dtype.size()
        && config.score == problem.score_options();
    if !for_problem {
        return Err(FlashError::Device(format!(
            "the plan {config:?} is not for {problem:?}"
        )));
    }
    let hardware = &client.properties().hardware;
    if config.shared_memory_bytes() > hardware.max_shared_memory_size
        || config.units() > hardware.max_units_per_cube
    {
        return Err(FlashError::Device(format!(
            "the plan needs {} bytes of shared memory and {} units per cube; the device has {} and {}",
            config.shared_memory_bytes(),
            config.units(),
            hardware.max_shared_memory_size,
            hardware.max_units_per_cube
        )));
    }
    if config.path == ForwardPath::Mma
        && !chunked_rows(problem.dtype, &[&tensors.q, &tensors.k, &tensors.v])
    {
        return Err(FlashError::Device(
            "the mma plan needs q, k, v rows in contiguous 16-byte chunks".into(),
        ));
    }
    let launch = Launch {
        client,
        config,
        params: ScoreParamsLaunch::new(
            problem.scale as f32,
            problem.softcap.unwrap_or(1.0) as f32,
            problem.seq_q as u32,
            problem.seq_kv as u32,
        ),
        cube_count: CubeCount::Static(
            problem.seq_q.div_ceil(config.block_q as usize) as u32,
            problem.heads_total() as u32,
            1,
        ),
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
