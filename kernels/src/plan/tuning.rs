//! [`Tuning`]: the planner's explicit overrides; the defaults it takes without them are in
//! `defaults.rs`, each with the measurement it came from.
use crate::config::ForwardPath;
use crate::error::FlashError;

use super::DqAccumulation;
use super::defaults::*;
use super::mma_blocks::MmaBlocks;

/// Explicit overrides of the planner's choices, for benches, tests and tuning runs. The
/// default (no override) is what the library picks; an override that the kernels cannot take
/// is a [`FlashError::InvalidTuning`] from [`super::plan`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Tuning {
    /// Force the forward's path (an error where the device cannot run it).
    pub forward_path: Option<ForwardPath>,
    /// The mma forward's blocks instead of the measured ones
    /// ([`super::mma_blocks::forward_default`]).
    pub forward_mma: Option<MmaBlocks>,
    /// The mma backward's blocks instead of the measured ones (16-row planes only).
    pub backward_mma: Option<MmaBlocks>,
    /// How the backward sums dQ. `None` (the default): the planner's choice, the one pass on
    /// the mma path from [`super::backward::ONE_PASS_MIN_KEYS`] keys where the device has f32
    /// atomic add, dQ's own kernel elsewhere. `Kernel`: always dQ's own kernel, reruns
    /// bit-identical ([`Tuning::deterministic`]). `Atomic` is a preference: taken where the
    /// device has f32 atomic add (and, on the mma path, the one-pass kernel's blocks fit its
    /// shared memory), `Kernel` elsewhere. [`super::BackwardPlan::dq_accumulation`] says which
    /// a plan took.
    pub backward_dq: Option<DqAccumulation>,
    /// The one-pass backward's f32 per dQ atomic request (1, 2 or 4) instead of the widest the
    /// device registers; narrowed to what the device registers (and, on the matrix path, to
    /// what head_dim divides).
    pub backward_dq_width: Option<u32>,
    /// The gradient kernels' path, a preference: taken where the device can run it (the matrix
    /// path needs cmma for the dtype, f16 / bf16), the planner's choice elsewhere; each
    /// [`super::GradientPlan::choice`] says which. The one pass ([`Tuning::backward_dq`]) runs on
    /// every path.
    pub backward_path: Option<crate::backward::BackwardPath>,
    /// Tests: where the matrix backward is asked for on a device without cmma for the dtype,
    /// run its kernels with the scalar stand-in for the fragments
    /// ([`crate::primitives::tile_mma::StandIn`]) instead of another path.
    pub matrix_stand_in: bool,
    /// Tests: with [`Tuning::matrix_stand_in`], stage the matrix backward's tiles in f32 (the
    /// inputs converted), as gfx942 does for bf16.
    pub matrix_f32_tiles: bool,
    /// Whether the matrix kernels (forward and gradients) read q, k, v and d_out in 16-byte
    /// vectors where the runtime and the rows allow ([`crate::primitives::tile_io::load_width`]:
    /// CUDA and HIP, rows of whole vectors) instead of element by element; `None`:
    /// [`MATRIX_VECTOR_LOADS`].
    pub matrix_vector_loads: Option<bool>,
    /// Whether the matrix kernels issue their streamed block's loads one block ahead, into
    /// registers, while the previous block computes (with vector loads, where the registers
    /// stay within [`MATRIX_PREFETCH_REGISTERS`]); `None`: [`MATRIX_PREFETCH`].
    pub matrix_prefetch: Option<bool>,
    /// Whether the matrix forward staggers the column walk of rows 8-15 of every plane
    /// ([`crate::config::MatrixConfig::staggered`]); `None`: [`MATRIX_STAGGERED`].
    pub matrix_staggered: Option<bool>,
    /// Whether the matrix forward keeps its softmax inside each plane where the device allows
    /// ([`crate::config::MatrixConfig::plane_shuffles`] / [`crate::config::MatrixConfig::plane_sync`]):
    /// row maxima and sums by plane shuffles instead of through shared memory and cube syncs;
    /// `None`: [`MATRIX_PLANE_SOFTMAX`].
    pub matrix_plane_softmax: Option<bool>,
    /// Whether the matrix kernels pad their f32 score rows by 32 bytes: the forward's S, with its
    /// rows staggered in four groups of four ([`crate::config::MatrixConfig::wide_scores`]),
    /// and the gradient kernels' S and dP, their strips' rows taken in pairs two apart
    /// ([`crate::backward::config::MatrixGradientConfig::wide_scores`]). `Some(_)` sets both;
    /// `None`: [`MATRIX_WIDE_SCORES`] for the forward, [`MATRIX_GRADIENT_WIDE_SCORES`] for the
    /// gradient kernels.
    pub matrix_wide_scores: Option<bool>,
    /// Query rows per plane of the matrix forward, 16 or 32 (one or two cmma row tiles:
    /// [`crate::config::MatrixConfig::row_tiles`]); `None`: [`MATRIX_PLANE_ROWS`]. 32 is taken
    /// where the plane has at least 32 units (every GPU plane; the stand-in's 64) and a block of
    /// 32-row planes fits the device, else 16.
    pub matrix_plane_rows: Option<u32>,
    /// Whether the matrix forward's S tile and O's staging tile share one allocation
    /// ([`crate::config::MatrixConfig::shared_stage`]): less shared memory a cube, so more
    /// cubes an SM or larger blocks where shared memory binds; `None`: [`MATRIX_SHARED_STAGE`].
    pub matrix_shared_stage: Option<bool>,
    /// Planes per cube of the matrix forward (1, 2 or 4) instead of the most that fit; an error
    /// where that many do not fit.
    pub matrix_forward_planes: Option<u32>,
    /// Whether the mma kernels' products over the head dim (`S = Q K^T`, and the gradient
    /// kernels' `dP = dO V^T`) are written as loops over their k steps instead of unrolled in
    /// the source, where nothing in registers is indexed by the step (see
    /// [`crate::config::MmaConfig::rolled_steps`]); `None`: [`ROLLED_STEPS`].
    pub rolled_steps: Option<bool>,
    /// Whether the mma kernels (forward and gradients) stream their blocks by `cp.async`
    /// (blocks with two buffers, on devices that have it) instead of through registers; `None`:
    /// as the blocks say (on, by default). Off, a kernel's first compilation takes about 0.8 s
    /// less of nvrtc (no libcu++ `cuda/barrier` and cooperative-groups headers: see
    /// benches/RESULTS.md, 2026-12-05); the speed of the kernels streamed through registers at
    /// the default blocks is not measured yet.
    pub async_copy: Option<bool>,
    /// Whether the mma forward keeps each plane's Q fragments in registers where they fit
    /// ([`crate::config::MmaConfig::q_registers`]); `None`: [`FORWARD_Q_REGISTERS`]. Off,
    /// they are re-read from the shared Q tile every key block, which leaves their registers
    /// (32 per lane at 32 rows and head dim 64) to larger key blocks.
    pub forward_q_registers: Option<bool>,
    /// Whether the mma forward starts its first key/value block's copy before it loads the
    /// query block ([`crate::config::MmaConfig::early_kv`]); `None`: [`FORWARD_EARLY_KV`].
    pub forward_early_kv: Option<bool>,
    /// Whether the mma forward writes O through shared memory in 16-byte chunks
    /// ([`crate::config::MmaConfig::chunked_output`]); `None`: [`FORWARD_CHUNKED_OUTPUT`].
    pub forward_chunked_output: Option<bool>,
    /// Whether the mma gradient kernels write dK, dV and dQ through shared memory in 16-byte
    /// chunks ([`crate::backward::config::MmaGradientConfig::chunked_output`]); `None`:
    /// [`BACKWARD_CHUNKED_OUTPUT`].
    pub backward_chunked_output: Option<bool>,
}

