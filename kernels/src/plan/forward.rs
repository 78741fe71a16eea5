//! The forward's path and blocks, from the problem, the device, the inputs' layout and the
//! tuning, with the reason for every choice.
use core::fmt;

use crate::config::{
    ForwardConfig, ForwardPath, MATRIX_TILE, MMA_CHUNK, MatrixConfig, MmaConfig, PortableConfig,
};
use crate::error::FlashError;
use crate::primitives::dot::DotSum;
use crate::problem::{AttentionProblem, FloatKind};

use super::device::DeviceCaps;
use super::mma_blocks;
use super::{
    Layout, MATRIX_PLANE_SOFTMAX, MATRIX_PREFETCH, MATRIX_PREFETCH_REGISTERS,
    MATRIX_STAGGERED, MATRIX_VECTOR_LOADS,
    Tuning, prefetch_registers,
};

mod matrix;
use matrix::matrix_config;

/// Fewest units sharing one query row on the portable path: enough to split a row's S and O
/// columns, few enough that the per-row reductions through shared memory stay short.
const PORTABLE_MIN_UNITS_PER_ROW: u32 = 4;
/// O accumulators one unit keeps in registers on the portable path, preferred and at most;
/// wider val_dims get more units per row. At 32, f16 variants with head_dim 128 spilled 2-8
/// VGPRs on gfx942 (docs/HIP.md, known gap 2), so 16 is preferred; 32 is kept where 16 leaves
/// no block that fits the shared memory (more units per row need wider key blocks: head_dim
/// 256 in lavapipe's 32 KiB). Beyond 32, lavapipe's per-invocation stacks overflow (whole
/// cubes then write nothing).
const PORTABLE_OUT_COLS_PER_UNIT: [u32; 2] = [16, 32];
/// Block sizes tried, largest first: powers of two keep the cube a whole number of planes on
/// every device; 8 is the smallest that still fills a lavapipe plane with 4 units per row.
const BLOCK_CANDIDATES: [u32; 4] = [64, 32, 16, 8];
/// Widest head_dim / val_dim tile the mma path keeps in registers (Q fragments, O
/// accumulators and the next block's K/V chunks must fit in 255 registers without spills).
const MMA_MAX_DIM: u32 = 128;

/// Why the forward takes its path.
#[derive(Debug, Clone, PartialEq)]
pub enum ForwardChoice {
    /// [`Tuning::forward_path`] asked for it.
    Forced,
    /// f32 inputs take the portable path: cmma would round them to tf32.
    F32Inputs,
    /// The device registers the 16x8x16 register mma for the dtype.
    RegisterMma,
    /// The register mma exists but the inputs' rows are not 16-byte chunks ([`Layout`]): the
    /// matrix path (which reads any strides) where cmma exists, else the portable path.
    RowsNotChunked,
    /// The device registers 16x16x16 cmma for the dtype (and the mma path cannot run it); or,
    /// for bf16 where the runtime's bf16 fragments do not compile (gfx942 with rocWMMA), f32
    /// cmma on f32 tiles (`MatrixConfig::f32_tiles`).
    Cmma,
    /// [`Tuning::forward_path`] asked for the matrix path on a device without cmma for the
    /// dtype, and [`Tuning::matrix_stand_in`] for its scalar stand-in (tests).
    MatrixStandIn,
    /// cmma exists but its tiles do not fit the shared memory (e.g. head_dim 256 in 64 KiB).
    MatrixDoesNotFit,
    /// No matrix units for the dtype.
    NoMatrixUnits,
}

/// How the blocks were chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockChoice {
    /// The largest blocks that fit the device (portable and matrix paths).
    LargestFitting,
    /// The H200-measured mma blocks ([`mma_blocks::forward_default`]).
    Measured,
    /// [`Tuning::forward_mma`].
    Tuned,
    /// The measured or tuned mma blocks did not fit: the largest smaller ones that do.
    Shrunk,
}

/// The forward's kernel configuration, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct ForwardPlan {
    pub config: ForwardConfig,
    pub dtype: FloatKind,
    pub choice: ForwardChoice,
    pub blocks: BlockChoice,
    /// Shared memory of the device it was planned for, in bytes.
    pub device_shared_memory: usize,
}

impl ForwardPlan {
    /// Whether the kernel loads q, k, v rows in 16-byte chunks: then every one of them must be
    /// contiguous in its last dimension, with strides and offset multiples of a chunk.
    pub fn needs_chunked_rows(&self) -> bool {
        self.config.path() == ForwardPath::Mma
    }
}

