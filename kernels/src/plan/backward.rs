//! The backward's paths and blocks (the dK/dV and the dQ kernel), with the reason for each.
//!
//! Both gradient kernels work on a pair of blocks at a time: `block_q` query rows (with their
//! `d_out`, lse and delta) against `block_kv` key/value rows. dK/dV iterate over query blocks
//! for a fixed key/value block; dQ iterates over key/value blocks for a fixed query block.
use core::fmt;

use crate::backward::config::{
    BackwardKernel, BackwardPath, GradientConfig, MatrixGradientConfig, MmaGradientConfig,
    PortableGradientConfig,
};
use crate::config::MATRIX_TILE;
use crate::error::FlashError;
use crate::primitives::block_range::never_masked;
use crate::problem::{AttentionProblem, FloatKind};

use super::device::DeviceCaps;
use super::forward::mma_fits_registers;
use super::mma_blocks::{self, MmaBlocks};
use super::{Layout, Tuning};
use matrix::matrix_config;

mod matrix;
mod one_pass;

/// Block sizes tried, largest first. Powers of two keep the work per unit even; 1 makes every
/// head_dim fit any device with at least a few KiB of shared memory.
const BLOCK_CANDIDATES: [u32; 7] = [64, 32, 16, 8, 4, 2, 1];
/// Units per cube for small block pairs: 4 planes of 32, 2 waves of 64, 16 lavapipe planes.
const UNITS_SMALL: u32 = 128;
/// Units per cube once a block pair has at least `UNITS_LARGE * 8` entries, so that each unit
/// still owns several score entries and accumulator elements.
const UNITS_LARGE: u32 = 256;
/// Planes per cube at the least: one per SIMD of a CDNA3 CU (one per sub-partition of an
/// NVIDIA SM), so that a cube whose tiles fill the shared memory alone still keeps them all
/// busy. It only matters for wave64 (`UNITS_SMALL` is 2 waves of 64: with one such cube per
/// CU, 2 of the 4 SIMDs of an MI300X CU idled, docs/HIP.md gap 3).
const PLANES_PER_CUBE_AT_LEAST: u32 = 4;
/// Score entries per unit from which the larger cube pays off.
const ENTRIES_PER_UNIT_FOR_LARGE: u32 = 8;
/// Register budget of the accumulators of one unit (f32 values, the sums and their Kahan
/// compensations): beyond this the compilers spill to local memory, which costs more
/// than smaller blocks. At 128, 26 of the 516 portable dK/dV and dQ variants compiled for
/// gfx942 spilled VGPRs (up to 178, with 256 VGPRs and 256 AGPRs in use). At 64 the dK/dV
/// variants that reach it (head_dim 64 / 128 / 256 at their largest blocks) sit at the edge:
/// 256 VGPRs plus 6 to 185 AGPRs, and whether one spills depends on the order in which
/// cubecl-cpp lays out the shared arrays, which changes from one generation to the next (one
/// head_dim 127 variant spilled a VGPR in a CI run, none in the others). At 48 the largest
/// variant needs 40 and none uses an AGPR (`scripts/hip_offline_check.sh`, docs/HIP.md).
const MAX_ACCUMULATORS_PER_UNIT: u32 = 48;

/// Smallest block the planner starts from, however short the sequence: blocks of 1-4 rows
/// leave most of a 128-unit cube idle and, at head_dim 128, spilled scalar registers on gfx942
/// (docs/HIP.md, known gap 2). Smaller candidates remain for fitting wide heads.
const SMALLEST_USEFUL_BLOCK: u32 = 8;

