//! The kernel variants the routing selects on a client (their HIP source: `sources.rs`).
//!
//! A variant is what a launch compiles: the kernel, its comptime config (which carries the
//! score options, block sizes and dims), the element type and the mask's element type. The
//! configs come from the real planners (`plan::forward`, `plan::backward`) on the client's
//! properties; the cube dims are the launchers' (`CubeDim::new_1d(units)` for the portable
//! and backward kernels, one plane per 16 query rows on the matrix path).
use crate::support::planning;
use std::collections::BTreeMap;

use burn_flash_attn_kernels::backward::config::{
    BackwardKernel, GradientConfig, MatrixGradientConfig, PortableGradientConfig,
};
use burn_flash_attn_kernels::backward::preprocess::{PreprocessShape, UNITS as PREPROCESS_UNITS};
use burn_flash_attn_kernels::primitives::score::ScoreOptions;
use burn_flash_attn_kernels::plan::{DeviceCaps, Layout};
use burn_flash_attn_kernels::{AttentionProblem, FloatKind, ForwardConfig, MaskKind};
use cubecl::prelude::*;

use super::GFX942_LOAD_BYTES;
pub use super::sources::hip_source;

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
