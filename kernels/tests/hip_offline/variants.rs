//! The kernel variants the routing selects on a client, and their HIP source.
//!
//! A variant is what a launch compiles: the kernel, its comptime config (which carries the
//! score options, block sizes and dims), the element type and the mask's element type. The
//! configs come from the real planners (`plan::forward`, `plan::backward`) on the client's
//! properties; the cube dims are the launchers' (`CubeDim::new_1d(units)` for the portable
//! and backward kernels, one plane per 16 query rows on the matrix path).
use crate::support::kernel_args::{score_params, tensor};
use crate::support::planning;
use std::collections::BTreeMap;

use burn_flash_attn_kernels::backward::config::{
    BackwardKernel, GradientConfig, MatrixGradientConfig, PortableGradientConfig,
};
use burn_flash_attn_kernels::backward::dq_sink::{AtomicDq, DqSink, NoDq};
use burn_flash_attn_kernels::backward::dkdv::flash_attention_backward_dkdv_kernel::FlashAttentionBackwardDkdvKernel;
use burn_flash_attn_kernels::backward::dq::flash_attention_backward_dq_kernel::FlashAttentionBackwardDqKernel;
use burn_flash_attn_kernels::backward::matrix::matrix_dkdv_kernel::MatrixDkdvKernel;
use burn_flash_attn_kernels::backward::matrix::matrix_dq_kernel::MatrixDqKernel;
use burn_flash_attn_kernels::primitives::tile_mma::Cmma;
use burn_flash_attn_kernels::backward::preprocess::{PreprocessShape, UNITS as PREPROCESS_UNITS};
use burn_flash_attn_kernels::backward::preprocess::flash_attention_backward_preprocess_kernel::FlashAttentionBackwardPreprocessKernel;
use burn_flash_attn_kernels::forward::matrix::flash_attention_forward_matrix_kernel::FlashAttentionForwardMatrixKernel;
use burn_flash_attn_kernels::primitives::tile_io::LOAD_BYTES;
use burn_flash_attn_kernels::forward::portable::flash_attention_forward_kernel::FlashAttentionForwardKernel;
use burn_flash_attn_kernels::primitives::score::ScoreOptions;
use burn_flash_attn_kernels::plan::{DeviceCaps, Layout};
use burn_flash_attn_kernels::{AttentionProblem, FloatKind, ForwardConfig, MaskKind};
use cubecl::ir::AddressType;
use cubecl::prelude::*;

use super::{GFX942, GFX942_LOAD_BYTES, HipSource, MatrixCores, OfflineHip};

/// Which kernel, with its comptime config.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KernelConfig {
    Forward(ForwardConfig),
    /// `delta = rowsum(d_out ∘ o)`: rows a cube and vectors a row.
    Preprocess(PreprocessShape),
    Backward(GradientConfig),
}

/// One compiled kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Variant {
    pub kernel: KernelConfig,
    pub dtype: FloatKind,
    /// The mask binding's element type: the launchers bind a u32 stand-in without a mask.
    pub mask: MaskKind,
}

impl Variant {
    /// Whether the variant runs on matrix cores (cmma fragments).
    pub fn claims_matrix(&self) -> bool {
        matches!(
            self.kernel,
            KernelConfig::Forward(ForwardConfig::Matrix(_)) | KernelConfig::Backward(GradientConfig::Matrix(_))
        )
    }

    /// The cube the launcher launches it with.
    pub fn cube_dim(&self) -> CubeDim {
        match self.kernel {
            KernelConfig::Forward(ForwardConfig::Matrix(c)) => CubeDim::new_2d(c.plane_size, c.num_planes()),
            KernelConfig::Forward(c) => CubeDim::new_1d(c.units()),
            KernelConfig::Preprocess(_) => CubeDim::new_1d(PREPROCESS_UNITS),
            KernelConfig::Backward(GradientConfig::Matrix(c)) => CubeDim::new_2d(c.plane_size, c.planes()),
            KernelConfig::Backward(c) => CubeDim::new_1d(c.units()),
        }
    }