/// Why a gradient kernel takes its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GradientChoice {
    /// The device registers the 16x8x16 register mma for the dtype, the dims fit it, and the
    /// measured or tuned blocks (or smaller ones) fit the device.
    RegisterMma,
    /// No register mma for the dtype on this device, or dims it cannot hold.
    NoRegisterMma,
    /// The inputs' rows are not 16-byte chunks ([`Layout`]), which the mma kernels load.
    RowsNotChunked,
    /// The mma blocks do not fit the device, even the smallest.
    MmaDoesNotFit,
    /// No register mma for the dtype, but 16x16x16 cmma (the matrix path; gfx942 with
    /// rocWMMA, f16).
    Cmma,
    /// [`Tuning::backward_path`] asked for this path and the device can run it.
    Forced,
    /// [`Tuning::backward_path`] asked for the matrix path on a device without cmma for the
    /// dtype, and [`Tuning::matrix_stand_in`] for its scalar stand-in (tests).
    MatrixStandIn,
}

/// One gradient kernel's configuration, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct GradientPlan {
    pub config: GradientConfig,
    pub choice: GradientChoice,
    /// Shared memory of the device it was planned for, in bytes.
    pub device_shared_memory: usize,
}

/// The backward's plan: the delta preprocess (no choices), then dK/dV, then dQ.
#[derive(Debug, Clone, PartialEq)]
pub struct BackwardPlan {
    /// The dtype it was planned for.
    pub dtype: FloatKind,
    pub dkdv: GradientPlan,
    /// The dQ kernel's plan; not launched when the dK/dV kernel adds dQ itself
    /// ([`BackwardPlan::dq_accumulation`]).
    pub dq: GradientPlan,
}

/// How the backward sums dQ over the key/value blocks. Without a preference
/// ([`Tuning::backward_dq`] `None`) the planner takes the one pass where it measured faster
/// ([`ONE_PASS_MIN_KEYS`]), its own kernel elsewhere.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum DqAccumulation {
    /// Its own kernel (outer loop over query blocks, S and dP recomputed there), every sum in a
    /// fixed order: reruns are bit-identical (the deterministic backward,
    /// [`Tuning::deterministic`]).
    #[default]
    Kernel,
    /// The one-pass backward ([`crate::backward::dq_sink`]): the dK/dV kernel adds each block
    /// pair's share with f32 atomic adds, 5 products per pair instead of 7; dQ's last bits
    /// vary from run to run (the order in which the key blocks' shares arrive does). Every path
    /// (portable, mma, matrix), devices with f32 atomic add.
    Atomic,
}

/// Keys from which the planner, without a preference, takes the one-pass backward on the mma
/// path (devices with f32 atomic add). Measured on the H200 (bf16, forward + backward, one pass
/// with dQ added 4 f32 per request against the two-kernel backward, interleaved in one process,
/// 2026-12-03, 337d184, `benches/results/2026-12-03-h200-337d184/dq-ab.csv`), the two kernels'
/// time over the one pass's (means of three rounds), not causal / causal:
/// - 2048 keys and more: head dim 64 1.03 / 0.98 (N = 2048), 1.07 / 1.05 (4096); head dim 128
///   1.09 / 1.07 (2048), 1.12 / 1.13 (8192), 1.13 / 1.16 (32768);
/// - 1024 keys: head dim 64 0.97 / 0.91, head dim 32 0.89 / 0.87; 512 keys (host-bound) 0.99 /
///   1.05.
///
/// The portable path keeps dQ's kernel unless asked: its one pass is not measured. The matrix
/// path takes the one pass at every length (measured faster there down to 512 keys).
pub const ONE_PASS_MIN_KEYS: usize = 2048;

impl DqAccumulation {
    pub fn name(self) -> &'static str {
        match self {
            DqAccumulation::Kernel => "kernel",
            DqAccumulation::Atomic => "atomic",
        }
    }
}

impl core::str::FromStr for DqAccumulation {
    type Err = FlashError;

    /// `kernel` or `atomic`.
    fn from_str(text: &str) -> Result<Self, FlashError> {
        match text {
            "kernel" => Ok(DqAccumulation::Kernel),
            "atomic" => Ok(DqAccumulation::Atomic),
            other => Err(FlashError::InvalidTuning(format!("dq accumulation {other:?}: `kernel` or `atomic`"))),
        }
    }
}

