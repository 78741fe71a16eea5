//! The compilation arguments of a kernel expanded without a device (the codegen tests, CUDA and
//! HIP): every tensor a plain one (not in place), the score parameters all runtime values.
use burn_flash_attn_kernels::primitives::score::ScoreParamsCompilationArg;
use cubecl::prelude::*;

/// A tensor argument that is not an in-place alias.
pub fn tensor() -> TensorCompilationArg {
    TensorCompilationArg { inplace: None }
}

/// [`burn_flash_attn_kernels::primitives::score::ScoreParams`]' compilation argument.
pub fn score_params() -> ScoreParamsCompilationArg {
    ScoreParamsCompilationArg {
        scale: (),
        softcap: (),
        seq_q: (),
        seq_kv: (),
        window_left: (),
        window_right: (),
        dropout_seed: (),
        dropout_threshold: (),
        dropout_scale: (),
    }
}
