//! CUDA C++ of the mma kernels (forward, dK/dV, dQ) for a config, with every tensor argument
//! a plain (not in-place) one: the builders of the codegen tests (`mma_codegen`,
//! `mma_codegen_time`), no device needed.
use burn_flash_attn_kernels::backward::config::MmaGradientConfig;
use burn_flash_attn_kernels::backward::dq_sink::{AtomicDq, AtomicDqPairs, AtomicDqQuads, DqSink, NoDq};
use burn_flash_attn_kernels::backward::mma::dkdv_mma_kernel::DkdvMmaKernel;
use burn_flash_attn_kernels::backward::mma::dq_mma_kernel::DqMmaKernel;
use burn_flash_attn_kernels::config::{MMA_CHUNK, MmaConfig};
use burn_flash_attn_kernels::forward::mma::flash_attention_forward_mma_kernel::FlashAttentionForwardMmaKernel;
use burn_flash_attn_kernels::primitives::pair_stream::{AsyncCopy, PairStream, Staged};
use cubecl::prelude::*;

use super::cuda_codegen::{cuda_source, settings};
use super::kernel_args::{score_params, tensor};
use super::{Client, TestRuntime};

pub fn mma_source<F: Float, M: Int>(client: &Client, config: MmaConfig) -> (String, usize) {
    if config.async_kv {
        mma_source_with::<F, M, AsyncCopy>(client, config)
    } else {
        mma_source_with::<F, M, Staged>(client, config)
    }
}

pub fn mma_source_with<F: Float, M: Int, S: PairStream>(
    client: &Client,
    config: MmaConfig,
) -> (String, usize) {
    cuda_source(FlashAttentionForwardMmaKernel::<F, M, S, TestRuntime>::new(
        settings(CubeDim::new_2d(32, config.num_planes())),
        client.clone(),
        tensor(),
        tensor(),
        tensor(),
        tensor(),
        tensor(),
        tensor(),
        tensor(),
        tensor(),
        score_params(),
        MMA_CHUNK as usize,
        config,
    ))
}



/// The CUDA source of the dK/dV mma kernel for `config` (u32 mask).
pub fn dkdv_source<F: Float>(
    client: &Client,
    settings: KernelSettings,
    config: MmaGradientConfig,
) -> (String, usize) {
    if config.async_inner {
        dkdv_source_with::<F, AsyncCopy>(client, settings, config)
    } else {
        dkdv_source_with::<F, Staged>(client, settings, config)
    }
}

pub fn dkdv_source_with<F: Float, S: PairStream>(
    client: &Client,
    settings: KernelSettings,
    config: MmaGradientConfig,
) -> (String, usize) {
    if config.atomic_dq && config.dq_width == 4 {
        dkdv_source_sink::<F, S, AtomicDqQuads>(client, settings, config)
    } else if config.atomic_dq && config.dq_width == 2 {
        dkdv_source_sink::<F, S, AtomicDqPairs>(client, settings, config)
    } else if config.atomic_dq {
        dkdv_source_sink::<F, S, AtomicDq>(client, settings, config)
    } else {
        dkdv_source_sink::<F, S, NoDq>(client, settings, config)
    }
}

pub fn dkdv_source_sink<F: Float, S: PairStream, D: DqSink>(
    client: &Client,
    settings: KernelSettings,
    config: MmaGradientConfig,
) -> (String, usize) {
    cuda_source(DkdvMmaKernel::<F, u32, S, D, TestRuntime>::new(
        settings,
        client.clone(),
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
        MMA_CHUNK as usize,
        config,
    ))
}

/// The CUDA source of the dQ mma kernel for `config` (u32 mask).
pub fn dq_source<F: Float>(
    client: &Client,
    settings: KernelSettings,
    config: MmaGradientConfig,
) -> (String, usize) {
    if config.async_inner {
        dq_source_with::<F, AsyncCopy>(client, settings, config)
    } else {
        dq_source_with::<F, Staged>(client, settings, config)
    }
}

pub fn dq_source_with<F: Float, S: PairStream>(
    client: &Client,
    settings: KernelSettings,
    config: MmaGradientConfig,
) -> (String, usize) {
    cuda_source(DqMmaKernel::<F, u32, S, TestRuntime>::new(
        settings,
        client.clone(),
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
        MMA_CHUNK as usize,
        config,
    ))
}