impl BackwardPlan {
    /// How dQ is summed over the key/value blocks: by the dK/dV kernel's atomic adds where its
    /// config says so ([`PortableGradientConfig::atomic_dq`], [`MmaGradientConfig::atomic_dq`]),
    /// otherwise by its own kernel.
    pub fn dq_accumulation(&self) -> DqAccumulation {
        match self.dkdv.config {
            GradientConfig::Portable(PortableGradientConfig { atomic_dq: true, .. })
            | GradientConfig::Mma(MmaGradientConfig { atomic_dq: true, .. })
            | GradientConfig::Matrix(MatrixGradientConfig { atomic_dq: true, .. }) => DqAccumulation::Atomic,
            _ => DqAccumulation::Kernel,
        }
    }

    /// Whether the gradient kernels load q, k, v and d_out rows in 16-byte chunks.
    pub fn needs_chunked_rows(&self) -> bool {
        self.dkdv.config.path() == BackwardPath::Mma || self.dq.config.path() == BackwardPath::Mma
    }
}

impl fmt::Display for GradientChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GradientChoice::RegisterMma => "16x8x16 register mma is registered",
            GradientChoice::NoRegisterMma => "no 16x8x16 register mma for the dtype and dims",
            GradientChoice::RowsNotChunked => {
                "q, k, v, d_out rows are not contiguous 16-byte chunks, which the mma path loads"
            }
            GradientChoice::MmaDoesNotFit => "the mma blocks do not fit the device",
            GradientChoice::Cmma => "no 16x8x16 register mma for the dtype, 16x16x16 cmma is registered",
            GradientChoice::Forced => "asked for by the tuning",
            GradientChoice::MatrixStandIn => {
                "the matrix path asked for by the tuning, its scalar stand-in for cmma (no cmma here)"
            }
        })
    }
}

impl fmt::Display for GradientPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        let (block_q, block_kv) = c.blocks();
        write!(
            f,
            "{:?} kernel, {} path ({}): block_q = {block_q}, block_kv = {block_kv}, {} units",
            c.kernel(),
            c.path().name(),
            self.choice,
            c.units()
        )?;
        if let GradientConfig::Mma(mma) = c {
            write!(
                f,
                ", {} inner buffer(s){}{}",
                mma.buffers,
                if mma.async_inner { " filled by cp.async" } else { "" },
                if mma.never_masked { ", no masked pass" } else { "" },
            )?;
        }
        if let GradientConfig::Matrix(matrix) = c {
            write!(f, ", {} planes of {}", matrix.planes(), matrix.plane_size)?;
            if matrix.prefetch {
                write!(f, ", the next inner block fetched ahead")?;
            }
        }
        write!(f, ", {} of {} bytes of shared memory", c.shared_memory_bytes(), self.device_shared_memory)
    }
}

impl fmt::Display for BackwardPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.dq_accumulation() {
            DqAccumulation::Kernel => write!(f, "{}; {}", self.dkdv, self.dq),
            DqAccumulation::Atomic => write!(f, "{}, dQ by f32 atomic adds (one pass)", self.dkdv),
        }
    }
}

/// Plans both gradient kernels.
pub fn backward(
    caps: &DeviceCaps,
    problem: &AttentionProblem,
    layout: Layout,
    tuning: &Tuning,
) -> Result<BackwardPlan, FlashError> {
    problem.validate()?;
    caps.check_types(problem)?;
    tuning.validate()?;
    let mut dkdv = gradient(caps, problem, layout, tuning, BackwardKernel::KeyValue)?;
    let dq = gradient(caps, problem, layout, tuning, BackwardKernel::Query)?;
    // dQ by atomic adds in the dK/dV kernel where it can run and is wanted.
    one_pass::choose(caps, problem, tuning, &mut dkdv.config);
    Ok(BackwardPlan { dtype: problem.dtype, dkdv, dq })
}

