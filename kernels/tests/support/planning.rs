//! Planning for the test binaries: plans through `burn_flash_attn_kernels::plan` with the
//! binaries' own tuning flags, `BURN_FLASH_MMA` and `BURN_FLASH_MMA_BWD`
//! (`planes,rows[,plane_rows[,buffers[,async]]]`: the device suites run the mma tests at
//! non-default blocks with them). The library reads no environment: only these tests do.
#![allow(dead_code)]

use burn_flash_attn_kernels::plan::{
    self, BackwardPlan, DeviceCaps, ForwardPlan, GradientPlan, Layout, MmaBlocks, Tuning,
};
use burn_flash_attn_kernels::backward::BackwardKernel;
use burn_flash_attn_kernels::{AttentionProblem, FlashError, FloatKind, ForwardPath};
use cubecl::ir::DeviceProperties;

/// The runtime name the simulated devices are planned under (only HIP names change a plan).
pub const SIMULATED: &str = "simulated";

/// The blocks a tuning flag names, if set; an invalid value fails the test run.
fn blocks_flag(var: &str) -> Option<MmaBlocks> {
    let value = std::env::var(var).ok()?;
    match value.parse() {
        Ok(blocks) => Some(blocks),
        Err(error) => panic!("{var}: {error}"),
    }
}