impl fmt::Display for ForwardChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ForwardChoice::Forced => "forced by the tuning",
            ForwardChoice::F32Inputs => "f32 inputs: cmma would round them to tf32",
            ForwardChoice::RegisterMma => "16x8x16 register mma is registered",
            ForwardChoice::RowsNotChunked => {
                "q, k, v rows are not contiguous 16-byte chunks, which the mma path loads"
            }
            ForwardChoice::Cmma => "16x16x16 cmma is registered",
            ForwardChoice::MatrixStandIn => {
                "the matrix path asked for by the tuning, its scalar stand-in for cmma (no cmma here)"
            }
            ForwardChoice::MatrixDoesNotFit => {
                "16x16x16 cmma is registered, but the matrix tiles do not fit the shared memory"
            }
            ForwardChoice::NoMatrixUnits => "no 16x16x16 cmma for the dtype on this device",
        })
    }
}

impl fmt::Display for ForwardPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let config = &self.config;
        write!(f, "{} path ({:?}: {}); ", config.path().name(), self.dtype, self.choice)?;
        match config {
            ForwardConfig::Mma(mma) => write!(
                f,
                "{} planes of {} rows, block_q = {}, block_kv = {}, {} key/value buffer(s){}{}",
                mma.planes,
                mma.plane_rows,
                mma.block_q(),
                mma.block_kv,
                mma.kv_buffers,
                if mma.async_kv { " filled by cp.async" } else { "" },
                if mma.never_masked { ", no masked pass" } else { "" },
            )?,
            ForwardConfig::Matrix(matrix) => write!(
                f,
                "block_q = {}, block_kv = {}, {} planes of {}{}{}{}",
                matrix.block_q,
                matrix.block_kv,
                matrix.num_planes(),
                matrix.plane_size,
                if matrix.f32_tiles { ", tiles in f32" } else { "" },
                if matrix.prefetch { ", the next key/value block fetched ahead" } else { "" },
                if matrix.shared_stage { ", S and O staged in one tile" } else { "" },
            )?,
            _ => write!(f, "block_q = {}, block_kv = {}", config.block_q(), config.block_kv())?,
        }
        let blocks = match self.blocks {
            BlockChoice::LargestFitting => "the largest that fit",
            BlockChoice::Measured => "the H200-measured blocks",
            BlockChoice::Tuned => "the tuning's blocks",
            BlockChoice::Shrunk => "smaller than the measured or tuned blocks, which do not fit",
        };
        write!(
            f,
            ": {blocks}, {} of {} bytes of shared memory",
            config.shared_memory_bytes(),
            self.device_shared_memory
        )?;
        match config {
            ForwardConfig::Portable(PortableConfig { precise_math: true, dot: DotSum::Wide, .. }) => {
                write!(f, "; f32 outputs: ~1 ulp exp/ln and q·k summed in f64")
            }
            ForwardConfig::Portable(PortableConfig { precise_math: true, dot: DotSum::Compensated, .. }) => write!(
                f,
                "; f32 outputs: ~1 ulp exp/ln and q·k summed in compensated f32 (no f64 on this device)"
            ),
            _ => Ok(()),
        }
    }
}