/// One gradient kernel: the mma path where the device, dims and layout allow it and its
/// blocks (or smaller ones) fit; else the matrix path where the device registers cmma for the
/// dtype (f16 / bf16) and its blocks fit; else the portable path. [`Tuning::backward_path`]
/// puts its path first where the device can run it.
pub fn gradient(
    caps: &DeviceCaps,
    problem: &AttentionProblem,
    layout: Layout,
    tuning: &Tuning,
    kernel: BackwardKernel,
) -> Result<GradientPlan, FlashError> {
    let plan = |config, choice| GradientPlan { config, choice, device_shared_memory: caps.shared_memory() };
    let asked = tuning.backward_path;
    let forced = |choice| if asked == Some(BackwardPath::Mma) { GradientChoice::Forced } else { choice };
    if asked == Some(BackwardPath::Portable) {
        return Ok(plan(GradientConfig::Portable(portable_config(caps, problem, kernel)?), GradientChoice::Forced));
    }
    let mut choice = if !(caps.has_register_mma(problem.dtype) && mma_fits_registers(problem)) {
        GradientChoice::NoRegisterMma
    } else if !layout.rows_chunked {
        GradientChoice::RowsNotChunked
    } else {
        GradientChoice::MmaDoesNotFit
    };
    if choice == GradientChoice::MmaDoesNotFit && asked != Some(BackwardPath::Matrix) {
        let default = || mma_blocks::backward_default(problem.widest_dim());
        let mut blocks = Some(tuning.backward_mma.unwrap_or_else(default));
        while let Some(candidate) = blocks {
            let config = GradientConfig::Mma(mma_config(caps, problem, tuning, kernel, candidate));
            if fits(caps, &config) {
                return Ok(plan(config, forced(GradientChoice::RegisterMma)));
            }
            blocks = candidate.smaller();
        }
    }
    // The matrix path: where cmma is registered for the dtype (never f32: cmma would round it
    // to tf32) with a plane size the tiles divide; with the stand-in, wherever it is asked for.
    // bf16 on gfx942 with rocWMMA: f32 tiles on the f32 cmma (its bf16 fragments do not compile).
    let stand_in = asked == Some(BackwardPath::Matrix) && tuning.matrix_stand_in;
    let f32_tiles = (problem.dtype == FloatKind::BF16 && caps.has_bf16_through_f32_cmma())
        || (stand_in && tuning.matrix_f32_tiles);
    let tile_type = if f32_tiles { FloatKind::F32 } else { problem.dtype };
    let cmma = problem.dtype != FloatKind::F32
        && caps.has_matrix_units(tile_type)
        && caps.plane_size().is_multiple_of(MATRIX_TILE);
    // Without a preference it replaces the portable path only where the device has no
    // register mma for the dtype (not yet measured against it where the mma path cannot take
    // the layout or does not fit).
    let matrix_asked = asked == Some(BackwardPath::Matrix);
    let wide_scores = tuning.matrix_wide_scores.unwrap_or(super::MATRIX_GRADIENT_WIDE_SCORES);
    if ((cmma && (matrix_asked || choice == GradientChoice::NoRegisterMma)) || stand_in)
        && let Some(config) = matrix_config(caps, problem, kernel, !cmma, f32_tiles, wide_scores)
    {
        choice = match (matrix_asked, cmma) {
            (_, false) => GradientChoice::MatrixStandIn,
            (true, true) => GradientChoice::Forced,
            (false, true) => GradientChoice::Cmma,
        };
        // The stand-in runs on WGPU, which has no vector view of shared memory.
        let vector_loads =
            tuning.matrix_vector_loads.unwrap_or(super::MATRIX_VECTOR_LOADS) && !config.stand_in;
        // The streamed block: Q and dO rows for dK/dV, K and V rows for dQ.
        let prefetch = vector_loads
            && tuning.matrix_prefetch.unwrap_or(super::MATRIX_PREFETCH)
            && super::prefetch_registers(problem.dtype, config.inner_stream())
                <= super::MATRIX_PREFETCH_REGISTERS.1;
        // Plane syncs where the device has them; the stand-in synchronizes its cube (WGPU).
        let plane_sync = tuning.matrix_plane_softmax.unwrap_or(super::MATRIX_PLANE_SOFTMAX)
            && caps.has_plane_sync()
            && !config.stand_in;
        let config = MatrixGradientConfig { vector_loads, prefetch, plane_sync, ..config };
        return Ok(plan(GradientConfig::Matrix(config), choice));
    }
    Ok(plan(GradientConfig::Portable(portable_config(caps, problem, kernel)?), choice))
}