/// The tuning of this test run: the mma blocks of `BURN_FLASH_MMA` / `BURN_FLASH_MMA_BWD`, the
/// backward's dQ accumulation of `BURN_FLASH_DQ` (`kernel` or `atomic`: the suites run on the
/// one-pass backward wherever it can run with `atomic`) and its atomic width of
/// `BURN_FLASH_DQ_WIDTH` (1, 2 or 4); the gradient kernels' path of `BURN_FLASH_BWD_PATH`
/// (`portable`, `mma` or `matrix`: a preference, see `Tuning::backward_path`) and, with
/// `BURN_FLASH_MATRIX_STAND_IN=1`, the matrix kernels' scalar stand-in where the device has no
/// cmma (the matrix kernels on lavapipe), with `BURN_FLASH_MATRIX_F32_TILES=1` on f32 tiles, with
/// `BURN_FLASH_MATRIX_VECTORS=false` reading their inputs element by element (not in 16-byte
/// vectors where they can, the default), with `BURN_FLASH_MATRIX_PREFETCH=true` fetching each
/// streamed block one block ahead (off by default), with `BURN_FLASH_MATRIX_STAGGERED=false`
/// not staggering the matrix forward's rows 8-15 (on by default), with
/// `BURN_FLASH_MATRIX_PLANE_SOFTMAX=false` keeping the matrix kernels' softmax in shared memory
/// where the device has plane operations (in each plane by default), with
/// `BURN_FLASH_MATRIX_WIDE_SCORES=false` padding the matrix forward's S rows by 16 bytes, not 32
/// with its rows staggered in four groups (the default), with `BURN_FLASH_MATRIX_PLANE_ROWS=32`
/// 32 query rows a plane in the matrix forward (16 by default), with `BURN_FLASH_MATRIX_PLANES=N`
/// N planes a cube in the matrix forward (the most that fit by default), with
/// `BURN_FLASH_MATRIX_SHARED_STAGE=true` its S and O staging in one tile (off by default); the
/// forward's path of `BURN_FLASH_FWD_PATH` (forced, where a case does not force its own: the
/// suite on one path); the mma kernels' head-dim products rolled or unrolled in the source with
/// `BURN_FLASH_ROLLED` (`true` / `false`, `Tuning::rolled_steps`); their streams by `cp.async`
/// or through registers with `BURN_FLASH_ASYNC` (`true` / `false`, `Tuning::async_copy`); the
/// mma forward's Q fragments in registers or re-read from shared memory with
/// `BURN_FLASH_MMA_Q_REGISTERS` (`true` / `false`, `Tuning::forward_q_registers`); its first
/// key/value block started before the query block with `BURN_FLASH_MMA_EARLY_KV` (`true` /
/// `false`, `Tuning::forward_early_kv`); its O written through shared memory with
/// `BURN_FLASH_MMA_CHUNKED_OUTPUT` (`true` / `false`, `Tuning::forward_chunked_output`); the mma
/// gradient kernels' dK, dV and dQ likewise with `BURN_FLASH_MMA_BWD_CHUNKED_OUTPUT`
/// (`Tuning::backward_chunked_output`).
pub fn tuning() -> Tuning {
    let path = parsed_env("BURN_FLASH_BWD_PATH");
    let stand_in = std::env::var("BURN_FLASH_MATRIX_STAND_IN").is_ok_and(|value| value == "1");
    let f32_tiles = std::env::var("BURN_FLASH_MATRIX_F32_TILES").is_ok_and(|value| value == "1");
    let vectors = parsed_env("BURN_FLASH_MATRIX_VECTORS");
    let prefetch = parsed_env("BURN_FLASH_MATRIX_PREFETCH");
    let staggered = parsed_env("BURN_FLASH_MATRIX_STAGGERED");
    let plane_softmax = parsed_env("BURN_FLASH_MATRIX_PLANE_SOFTMAX");
    let wide_scores = parsed_env("BURN_FLASH_MATRIX_WIDE_SCORES");
    let plane_rows = parsed_env("BURN_FLASH_MATRIX_PLANE_ROWS");
    let planes = parsed_env("BURN_FLASH_MATRIX_PLANES");
    let shared_stage = parsed_env("BURN_FLASH_MATRIX_SHARED_STAGE");
    let forward_path = parsed_env("BURN_FLASH_FWD_PATH");
    let dq = parsed_env("BURN_FLASH_DQ");
    let width = parsed_env("BURN_FLASH_DQ_WIDTH");
    let rolled = parsed_env("BURN_FLASH_ROLLED");
    let async_copy = parsed_env("BURN_FLASH_ASYNC");
    let q_registers = parsed_env("BURN_FLASH_MMA_Q_REGISTERS");
    let early_kv = parsed_env("BURN_FLASH_MMA_EARLY_KV");
    let chunked_output = parsed_env("BURN_FLASH_MMA_CHUNKED_OUTPUT");
    let bwd_chunked_output = parsed_env("BURN_FLASH_MMA_BWD_CHUNKED_OUTPUT");
    Tuning::default()
        .with_forward_chunked_output(chunked_output)
        .with_backward_chunked_output(bwd_chunked_output)
        .with_forward_early_kv(early_kv)
        .with_forward_q_registers(q_registers)
        .with_rolled_steps(rolled)
        .with_async_copy(async_copy)
        .with_forward_mma(blocks_flag("BURN_FLASH_MMA"))
        .with_backward_mma(blocks_flag("BURN_FLASH_MMA_BWD"))
        .with_backward_dq(dq)
        .with_backward_dq_width(width)
        .with_backward_path(path)
        .with_matrix_stand_in(stand_in)
        .with_matrix_f32_tiles(f32_tiles)
        .with_matrix_vector_loads(vectors)
        .with_matrix_prefetch(prefetch)
        .with_matrix_staggered(staggered)
        .with_matrix_plane_softmax(plane_softmax)
        .with_matrix_wide_scores(wide_scores)
        .with_matrix_plane_rows(plane_rows)
        .with_matrix_forward_planes(planes)
        .with_matrix_shared_stage(shared_stage)
        .with_forward_path(forward_path)
}

/// The value of environment variable `name`, parsed; a value that does not parse stops the
/// suite with its name.
fn parsed_env<T: std::str::FromStr>(name: &str) -> Option<T>
where
    T::Err: std::fmt::Display,
{
    std::env::var(name).ok().map(|value| match value.parse() {
        Ok(parsed) => parsed,
        Err(error) => panic!("{name}: {error}"),
    })
}

/// The forward's plan on a device with `props`, for chunked rows, `path` forced if given.
pub fn forward_plan(
    props: &DeviceProperties,
    problem: &AttentionProblem,
    path: Option<ForwardPath>,
) -> Result<ForwardPlan, FlashError> {
    forward_plan_for(&DeviceCaps::new(props, SIMULATED), problem, Layout::CHUNKED, path)
}

