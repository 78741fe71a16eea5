//! The ONE planner: for one [`AttentionProblem`] on one device, which kernels run, with which
//! configurations, and why. The launchers take a plan and never plan.
//!
//! ```text
//! problem + DeviceCaps + Layout + Tuning ──plan()──> Plan { forward, backward: Option<..> }
//!                                                      │            │
//!                   forward::flash_attention_forward <─┘            └─> backward::flash_attention_backward
//! ```
//! - [`DeviceCaps`]: the device's properties as the kernels may use them (shared memory, plane
//!   size, matrix units, `cp.async`), from a client or simulated for another device.
//! - [`Layout`]: whether the inputs' rows load in 16-byte chunks (the mma paths need it).
//! - [`Tuning`]: explicit overrides (a forced forward path, mma blocks) for benches and tests;
//!   [`Tuning::default`] is what users get. Nothing here reads the environment.
//! - [`Passes`]: inference plans the forward alone; training plans the backward too, before
//!   anything runs, so a problem the backward cannot take never starts on the kernels.
//!
//! The measured block tables live in [`mma_blocks`], each with the measurement it came from.
use core::fmt;

use cubecl::prelude::*;

use crate::error::FlashError;
use crate::primitives::chunk_io::CHUNK;
use crate::primitives::row_stream::RowStreamShape;
use crate::primitives::tile_io::LOAD_BYTES;
use crate::problem::{AttentionProblem, FloatKind};

pub mod backward;
pub mod device;
pub mod forward;
pub mod mma_blocks;
mod defaults;
mod tuning;

pub use backward::{BackwardPlan, DqAccumulation, GradientChoice, GradientPlan};
pub use device::{DeviceCaps, elem_type, mask_elem_type};
pub use forward::{BlockChoice, ForwardChoice, ForwardPlan};
pub use mma_blocks::MmaBlocks;
pub use defaults::*;
pub use tuning::*;

/// How the inputs lie in memory, as far as the plan cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layout {
    /// Every one of q, k, v (and d_out for the backward) has contiguous rows of whole 16-byte
    /// chunks, with every other stride and its offset multiples of a chunk: what the mma
    /// kernels load. Views that are not (a transposed last dimension, an odd offset) run on
    /// the matrix or portable paths, which read any strides, or are copied first.
    pub rows_chunked: bool,
}

impl Layout {
    /// Contiguous rows of whole chunks: what a caller that copies other views first plans for.
    pub const CHUNKED: Layout = Layout { rows_chunked: true };
    /// Rows the mma kernels cannot load.
    pub const STRIDED: Layout = Layout { rows_chunked: false };

    /// The layout of `tensors` of `dtype` elements.
    pub fn of<R: Runtime>(dtype: FloatKind, tensors: &[&TensorBinding<R>]) -> Layout {
        Layout { rows_chunked: rows_in_vectors(dtype, CHUNK as usize, tensors) }
    }
}

impl Default for Layout {
    fn default() -> Self {
        Layout::CHUNKED
    }
}

/// Whether every tensor can be read in vectors of `width` elements: contiguous rows of a whole
/// number of vectors, every other stride and the offset multiples of a vector.
pub fn rows_in_vectors<R: Runtime>(dtype: FloatKind, width: usize, tensors: &[&TensorBinding<R>]) -> bool {
    let vector_bytes = (width * dtype.size()) as u64;
    tensors.iter().all(|t| {
        let strides = t.strides.as_ref();
        strides.len() == 4
            && strides[3] == 1
            && t.shape.as_ref()[3] % width == 0
            && strides[..3].iter().all(|s| s % width == 0)
            && t.handle.offset_start.unwrap_or(0) % vector_bytes == 0
    })
}

/// 32-bit registers per unit that hold one block of `stream` (both tensors' rows of `dtype`,
/// padded to their tiles' dims, in 16-byte vectors dealt over its units): what fetching it
/// ahead costs.
pub(crate) fn prefetch_registers(dtype: FloatKind, stream: RowStreamShape) -> u32 {
    let per_vector = (LOAD_BYTES / dtype.size()) as u32;
    let vectors = |dim: u32| (stream.rows * dim / per_vector).div_ceil(stream.units);
    (vectors(stream.first.dim_tile) + vectors(stream.second.dim_tile)) * (LOAD_BYTES / 4) as u32
}

/// Planes per cube the matrix kernels try, most first: 4 (one per SIMD of a CDNA3 CU, as
/// [`backward::PLANES_PER_CUBE_AT_LEAST`]; the forward's block_q = 4 * 16 = 64, FA-2's choice
/// for d <= 128), fewer where the tiles do not fit (e.g. f32 tiles at head dim 128 in an
/// MI300X's 64 KiB). Each plane takes 16 rows: the forward's query rows (32 with
/// [`Tuning::matrix_plane_rows`]), the gradient kernels' accumulated rows.
const MATRIX_PLANES: [u32; 3] = [4, 2, 1];
/// Units per plane of the matrix kernels' scalar stand-in (any count works: it uses no plane
/// operation).
const STAND_IN_PLANE_SIZE: u32 = 64;

/// Which passes a plan covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Passes {
    /// Inference: the forward alone.
    Forward,
    /// Training: the forward, and the backward that will follow it.
    ForwardBackward,
}

/// Everything that runs for one problem on one device, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub forward: ForwardPlan,
    /// `Some` when planned with [`Passes::ForwardBackward`].
    pub backward: Option<BackwardPlan>,
}

impl Plan {
    /// Whether some kernel of the plan loads q, k, v (d_out) rows in 16-byte chunks.
    pub fn needs_chunked_rows(&self) -> bool {
        self.forward.needs_chunked_rows() || self.backward.as_ref().is_some_and(BackwardPlan::needs_chunked_rows)
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "forward: {}", self.forward)?;
        if let Some(backward) = &self.backward {
            write!(f, "; backward: {backward}")?;
        }
        Ok(())
    }
}

/// Plans `passes` of `problem` on the device `caps` describes, for inputs laid out as `layout`.
///
/// # Errors
///
/// The problem's own errors ([`AttentionProblem::validate`]), [`FlashError::Device`] where the
/// device cannot run it on any path (types, shared memory, grid), and
/// [`FlashError::InvalidTuning`] for overrides the kernels cannot take.
pub fn plan(
    problem: &AttentionProblem,
    caps: &DeviceCaps,
    layout: Layout,
    tuning: &Tuning,
    passes: Passes,
) -> Result<Plan, FlashError> {
    // Each half validates the problem and the whole tuning itself.
    let forward = forward::forward(caps, problem, layout, tuning)?;
    let backward = match passes {
        Passes::Forward => None,
        Passes::ForwardBackward => Some(backward::backward(caps, problem, layout, tuning)?),
    };
    Ok(Plan { forward, backward })
}
