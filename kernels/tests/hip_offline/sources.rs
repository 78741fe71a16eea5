//! The HIP source of each kernel variant (`variants.rs`), compiled for gfx942 with the
//! kernels' own launch types on the offline client.
use crate::support::kernel_args::{score_params, tensor};

use burn_flash_attn_kernels::backward::config::{
    BackwardKernel, GradientConfig, MatrixGradientConfig, PortableGradientConfig,
};
use burn_flash_attn_kernels::backward::dq_sink::{AtomicDq, DqSink, NoDq};
use burn_flash_attn_kernels::backward::dkdv::flash_attention_backward_dkdv_kernel::FlashAttentionBackwardDkdvKernel;
use burn_flash_attn_kernels::backward::dq::flash_attention_backward_dq_kernel::FlashAttentionBackwardDqKernel;
use burn_flash_attn_kernels::backward::matrix::matrix_dkdv_kernel::MatrixDkdvKernel;
use burn_flash_attn_kernels::backward::matrix::matrix_dq_kernel::MatrixDqKernel;
use burn_flash_attn_kernels::primitives::tile_mma::Cmma;
use burn_flash_attn_kernels::backward::preprocess::flash_attention_backward_preprocess_kernel::FlashAttentionBackwardPreprocessKernel;
use burn_flash_attn_kernels::forward::matrix::flash_attention_forward_matrix_kernel::FlashAttentionForwardMatrixKernel;
use burn_flash_attn_kernels::primitives::tile_io::LOAD_BYTES;
use burn_flash_attn_kernels::forward::portable::flash_attention_forward_kernel::FlashAttentionForwardKernel;
use burn_flash_attn_kernels::{FloatKind, ForwardConfig, MaskKind};
use cubecl::ir::AddressType;
use cubecl::prelude::*;

use super::variants::{KernelConfig, Variant};
use super::{GFX942, GFX942_LOAD_BYTES, HipSource, MatrixCores, OfflineHip};

/// The HIP source of `variant`, compiled for gfx942 with the matrix-core compiler `M`.
pub fn hip_source<M: MatrixCores>(
    client: &ComputeClient<OfflineHip<M>>,
    variant: &Variant,
) -> Result<HipSource, String> {
    use FloatKind::{BF16, F16, F32};
    use MaskKind::{U8, U32};
    match (variant.dtype, variant.mask) {
        (F16, U8) => typed::<M, half::f16, u8>(client, variant),
        (F16, U32) => typed::<M, half::f16, u32>(client, variant),
        (BF16, U8) => typed::<M, half::bf16, u8>(client, variant),
        (BF16, U32) => typed::<M, half::bf16, u32>(client, variant),
        (F32, U8) => typed::<M, f32, u8>(client, variant),
        (F32, U32) => typed::<M, f32, u32>(client, variant),
    }
}

fn typed<M: MatrixCores, F: Float, K: Int>(
    client: &ComputeClient<OfflineHip<M>>,
    variant: &Variant,
) -> Result<HipSource, String> {
    type R<M> = OfflineHip<M>;
    let client = client.clone();
    let settings = || {
        KernelSettings::default()
            .cube_dim(variant.cube_dim())
            .address_type(AddressType::U32)
    };
    match variant.kernel {
        KernelConfig::Forward(ForwardConfig::Portable(config)) => {
            let kernel = FlashAttentionForwardKernel::<F, K, R<M>>::new(
                settings(),
                client,
                tensor(),
                tensor(),
                tensor(),
                tensor(),
                tensor(),
                tensor(),
                tensor(),
                tensor(),
                score_params(),
                config,
            );
            R::<M>::hip_source(kernel, GFX942)
        }
        KernelConfig::Forward(ForwardConfig::Matrix(config)) if config.f32_tiles => {
            // bf16 staged as f32 tiles on the f32 cmma (rocWMMA's bf16 fragments do not compile).
            matrix_forward::<M, F, f32, K>(settings(), client, config)
        }
        KernelConfig::Forward(ForwardConfig::Matrix(config)) => {
            matrix_forward::<M, F, F, K>(settings(), client, config)
        }
        KernelConfig::Forward(config) => Err(format!(
            "the {} forward path has no HIP generator here",
            config.path().name()
        )),
        KernelConfig::Preprocess(shape) => {
            let kernel = FlashAttentionBackwardPreprocessKernel::<F, R<M>>::new(
                settings(),
                client,
                tensor(),
                tensor(),
                tensor(),
                (),
                GFX942_LOAD_BYTES / std::mem::size_of::<F>(),
                shape.rows,
                shape.row_chunks,
            );
            R::<M>::hip_source(kernel, GFX942)
        }
        KernelConfig::Backward(GradientConfig::Mma(_)) => {
            Err("the mma backward path has no HIP generator here".to_string())
        }
        // bf16 staged as f32 tiles on the f32 cmma (rocWMMA's bf16 fragments do not compile).
        KernelConfig::Backward(GradientConfig::Matrix(config)) => match (config.f32_tiles, config.atomic_dq) {
            (true, true) => matrix_backward::<M, F, f32, K, AtomicDq>(settings(), client, config),
            (true, false) => matrix_backward::<M, F, f32, K, NoDq>(settings(), client, config),
            (false, true) => matrix_backward::<M, F, F, K, AtomicDq>(settings(), client, config),
            (false, false) => matrix_backward::<M, F, F, K, NoDq>(settings(), client, config),
        },
        KernelConfig::Backward(GradientConfig::Portable(config)) if config.kernel == BackwardKernel::KeyValue => {
            // Which accumulator the kernel binds is a type (`DqSink`): one variant each.
            fn dkdv<F: Float, K: Int, D: DqSink, M: MatrixCores>(
                settings: KernelSettings,
                client: ComputeClient<OfflineHip<M>>,
                config: PortableGradientConfig,
            ) -> Result<HipSource, String> {
                let kernel = FlashAttentionBackwardDkdvKernel::<F, K, D, OfflineHip<M>>::new(
                    settings,
                    client,
                    tensor(),
                    tensor(),
                    tensor(),
                    tensor(),
                    tensor(),
                    tensor(),
                    tensor(),
                    tensor(),
                    tensor(),
                    tensor(),
                    tensor(),
                    tensor(),
                    score_params(),
                    (),
                    config,
                );
                OfflineHip::<M>::hip_source(kernel, GFX942)
            }
            if config.atomic_dq {
                dkdv::<F, K, AtomicDq, M>(settings(), client, config)
            } else {
                dkdv::<F, K, NoDq, M>(settings(), client, config)
            }
        }
        KernelConfig::Backward(GradientConfig::Portable(config)) => {
            let kernel = FlashAttentionBackwardDqKernel::<F, K, R<M>>::new(
                settings(),
                client,
                tensor(),
                tensor(),
                tensor(),
                tensor(),
                tensor(),
                tensor(),
                tensor(),
                tensor(),
                tensor(),
                tensor(),
                score_params(),
                (),
                config,
            );
            R::<M>::hip_source(kernel, GFX942)
        }
    }
}