impl Tuning {
    pub fn with_forward_path(mut self, path: Option<ForwardPath>) -> Self {
        self.forward_path = path;
        self
    }

    pub fn with_forward_mma(mut self, blocks: Option<MmaBlocks>) -> Self {
        self.forward_mma = blocks;
        self
    }

    pub fn with_backward_mma(mut self, blocks: Option<MmaBlocks>) -> Self {
        self.backward_mma = blocks;
        self
    }

    pub fn with_backward_dq(mut self, accumulation: Option<DqAccumulation>) -> Self {
        self.backward_dq = accumulation;
        self
    }

    /// The deterministic backward: dQ by its own kernel, every sum in a fixed order, so that
    /// reruns on the same inputs are bit-identical (`backward_dq = Some(Kernel)`). It gives up
    /// the one pass's speed where the planner would take it (up to 1.16x forward + backward on
    /// the H200 at 32768 keys: [`super::backward::ONE_PASS_MIN_KEYS`]).
    pub fn deterministic(self) -> Self {
        self.with_backward_dq(Some(DqAccumulation::Kernel))
    }

    pub fn with_backward_dq_width(mut self, width: Option<u32>) -> Self {
        self.backward_dq_width = width;
        self
    }

    pub fn with_backward_path(mut self, path: Option<crate::backward::BackwardPath>) -> Self {
        self.backward_path = path;
        self
    }

    pub fn with_matrix_stand_in(mut self, stand_in: bool) -> Self {
        self.matrix_stand_in = stand_in;
        self
    }

    pub fn with_matrix_vector_loads(mut self, vector_loads: Option<bool>) -> Self {
        self.matrix_vector_loads = vector_loads;
        self
    }

    pub fn with_matrix_prefetch(mut self, prefetch: Option<bool>) -> Self {
        self.matrix_prefetch = prefetch;
        self
    }