/// The forward's plan for inputs laid out as `layout`.
pub fn forward_plan_for(
    caps: &DeviceCaps,
    problem: &AttentionProblem,
    layout: Layout,
    path: Option<ForwardPath>,
) -> Result<ForwardPlan, FlashError> {
    let tuning = tuning();
    let path = path.or(tuning.forward_path);
    plan::forward::forward(caps, problem, layout, &tuning.with_forward_path(path))
}

/// The forward's plan for inputs laid out as `layout`, with `tuning` as it is.
pub fn forward_plan_tuned(
    caps: &DeviceCaps,
    problem: &AttentionProblem,
    layout: Layout,
    tuning: &Tuning,
) -> Result<ForwardPlan, FlashError> {
    plan::forward::forward(caps, problem, layout, tuning)
}

/// Both gradient kernels' plans on a device with `props`, for inputs laid out as `layout`.
pub fn backward_plan(
    props: &DeviceProperties,
    problem: &AttentionProblem,
    layout: Layout,
) -> Result<BackwardPlan, FlashError> {
    plan::backward::backward(&DeviceCaps::new(props, SIMULATED), problem, layout, &tuning())
}

/// One gradient kernel's plan on a device with `props`, for chunked rows.
pub fn gradient_plan(
    props: &DeviceProperties,
    problem: &AttentionProblem,
    kernel: BackwardKernel,
) -> Result<GradientPlan, FlashError> {
    gradient_plan_for(&DeviceCaps::new(props, SIMULATED), problem, kernel)
}

/// One gradient kernel's plan on the device `caps` describes, for chunked rows.
pub fn gradient_plan_for(
    caps: &DeviceCaps,
    problem: &AttentionProblem,
    kernel: BackwardKernel,
) -> Result<GradientPlan, FlashError> {
    plan::backward::gradient(caps, problem, Layout::CHUNKED, &tuning(), kernel)
}

/// Plans the forward on `client`'s own device for the tensors' layout, and launches it.
pub fn launch_forward<R: cubecl::Runtime>(
    client: &cubecl::prelude::ComputeClient<R>,
    problem: &AttentionProblem,
    tensors: burn_flash_attn_kernels::ForwardTensors<R>,
) -> Result<ForwardPlan, FlashError> {
    let layout = tensors.layout(problem.dtype);
    let plan = forward_plan_for(&DeviceCaps::of(client), problem, layout, None)?;
    burn_flash_attn_kernels::flash_attention_forward(client, problem, &plan, tensors)?;
    Ok(plan)
}

/// Plans the backward on `client`'s own device for the tensors' layout, and launches it.
pub fn launch_backward<R: cubecl::Runtime>(
    client: &cubecl::prelude::ComputeClient<R>,
    problem: &AttentionProblem,
    tensors: burn_flash_attn_kernels::backward::BackwardTensors<R>,
) -> Result<BackwardPlan, FlashError> {
    launch_backward_with(client, problem, tensors, &tuning())
}

/// [`launch_backward`] with `tuning` instead of the run's.
pub fn launch_backward_with<R: cubecl::Runtime>(
    client: &cubecl::prelude::ComputeClient<R>,
    problem: &AttentionProblem,
    tensors: burn_flash_attn_kernels::backward::BackwardTensors<R>,
    tuning: &Tuning,
) -> Result<BackwardPlan, FlashError> {
    let layout = tensors.layout(problem.dtype);
    let plan = plan::backward::backward(&DeviceCaps::of(client), problem, layout, tuning)?;
    burn_flash_attn_kernels::backward::flash_attention_backward(client, problem, &plan, tensors)?;
    Ok(plan)
}

/// The planner tests' problem: 2 x 8 heads, 1000 causal queries and keys, `head_dim` wide.
pub fn planner_problem(dtype: FloatKind, head_dim: usize) -> AttentionProblem {
    AttentionProblem {
        batch: 2,
        num_heads: 8,
        num_kv_heads: 8,
        seq_q: 1000,
        seq_kv: 1000,
        head_dim,
        val_dim: head_dim,
        dtype,
        scale: AttentionProblem::default_scale(head_dim),
        softcap: None,
        causal: true,
        mask: None,
        has_bias: false,
        quiet_softmax: false,
        window: None,
        alibi: false,
        dropout: None,
    }
}
