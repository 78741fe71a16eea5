//! The one-pass backward's choice (dQ by f32 atomic adds in the dK/dV kernel), for
//! [`super::backward`].
use crate::backward::config::{BackwardKernel, GradientConfig, MmaGradientConfig};
use crate::problem::AttentionProblem;

use super::super::device::DeviceCaps;
use super::super::mma_blocks;
use super::super::{DQ_WIDTHS, Tuning};
use super::{DqAccumulation, ONE_PASS_MIN_KEYS, fits, mma_config};

/// Makes the planned dK/dV kernel (`dkdv`) the one pass where it can run and is wanted.
pub(super) fn choose(caps: &DeviceCaps, problem: &AttentionProblem, tuning: &Tuning, dkdv: &mut GradientConfig) {
    // The one pass is taken where it can run (a device with f32 atomic add and, on the mma path,
    // blocks that still fit with the dS^T tile) when asked for, or, without a preference, on
    // the mma path from ONE_PASS_MIN_KEYS keys and on the matrix path at every length (see
    // below); elsewhere dQ keeps its kernel.
    let asked = tuning.backward_dq == Some(DqAccumulation::Atomic);
    let by_default = tuning.backward_dq.is_none() && problem.seq_kv >= ONE_PASS_MIN_KEYS;
    if caps.has_atomic_f32_add() {
        match dkdv {
            GradientConfig::Portable(config) => config.atomic_dq = asked,
            GradientConfig::Mma(config) if asked || by_default => {
                if let Some(one_pass) = one_pass_config(caps, problem, tuning, config) {
                    *config = one_pass;
                }
            }
            // On the matrix path the one pass measured 1.25-1.54x the two-kernel backward's
            // forward + backward at every length tried (H200, bf16, cmma, 512 to 8192 keys,
            // head dims 32-128; 2026-12-04, fb61f9a,
            // `benches/results/2026-12-04-h200-fb61f9a/matrix*.csv`): its dQ kernel recomputes S
            // and dP through shared memory, which costs this path more than the atomics do.
            GradientConfig::Matrix(config) if asked || tuning.backward_dq.is_none() => {
                // Same blocks and shared memory.
                config.dq_width = dq_width(caps, problem, tuning);
                config.atomic_dq = true;
            }
            GradientConfig::Mma(_) | GradientConfig::Matrix(_) => {}
        }
    }
}

/// The one-pass mma dK/dV config: the tuning's backward blocks where it names them, otherwise
/// [`mma_blocks::one_pass_default`], shrunk until they fit with the dS^T tile, and last the
/// two-kernel path's planned dK/dV blocks (`planned`); dQ added in the widest f32 vectors the
/// device adds atomically ([`DQ_WIDTHS`]), no wider than the tuning's
/// [`Tuning::backward_dq_width`]. `None` where none fits (dQ keeps its kernel).
fn one_pass_config(
    caps: &DeviceCaps,
    problem: &AttentionProblem,
    tuning: &Tuning,
    planned: &MmaGradientConfig,
) -> Option<MmaGradientConfig> {
    let dq_width = dq_width(caps, problem, tuning);
    let one_pass = |config: MmaGradientConfig| MmaGradientConfig { atomic_dq: true, dq_width, ..config };
    let first = tuning.backward_mma.unwrap_or_else(mma_blocks::one_pass_default);
    core::iter::successors(Some(first), |blocks| blocks.smaller())
        .map(|blocks| one_pass(mma_config(caps, problem, tuning, BackwardKernel::KeyValue, blocks)))
        .chain([one_pass(*planned)])
        .find(|config| fits(caps, &GradientConfig::Mma(*config)))
}

/// f32 per dQ atomic request of a one pass: the widest of [`DQ_WIDTHS`] that the device adds
/// atomically and head_dim divides (the accumulator's rows are head_dim long; the mma path's
/// head dims are multiples of 8), no wider than the tuning's [`Tuning::backward_dq_width`].
fn dq_width(caps: &DeviceCaps, problem: &AttentionProblem, tuning: &Tuning) -> u32 {
    let widest = tuning.backward_dq_width.unwrap_or(DQ_WIDTHS[0]);
    DQ_WIDTHS
        .into_iter()
        .find(|&width| {
            width <= widest && problem.head_dim.is_multiple_of(width as usize) && caps.has_atomic_f32_add_of(width)
        })
        .unwrap_or(1)
}