/// Picks the forward's path (`tuning.forward_path`, else: f32 portable, then the register mma
/// where the dtype, dims and layout allow it, then cmma, then portable) and its blocks.
pub fn forward(
    caps: &DeviceCaps,
    problem: &AttentionProblem,
    layout: Layout,
    tuning: &Tuning,
) -> Result<ForwardPlan, FlashError> {
    problem.validate()?;
    tuning.validate()?;
    caps.check_types(problem)?;
    let dtype = problem.dtype;
    // The matrix path: where cmma is registered for the tiles' type; with the stand-in,
    // wherever it is asked for. bf16 on gfx942 with rocWMMA: f32 tiles on the f32 cmma (its
    // bf16 fragments do not compile).
    let stand_in = tuning.forward_path == Some(ForwardPath::Matrix) && tuning.matrix_stand_in;
    let f32_tiles = (dtype == FloatKind::BF16 && caps.has_bf16_through_f32_cmma())
        || (stand_in && tuning.matrix_f32_tiles);
    // Never on f32 inputs: cmma would round them to tf32.
    let matrix = dtype != FloatKind::F32 && caps.has_matrix_units(if f32_tiles { FloatKind::F32 } else { dtype });
    let stand_in = stand_in && !matrix;
    let mma = caps.has_register_mma(dtype) && mma_fits_registers(problem);
    let (path, choice) = match tuning.forward_path {
        Some(ForwardPath::Matrix) if stand_in => (ForwardPath::Matrix, ForwardChoice::MatrixStandIn),
        Some(ForwardPath::Matrix) if !matrix => {
            return Err(FlashError::Device(format!(
                "the matrix path was forced but no 16x16x16 {dtype:?} cmma is registered{}",
                if dtype == FloatKind::F32 { " (f32 inputs never take it: cmma would round them to tf32)" } else { "" }
            )));
        }
        Some(ForwardPath::Mma) if !layout.rows_chunked => {
            return Err(FlashError::Device(
                "the mma path was forced but q, k, v rows are not contiguous 16-byte chunks".into(),
            ));
        }
        Some(path) => (path, ForwardChoice::Forced),
        None if dtype == FloatKind::F32 => (ForwardPath::Portable, ForwardChoice::F32Inputs),
        None if mma && layout.rows_chunked => (ForwardPath::Mma, ForwardChoice::RegisterMma),
        None if matrix && mma => (ForwardPath::Matrix, ForwardChoice::RowsNotChunked),
        None if matrix => (ForwardPath::Matrix, ForwardChoice::Cmma),
        None if mma => (ForwardPath::Portable, ForwardChoice::RowsNotChunked),
        None => (ForwardPath::Portable, ForwardChoice::NoMatrixUnits),
    };
    let (config, choice, blocks) = match path {
        ForwardPath::Portable => (
            ForwardConfig::Portable(portable_config(caps, problem)?),
            choice,
            BlockChoice::LargestFitting,
        ),
        ForwardPath::Mma => {
            let (config, blocks) = mma_config(caps, problem, tuning)?;
            (ForwardConfig::Mma(config), choice, blocks)
        }
        ForwardPath::Matrix => match (matrix_config(caps, problem, stand_in, f32_tiles, tuning), tuning.forward_path) {
            (Ok(config), _) => {
                // The stand-in runs on WGPU, which has no vector view of shared memory.
                let vector_loads =
                    tuning.matrix_vector_loads.unwrap_or(MATRIX_VECTOR_LOADS) && !config.stand_in;
                let prefetch = vector_loads
                    && tuning.matrix_prefetch.unwrap_or(MATRIX_PREFETCH)
                    && prefetch_registers(problem.dtype, config.kv_stream())
                        <= MATRIX_PREFETCH_REGISTERS.0;
                let staggered = tuning.matrix_staggered.unwrap_or(MATRIX_STAGGERED);
                // The stand-in keeps its softmax in shared memory: it runs where planes have
                // no operations (lavapipe).
                let plane_shuffles = tuning.matrix_plane_softmax.unwrap_or(MATRIX_PLANE_SOFTMAX)
                    && caps.has_plane_ops()
                    && !config.stand_in;
                let plane_sync = plane_shuffles && caps.has_plane_sync();
                let config = MatrixConfig {
                    vector_loads,
                    prefetch,
                    staggered,
                    plane_shuffles,
                    plane_sync,
                    ..config
                };
                (ForwardConfig::Matrix(config), choice, BlockChoice::LargestFitting)
            }
            (Err(error), Some(_)) => return Err(error),
            // The matrix tiles need more shared memory (e.g. head_dim 256 in MI300's 64 KiB):
            // the portable path, whose f32 tiles are smaller, still runs the problem.
            (Err(_), None) => (
                ForwardConfig::Portable(portable_config(caps, problem)?),
                ForwardChoice::MatrixDoesNotFit,
                BlockChoice::LargestFitting,
            ),
        },
    };
    if config.units() > caps.max_units() {
        return Err(FlashError::Device(format!(
            "{} units per cube > the device's {}",
            config.units(),
            caps.max_units()
        )));
    }
    let q_blocks = problem.seq_q.div_ceil(config.block_q() as usize);
    let (max_x, max_y, _) = caps.properties().hardware.max_cube_count;
    if q_blocks > max_x as usize || problem.heads_total() > max_y as usize {
        return Err(FlashError::Device(format!(
            "grid ({q_blocks} query blocks, {} heads) exceeds the device's ({max_x}, {max_y})",
            problem.heads_total()
        )));
    }
    Ok(ForwardPlan { config, dtype, choice, blocks, device_shared_memory: caps.shared_memory() })
}

/// f32 outputs get the ~1 ulp exp / ln (WGSL's built-in exp may be off by 3 + 2|x| ulp) and,
/// where the device has f64, q·k summed in f64 (an f32 sum of head_dim products carries
/// several ulps): the FlashAttention rule holds f32 outputs to a few ulps of the exact result.
/// f16 / bf16 outputs round far above both errors.
fn precise_math(dtype: FloatKind) -> bool {
    dtype == FloatKind::F32
}