    pub fn with_matrix_staggered(mut self, staggered: Option<bool>) -> Self {
        self.matrix_staggered = staggered;
        self
    }

    pub fn with_matrix_plane_softmax(mut self, plane_softmax: Option<bool>) -> Self {
        self.matrix_plane_softmax = plane_softmax;
        self
    }

    pub fn with_matrix_wide_scores(mut self, wide_scores: Option<bool>) -> Self {
        self.matrix_wide_scores = wide_scores;
        self
    }

    pub fn with_matrix_plane_rows(mut self, rows: Option<u32>) -> Self {
        self.matrix_plane_rows = rows;
        self
    }

    pub fn with_matrix_shared_stage(mut self, shared_stage: Option<bool>) -> Self {
        self.matrix_shared_stage = shared_stage;
        self
    }

    pub fn with_matrix_forward_planes(mut self, planes: Option<u32>) -> Self {
        self.matrix_forward_planes = planes;
        self
    }

    pub fn with_matrix_f32_tiles(mut self, f32_tiles: bool) -> Self {
        self.matrix_f32_tiles = f32_tiles;
        self
    }

    pub fn with_rolled_steps(mut self, rolled: Option<bool>) -> Self {
        self.rolled_steps = rolled;
        self
    }

    pub fn with_async_copy(mut self, async_copy: Option<bool>) -> Self {
        self.async_copy = async_copy;
        self
    }

    pub fn with_forward_q_registers(mut self, q_registers: Option<bool>) -> Self {
        self.forward_q_registers = q_registers;
        self
    }

    pub fn with_forward_early_kv(mut self, early: Option<bool>) -> Self {
        self.forward_early_kv = early;
        self
    }

    pub fn with_forward_chunked_output(mut self, chunked: Option<bool>) -> Self {
        self.forward_chunked_output = chunked;
        self
    }

    pub fn with_backward_chunked_output(mut self, chunked: Option<bool>) -> Self {
        self.backward_chunked_output = chunked;
        self
    }

    /// [`Tuning::backward_chunked_output`], or the default.
    pub fn backward_chunked_output(&self) -> bool {
        self.backward_chunked_output.unwrap_or(BACKWARD_CHUNKED_OUTPUT)
    }

    /// [`Tuning::forward_chunked_output`], or the default.
    pub fn forward_chunked_output(&self) -> bool {
        self.forward_chunked_output.unwrap_or(FORWARD_CHUNKED_OUTPUT)
    }

    /// [`Tuning::forward_early_kv`], or the default.
    pub fn forward_early_kv(&self) -> bool {
        self.forward_early_kv.unwrap_or(FORWARD_EARLY_KV)
    }

    /// [`Tuning::forward_q_registers`], or the default.
    pub fn forward_q_registers(&self) -> bool {
        self.forward_q_registers.unwrap_or(FORWARD_Q_REGISTERS)
    }

    /// `blocks` with [`Tuning::async_copy`] applied.
    pub(crate) fn streamed(&self, blocks: MmaBlocks) -> MmaBlocks {
        MmaBlocks { async_copy: self.async_copy.unwrap_or(blocks.async_copy), ..blocks }
    }

    /// [`Tuning::rolled_steps`], or the default.
    pub fn rolled_steps(&self) -> bool {
        self.rolled_steps.unwrap_or(ROLLED_STEPS)
    }

    /// Checks every override, whichever path a problem takes: the mma blocks the kernels can
    /// take ([`MmaBlocks::validate`]), 16-row planes for the backward's.
    pub fn validate(&self) -> Result<(), FlashError> {
        if let Some(blocks) = self.forward_mma {
            blocks.validate()?;
        }
        if let Some(rows) = self.matrix_plane_rows
            && !MATRIX_PLANE_ROWS_TAKEN.contains(&rows)
        {
            return Err(FlashError::InvalidTuning(format!(
                "matrix plane rows {rows}: one of {MATRIX_PLANE_ROWS_TAKEN:?}"
            )));
        }
        if let Some(planes) = self.matrix_forward_planes
            && !super::MATRIX_PLANES.contains(&planes)
        {
            return Err(FlashError::InvalidTuning(format!(
                "matrix forward planes {planes}: one of {:?}",
                super::MATRIX_PLANES
            )));
        }
        if let Some(width) = self.backward_dq_width
            && !DQ_WIDTHS.contains(&width)
        {
            return Err(FlashError::InvalidTuning(format!(
                "dQ atomic width {width}: one of {DQ_WIDTHS:?} f32 per request"
            )));
        }
        if let Some(blocks) = self.backward_mma {
            blocks.validate()?;
            if blocks.plane_rows != crate::config::MATRIX_TILE {
                return Err(FlashError::InvalidTuning(format!(
                    "backward mma blocks {blocks}: the gradient kernels take {}-row planes",
                    crate::config::MATRIX_TILE
                )));
            }
        }
        Ok(())
    }
}
