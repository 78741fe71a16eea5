//! Launching the mma dK/dV kernel ([`super::dkdv`]): the two-kernel backward's and the one
//! pass's, with the config's way of streaming the query blocks.
use cubecl::prelude::*;

use crate::backward::GradientInputs;
use crate::backward::config::{BackwardKernel, MmaGradientConfig};
use crate::backward::dq_sink::{AtomicDq, AtomicDqPairs, AtomicDqQuads, DqSink, NoDq, no_accumulator};
use crate::config::{MATRIX_TILE, MMA_CHUNK};
use crate::plan::rows_in_vectors;
use crate::primitives::mma::LANES;
use crate::primitives::pair_stream::{AsyncCopy, PairStream, Staged};
use crate::primitives::score::score_params;
use crate::problem::AttentionProblem;

use super::dkdv::dkdv_mma_kernel;

/// Launches the mma dK/dV kernel (a config without [`MmaGradientConfig::atomic_dq`]). The
/// caller has checked the shapes and that q, k, v, d_out load in chunks of [`MMA_CHUNK`]
/// elements.
pub fn flash_attention_backward_dkdv_mma<R: Runtime, F: Float, M: Int>(
    client: &ComputeClient<R>,
    problem: &AttentionProblem,
    inputs: GradientInputs<R>,
    dk: TensorBinding<R>,
    dv: TensorBinding<R>,
    config: MmaGradientConfig,
) {
    debug_assert!(
        !config.atomic_dq,
        "the one-pass config takes launch_dkdv_dq_mma"
    );
    let dq_acc = no_accumulator(client);
    launch_stream::<R, F, M, NoDq>(client, problem, inputs, (dk, dv, dq_acc), config)
}

/// The one-pass mma dK/dV kernel (`config.atomic_dq`): dK and dV as
/// [`flash_attention_backward_dkdv_mma`], and every block pair's `dS K` added to `dq_acc`
/// (f32, zeroed, contiguous `[batch, num_heads, seq_q, head_dim]`, without the scale) by atomic
/// adds, `config.dq_width` adjacent columns per request. The device must register f32 atomic
/// add of that width (the planner plans by it; the launcher checks it,
/// [`crate::checks::check_atomics`]).
pub(crate) fn launch_dkdv_dq_mma<R: Runtime, F: Float, M: Int>(
    client: &ComputeClient<R>,
    problem: &AttentionProblem,
    inputs: GradientInputs<R>,
    (dk, dv, dq_acc): (TensorBinding<R>, TensorBinding<R>, TensorBinding<R>),
    config: MmaGradientConfig,
) {
    debug_assert!(
        config.atomic_dq,
        "a two-kernel config takes flash_attention_backward_dkdv_mma"
    );
    let dq_acc = dq_acc.into_tensor_arg();
    let outputs = (dk, dv, dq_acc);
    match config.dq_width {
        4 => launch_stream::<R, F, M, AtomicDqQuads>(client, problem, inputs, outputs, config),
        2 => launch_stream::<R, F, M, AtomicDqPairs>(client, problem, inputs, outputs, config),
        _ => launch_stream::<R, F, M, AtomicDq>(client, problem, inputs, outputs, config),
    }
}

/// The kernel with the config's way of streaming the query blocks.
fn launch_stream<R: Runtime, F: Float, M: Int, D: DqSink>(
    client: &ComputeClient<R>,
    problem: &AttentionProblem,
    inputs: GradientInputs<R>,
    outputs: (TensorBinding<R>, TensorBinding<R>, TensorArg<R>),
    config: MmaGradientConfig,
) {
    debug_assert_eq!(config.kernel, BackwardKernel::KeyValue);
    if config.async_inner {
        launch::<R, F, M, AsyncCopy, D>(client, problem, inputs, outputs, config)
    } else {
        launch::<R, F, M, Staged, D>(client, problem, inputs, outputs, config)
    }
}

fn launch<R: Runtime, F: Float, M: Int, S: PairStream, D: DqSink>(
    client: &ComputeClient<R>,
    problem: &AttentionProblem,
    inputs: GradientInputs<R>,
    (dk, dv, dq_acc): (TensorBinding<R>, TensorBinding<R>, TensorArg<R>),
    config: MmaGradientConfig,
) {
    let kv_blocks = problem.seq_kv.div_ceil(config.block_kv as usize) as u32;
    // dK and dV in 16-byte chunks only where their rows are contiguous whole chunks (tensors
    // the library allocates; a caller's strided view gets the element-wise stores).
    let chunked = rows_in_vectors(problem.dtype, MMA_CHUNK as usize, &[&dk, &dv]);
    let config = MmaGradientConfig { chunked_output: config.chunked_output && chunked, ..config };
    let args = inputs.into_args(client);
    // SAFETY: shapes, strides and chunking were validated against the problem; global reads
    // are bounds-checked per row, writes against seq_kv and the dims (dq_acc: rows against
    // seq_q, columns against head_dim; only touched by the one-pass config).
    unsafe {
        dkdv_mma_kernel::launch_unchecked::<F, M, S, D, R>(
            client,
            CubeCount::Static(kv_blocks, problem.heads_total() as u32, 1),
            CubeDim::new_2d(LANES, config.block_kv / MATRIX_TILE),
            MMA_CHUNK as usize,
            args.q,
            args.k,
            args.v,
            args.d_out,
            args.lse,
            args.delta,
            args.mask,
            args.bias,
            args.slopes,
            dk.into_tensor_arg(),
            dv.into_tensor_arg(),
            dq_acc,
            score_params(problem),
            config,
        )
    }
}