/// The width (elements) the matrix kernels read q, k, v, d_out in on gfx942 when their rows are
/// contiguous, as Burn's tensors are (`tile_io::load_width`, `Tuning::matrix_vector_loads` on
/// by default): 16-byte vectors where both dims are whole vectors, element by element
/// otherwise (as strided views always are).
fn load_width<F: Float>(head_dim: u32, val_dim: u32) -> usize {
    let width = LOAD_BYTES / size_of::<F>();
    let whole = [head_dim, val_dim].iter().all(|&dim| (dim as usize).is_multiple_of(width));
    if whole { width } else { 1 }
}

/// The HIP source of the matrix forward kernel with tiles of type `E`.
fn matrix_forward<M: MatrixCores, F: Float, E: Float, K: Int>(
    settings: KernelSettings,
    client: ComputeClient<OfflineHip<M>>,
    config: burn_flash_attn_kernels::config::MatrixConfig,
) -> Result<HipSource, String> {
    let kernel = FlashAttentionForwardMatrixKernel::<F, E, K, Cmma, OfflineHip<M>>::new(
        settings,
        client,
        tensor(),
        tensor(),
        tensor(),
        tensor(),
        tensor(),
        tensor(),
        tensor(),
        tensor(),
        score_params(),
        load_width::<F>(config.head_dim, config.val_dim),
        config,
    );
    OfflineHip::<M>::hip_source(kernel, GFX942)
}

/// The HIP source of a matrix gradient kernel with tiles of type `E` (the dK/dV kernel's dQ
/// going to `D`).
fn matrix_backward<M: MatrixCores, F: Float, E: Float, K: Int, D: DqSink>(
    settings: KernelSettings,
    client: ComputeClient<OfflineHip<M>>,
    config: MatrixGradientConfig,
) -> Result<HipSource, String> {
    if config.kernel == BackwardKernel::KeyValue {
        let kernel = MatrixDkdvKernel::<F, E, K, Cmma, D, OfflineHip<M>>::new(
            settings,
            client,
            tensor(),
            tensor(),
            tensor(),
            tensor(),
            tensor(),
            tensor(),
            tensor(),
            tensor(),
            tensor(),
            tensor(),
            tensor(),
            tensor(),
            score_params(),
            load_width::<F>(config.head_dim, config.val_dim),
            config,
        );
        OfflineHip::<M>::hip_source(kernel, GFX942)
    } else {
        let kernel = MatrixDqKernel::<F, E, K, Cmma, OfflineHip<M>>::new(
            settings,
            client,
            tensor(),
            tensor(),
            tensor(),
            tensor(),
            tensor(),
            tensor(),
            tensor(),
            tensor(),
            tensor(),
            tensor(),
            score_params(),
            load_width::<F>(config.head_dim, config.val_dim),
            config,
        );
        OfflineHip::<M>::hip_source(kernel, GFX942)
    }
}