/// Largest power of two >= `n`, at least the smallest candidate: blocks larger than the
/// sequence only waste units.
fn useful_block(n: usize) -> u32 {
    let smallest = BLOCK_CANDIDATES[BLOCK_CANDIDATES.len() - 1];
    (n.next_power_of_two() as u32).max(smallest)
}

/// Units per query row on the portable path: a power of two, at least
/// PORTABLE_MIN_UNITS_PER_ROW, enough that no unit holds more than `out_cols` O columns.
fn portable_units_per_row(val_dim: u32, out_cols: u32) -> u32 {
    val_dim
        .div_ceil(out_cols)
        .next_power_of_two()
        .max(PORTABLE_MIN_UNITS_PER_ROW)
}

fn portable_config(caps: &DeviceCaps, problem: &AttentionProblem) -> Result<PortableConfig, FlashError> {
    let base = PortableConfig {
        block_q: 0,
        block_kv: 0,
        head_dim: problem.head_dim as u32,
        val_dim: problem.val_dim as u32,
        units_per_row: 0,
        precise_math: precise_math(problem.dtype),
        dot: match (precise_math(problem.dtype), caps.has_f64()) {
            (false, _) => DotSum::Plain,
            (true, true) => DotSum::Wide,
            (true, false) => DotSum::Compensated,
        },
        quiet_softmax: problem.quiet_softmax,
        score: problem.score_options(),
    };
    let max_kv = useful_block(problem.seq_kv);
    for out_cols in PORTABLE_OUT_COLS_PER_UNIT {
        let lanes = portable_units_per_row(problem.val_dim as u32, out_cols);
        // At least one whole plane of units (a 32-unit cube would leave half a wave64 idle).
        let whole_plane = caps.plane_size().div_ceil(lanes);
        let max_q = useful_block(problem.seq_q).max(whole_plane);
        for block_q in BLOCK_CANDIDATES.into_iter().filter(|&b| b <= max_q) {
            // Every unit of a row owns at least one S column: block_kv >= units_per_row.
            for block_kv in BLOCK_CANDIDATES
                .into_iter()
                .filter(|&b| b <= max_kv.max(lanes) && b >= lanes)
            {
                let config = PortableConfig { block_q, block_kv, units_per_row: lanes, ..base };
                if caps.fits(config.shared_memory_bytes(), config.units()) {
                    return Ok(config);
                }
            }
        }
    }
    Err(too_big(caps, problem))
}

/// Whether the mma paths hold the problem's rows in registers and load them in whole chunks.
pub(crate) fn mma_fits_registers(problem: &AttentionProblem) -> bool {
    let dims = [problem.head_dim as u32, problem.val_dim as u32];
    dims.iter()
        .all(|&d| d.is_multiple_of(MMA_CHUNK) && d.next_multiple_of(MATRIX_TILE) <= MMA_MAX_DIM)
}

/// The mma forward's config: the tuned or measured blocks, or (on devices with less shared
/// memory than the H200's 227 KiB, about 100 KiB on consumer Ampere / Ada) the largest smaller
/// blocks that fit.
fn mma_config(
    caps: &DeviceCaps,
    problem: &AttentionProblem,
    tuning: &Tuning,
) -> Result<(MmaConfig, BlockChoice), FlashError> {
    let tuned = tuning.forward_mma;
    if !caps.has_register_mma(problem.dtype) || !mma_fits_registers(problem) {
        return Err(FlashError::Device(format!(
            "the mma path needs a 16x8x16 {:?} register mma, plane size 32, and head_dim / \
             val_dim multiples of {MMA_CHUNK} up to {MMA_MAX_DIM} (got {} / {})",
            problem.dtype, problem.head_dim, problem.val_dim
        )));
    }
    let first = tuned.unwrap_or_else(|| mma_blocks::forward_default(problem.causal, problem.widest_dim()));
    let mut blocks = Some(first);
    while let Some(candidate) = blocks {
        let config = tuning.streamed(candidate).forward_config(caps, problem, tuning);
        if caps.fits(config.shared_memory_bytes(), config.units()) {
            let choice = match (candidate == first, tuned.is_some()) {
                (false, _) => BlockChoice::Shrunk,
                (true, true) => BlockChoice::Tuned,
                (true, false) => BlockChoice::Measured,
            };
            return Ok((config, choice));
        }
        blocks = candidate.smaller();
    }
    Err(too_big(caps, problem))
}

fn too_big(caps: &DeviceCaps, problem: &AttentionProblem) -> FlashError {
    FlashError::Device(format!(
        "head_dim {} / val_dim {} do not fit in {} bytes of shared memory with the smallest blocks",
        problem.head_dim,
        problem.val_dim,
        caps.shared_memory()
    ))
}