/// The mma path's config for `blocks`: `planes` planes of 16 outer (accumulated) rows, an inner
/// (streamed) block of `blocks.block_kv` rows.
fn mma_config(
    caps: &DeviceCaps,
    problem: &AttentionProblem,
    tuning: &Tuning,
    kernel: BackwardKernel,
    blocks: MmaBlocks,
) -> MmaGradientConfig {
    let MmaBlocks { planes, block_kv: inner, buffers, async_copy, .. } = tuning.streamed(blocks);
    let outer = planes * MATRIX_TILE;
    let (block_q, block_kv) = match kernel {
        BackwardKernel::KeyValue => (inner, outer),
        BackwardKernel::Query => (outer, inner),
    };
    let score = problem.score_options();
    MmaGradientConfig {
        kernel,
        block_q,
        block_kv,
        head_dim: problem.head_dim as u32,
        val_dim: problem.val_dim as u32,
        buffers,
        async_inner: async_copy && caps.copy_async(),
        score,
        atomic_dq: false,
        dq_width: 1,
        never_masked: never_masked(&score, problem.seq_kv, block_kv, Some((problem.seq_q, block_q))),
        rolled_steps: tuning.rolled_steps(),
        chunked_output: tuning.backward_chunked_output(),
    }
}

/// Largest candidate block not much larger than the sequence: bigger blocks only idle units.
fn useful_block(seq: usize) -> u32 {
    (seq.next_power_of_two() as u32).clamp(SMALLEST_USEFUL_BLOCK, BLOCK_CANDIDATES[0])
}

/// The portable path: the largest block pair that fits the device's shared memory, cube size
/// and the accumulator register budget. The outer (accumulated) block is favoured: it is
/// reused across the whole inner loop.
fn portable_config(
    caps: &DeviceCaps,
    problem: &AttentionProblem,
    kernel: BackwardKernel,
) -> Result<PortableGradientConfig, FlashError> {
    let (outer_seq, inner_seq) = match kernel {
        BackwardKernel::KeyValue => (problem.seq_kv, problem.seq_q),
        BackwardKernel::Query => (problem.seq_q, problem.seq_kv),
    };
    let (max_outer, max_inner) = (useful_block(outer_seq), useful_block(inner_seq));
    for outer in BLOCK_CANDIDATES.into_iter().filter(|&b| b <= max_outer) {
        for inner in BLOCK_CANDIDATES.into_iter().filter(|&b| b <= max_inner) {
            let (block_q, block_kv) = match kernel {
                BackwardKernel::KeyValue => (inner, outer),
                BackwardKernel::Query => (outer, inner),
            };
            let units = if block_q * block_kv >= UNITS_LARGE * ENTRIES_PER_UNIT_FOR_LARGE {
                UNITS_LARGE
            } else {
                UNITS_SMALL
            }
            .max(PLANES_PER_CUBE_AT_LEAST * caps.plane_size());
            let config = PortableGradientConfig {
                kernel,
                block_q,
                block_kv,
                head_dim: problem.head_dim as u32,
                val_dim: problem.val_dim as u32,
                units,
                score: problem.score_options(),
                atomic_dq: false,
            };
            if caps.fits(config.shared_memory_bytes(), config.units) && config.accumulators_per_unit() <= MAX_ACCUMULATORS_PER_UNIT {
                return Ok(config);
            }
        }
    }
    Err(FlashError::Device(format!(
        "head_dim {} / val_dim {} do not fit in {} bytes of shared memory with 1-row blocks",
        problem.head_dim,
        problem.val_dim,
        caps.shared_memory()
    )))
}

fn fits(caps: &DeviceCaps, config: &GradientConfig) -> bool {
    caps.fits(config.shared_memory_bytes(), config.units())
}