    /// A file-name-safe description: kernel, dtype, mask type, options, dims, blocks, units.
    pub fn name(&self) -> String {
        let dtype = format!("{:?}", self.dtype).to_lowercase();
        let mask = format!("{:?}", self.mask).to_lowercase();
        match self.kernel {
            KernelConfig::Forward(c) => format!(
                "fwd-{}{}_{dtype}_{mask}_{}{}_hd{}-dv{}_bq{}-bkv{}_u{}",
                c.path().name(),
                match c {
                    ForwardConfig::Matrix(m) if m.f32_tiles => "-f32tiles",
                    _ => "",
                },
                options_tag(c.score()),
                if c.quiet_softmax() { "-quiet" } else { "" },
                c.dims().0,
                c.dims().1,
                c.block_q(),
                c.block_kv(),
                c.units()
            ),
            KernelConfig::Preprocess(shape) => format!(
                "bwd-preprocess_{dtype}_r{}-c{}_u{PREPROCESS_UNITS}",
                shape.rows, shape.row_chunks
            ),
            KernelConfig::Backward(c) => format!(
                "bwd-{}{}_{dtype}_{mask}_{}_hd{}-dv{}_bq{}-bkv{}_u{}",
                match c.kernel() {
                    BackwardKernel::KeyValue => "dkdv",
                    BackwardKernel::Query => "dq",
                },
                match c {
                    GradientConfig::Portable(p) if p.atomic_dq => "-atomicdq",
                    GradientConfig::Portable(_) => "",
                    GradientConfig::Mma(_) => "-mma",
                    GradientConfig::Matrix(m) => match (m.f32_tiles, m.atomic_dq) {
                        (false, false) => "-matrix",
                        (false, true) => "-matrix-atomicdq",
                        (true, false) => "-matrix-f32tiles",
                        (true, true) => "-matrix-f32tiles-atomicdq",
                    },
                },
                options_tag(c.score()),
                c.dims().0,
                c.dims().1,
                c.blocks().0,
                c.blocks().1,
                c.units()
            ),
        }
    }
}

/// `plain`, or the options on: `causal-mask-bias-softcap-window-alibi`.
pub fn options_tag(options: ScoreOptions) -> String {
    let on: Vec<&str> = [
        (options.causal, "causal"),
        (options.has_mask, "mask"),
        (options.has_bias, "bias"),
        (options.has_softcap, "softcap"),
        (options.window, "window"),
        (options.alibi, "alibi"),
        (options.dropout, "dropout"),
    ]
    .into_iter()
    .filter_map(|(on, tag)| on.then_some(tag))
    .collect();
    if on.is_empty() {
        "plain".to_string()
    } else {
        on.join("-")
    }
}

/// The variants the planners pick for `problems` on `props`, each with the first reason given
/// for it. Panics if a problem is refused: every problem of the grid must run on an MI300X.
pub fn routed_variants(
    caps: &DeviceCaps,
    problems: &[AttentionProblem],
) -> BTreeMap<String, (Variant, String)> {
    let mut variants = BTreeMap::new();
    for problem in problems {
        let mask = problem.mask.unwrap_or(MaskKind::U32);
        let forward = planning::forward_plan_for(caps, problem, Layout::CHUNKED, None)
            .unwrap_or_else(|e| panic!("{problem:?} refused on gfx942: {e}"));
        let mut add = |kernel, reason: String| {
            let variant = Variant {
                kernel,
                dtype: problem.dtype,
                mask,
            };
            variants.entry(variant.name()).or_insert((variant, reason));
        };
        add(KernelConfig::Forward(forward.config), forward.to_string());
        for kernel in [BackwardKernel::KeyValue, BackwardKernel::Query] {
            let plan = planning::gradient_plan_for(caps, problem, kernel)
                .unwrap_or_else(|e| panic!("{problem:?} backward refused on gfx942: {e}"));
            add(KernelConfig::Backward(plan.config), plan.to_string());
            // The one-pass backward's dK/dV kernel (dQ by f32 atomic adds, which HIP has) on
            // the same blocks.
            let one_pass = match plan.config {
                GradientConfig::Portable(config) => {
                    Some(GradientConfig::Portable(PortableGradientConfig { atomic_dq: true, ..config }))
                }
                // HIP adds one f32 per request.
                GradientConfig::Matrix(config) => {
                    Some(GradientConfig::Matrix(MatrixGradientConfig { atomic_dq: true, dq_width: 1, ..config }))
                }
                GradientConfig::Mma(_) => None,
            };
            if let Some(one_pass) = one_pass
                && plan.config.kernel() == BackwardKernel::KeyValue
                && caps.has_atomic_f32_add()
            {
                add(KernelConfig::Backward(one_pass), format!("{plan}, dQ by f32 atomic adds (one pass)"));
            }
        }
        // Rows read in the widest load (16 bytes on gfx942) that contiguous rows allow.
        let vector_size = GFX942_LOAD_BYTES / problem.dtype.size();
        let shape = PreprocessShape::new(problem.val_dim, vector_size, problem.dtype.size());
        let preprocess = Variant {
            kernel: KernelConfig::Preprocess(shape),
            dtype: problem.dtype,
            mask: MaskKind::U32,
        };
        variants
            .entry(preprocess.name())
            .or_insert((preprocess, format!("{} rows a cube, always", shape.rows)));
    }
    variants
}

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
