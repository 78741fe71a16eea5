//! The matrix gradient kernels' blocks ([`MatrixGradientConfig`]), for [`super::gradient`].
use crate::backward::config::{BackwardKernel, GradientConfig, MatrixGradientConfig};
use crate::config::MATRIX_TILE;
use crate::problem::{AttentionProblem, FloatKind};

use super::super::device::DeviceCaps;
use super::super::{MATRIX_PLANES, STAND_IN_PLANE_SIZE};
use super::fits;

/// Inner (streamed) block rows tried on the matrix path for each plane count, largest first.
const MATRIX_INNER: [u32; 3] = [64, 32, 16];

/// The matrix path's config: the most planes (16 outer rows each) and then the largest inner
/// block whose tiles fit the device, with S's and dP's rows padded wide where asked
/// (`wide_scores`) and they fit, else narrow; `None` where none fits (e.g. head dim 256 in
/// 64 KiB).
pub(super) fn matrix_config(
    caps: &DeviceCaps,
    problem: &AttentionProblem,
    kernel: BackwardKernel,
    stand_in: bool,
    f32_tiles: bool,
    wide_scores: bool,
) -> Option<MatrixGradientConfig> {
    // The wider rows cost shared memory, so they count in the fit, and never at the price of a
    // block: where they do not fit, the narrow padding at the same blocks is next.
    let widths: &[bool] = if wide_scores { &[true, false] } else { &[false] };
    let candidates = MATRIX_PLANES
        .into_iter()
        .flat_map(|planes| MATRIX_INNER.into_iter().map(move |inner| (planes * MATRIX_TILE, inner)))
        .flat_map(|(outer, inner)| widths.iter().map(move |&wide| (outer, inner, wide)));
    candidates
        .map(|(outer, inner, wide_scores)| {
            let (block_q, block_kv) = match kernel {
                BackwardKernel::KeyValue => (inner, outer),
                BackwardKernel::Query => (outer, inner),
            };
            MatrixGradientConfig {
                kernel,
                block_q,
                block_kv,
                head_dim: problem.head_dim as u32,
                val_dim: problem.val_dim as u32,
                // The stand-in needs no hardware plane: 64 units per plane keep its per-lane
                // accumulators few (4 f32 per tile).
                plane_size: if stand_in { STAND_IN_PLANE_SIZE } else { caps.plane_size() },
                elem_bytes: if f32_tiles { FloatKind::F32.size() as u32 } else { problem.dtype.size() as u32 },
                f32_tiles,
                score: problem.score_options(),
                stand_in,
                // The one pass is chosen after the blocks (`super::backward`).
                atomic_dq: false,
                dq_width: 1,
                // Set from the tuning by the caller.
                vector_loads: false,
                prefetch: false,
                plane_sync: false,
                wide_scores,
            }
        })
        .find(|config| fits(caps, &GradientConfig::Matrix(*config)))
}
