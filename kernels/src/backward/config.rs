//! The ONE comptime configuration of the backward kernels ([`super::dkdv`] and [`super::dq`]),
//! and how it is chosen from the problem and `client.properties()`.
//!
//! Both kernels work on a pair of blocks at a time: `block_q` query rows (with their `d_out`,
//! lse and delta) against `block_kv` key/value rows. dK/dV iterate over query blocks for a fixed
//! key/value block; dQ iterates over key/value blocks for a fixed query block. Every tile lives
//! in shared memory as f32; the accumulators live in registers.
use cubecl::ir::DeviceProperties;

use crate::config::{ASYNC_BARRIER_BYTES, MATRIX_TILE, MMA_CHUNK};
use crate::error::FlashError;
use crate::heuristics::mma_blocks::{self, MmaBlocks};
use crate::heuristics::{has_register_mma, mma_fits_registers};
use crate::primitives::chunk_io::{PairShape, tile_stride};
use crate::primitives::score::ScoreOptions;
use crate::problem::AttentionProblem;

/// Bytes of one f32: every staged tile and every accumulator is f32.
const F32_BYTES: usize = 4;
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
/// Rows of the inner block summed plainly before they join a compensated sum (see
/// [`BackwardConfig::sum_group`]).
const SUM_GROUP: u32 = 4;
/// Register budget of the accumulators of one unit (f32 values, the sums and their Kahan
/// compensations): beyond this the compilers spill to local memory, which costs more
/// than smaller blocks. At 128, 26 of the 516 portable dK/dV and dQ variants compiled for
/// gfx942 spilled VGPRs (up to 178, with 256 VGPRs and 256 AGPRs in use); at 64 none does
/// (`scripts/hip_offline_check.sh`, docs/HIP.md).
const MAX_ACCUMULATORS_PER_UNIT: u32 = 64;

/// Which gradient kernel a configuration is for: they hold different tiles and accumulators.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum BackwardKernel {
    /// Outer loop over key/value blocks; accumulates dK and dV.
    KeyValue,
    /// Outer loop over query blocks; accumulates dQ.
    Query,
}

/// How the block pairs are multiplied.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum BackwardPath {
    /// Scalar f32 FMAs on f32 shared-memory tiles, Kahan-compensated sums: runs everywhere.
    Portable,
    /// Register-level 16x8x16 mma, P and dS reused as A operands in registers
    /// ([`super::mma`]). Same requirements as the forward's mma path.
    Mma,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct BackwardConfig {
    pub path: BackwardPath,
    pub kernel: BackwardKernel,
    /// Query rows per tile.
    pub block_q: u32,
    /// Key/value rows per tile.
    pub block_kv: u32,
    /// Exact head_dim (q, k columns).
    pub head_dim: u32,
    /// Exact val_dim (v, o, d_out columns).
    pub val_dim: u32,
    /// Units per cube (1D).
    pub units: u32,
    /// Mma path: shared-memory buffers of the inner block (see
    /// [`crate::heuristics::mma_blocks::backward`]); 1 elsewhere.
    pub buffers: u32,
    /// Mma path: the inner block arrives by `cp.async` (see `primitives::pair_stream`)
    /// instead of through registers. False elsewhere.
    pub async_inner: bool,
    pub score: ScoreOptions,
}

impl BackwardConfig {
    /// Row length of the Q and K tiles: head_dim made odd, so that units reading one column of
    /// consecutive rows hit different shared-memory banks.
    pub fn head_dim_tile(&self) -> u32 {
        self.head_dim | 1
    }

    /// Row length of the d_out and V tiles (odd, for the same reason).
    pub fn val_dim_tile(&self) -> u32 {
        self.val_dim | 1
    }

    /// Row length of the P and dS tiles: block_kv + 1 so that rows start in different banks.
    pub fn score_tile_cols(&self) -> u32 {
        self.block_kv + 1
    }

    /// Score entries of one block pair.
    pub fn entries(&self) -> u32 {
        self.block_q * self.block_kv
    }

    /// Score entries each unit computes per block pair.
    pub fn entries_per_unit(&self) -> u32 {
        self.entries().div_ceil(self.units)
    }

    /// Rows of the accumulated gradients: block_kv for dK/dV, block_q for dQ.
    pub fn accumulated_rows(&self) -> u32 {
        match self.kernel {
            BackwardKernel::KeyValue => self.block_kv,
            BackwardKernel::Query => self.block_q,
        }
    }

    /// Elements of the head_dim-wide gradient (dK or dQ) each unit accumulates.
    pub fn head_acc_per_unit(&self) -> u32 {
        (self.accumulated_rows() * self.head_dim).div_ceil(self.units)
    }

    /// Elements of dV each unit accumulates (dK/dV kernel only; 0 for dQ).
    pub fn val_acc_per_unit(&self) -> u32 {
        match self.kernel {
            BackwardKernel::KeyValue => (self.block_kv * self.val_dim).div_ceil(self.units),
            BackwardKernel::Query => 0,
        }
    }

    /// f32 registers of accumulators per unit: the sums and their compensations.
    pub fn accumulators_per_unit(&self) -> u32 {
        2 * (self.head_acc_per_unit() + self.val_acc_per_unit())
    }

    /// Inner-block rows summed plainly before the group sum joins a compensated total: a short
    /// chain of small partial sums, and a quarter of the compensation work. Block sizes are
    /// powers of two, so the group divides the block.
    pub fn sum_group(&self) -> u32 {
        let inner = match self.kernel {
            BackwardKernel::KeyValue => self.block_q,
            BackwardKernel::Query => self.block_kv,
        };
        SUM_GROUP.min(inner)
    }

    /// Whether the P tile is kept (dV needs it; dQ only needs dS).
    pub fn keeps_p(&self) -> bool {
        self.kernel == BackwardKernel::KeyValue
    }

    /// Elements of the P tile (1 when it is not kept: shared arrays cannot be empty).
    pub fn p_tile_len(&self) -> u32 {
        if self.keeps_p() {
            self.block_q * self.score_tile_cols()
        } else {
            1
        }
    }

    /// Row length, in 8-element chunks, of the mma path's Q and K tiles (one chunk of padding:
    /// see [`crate::primitives::mma`]).
    pub fn mma_head_stride(&self) -> u32 {
        tile_stride(self.head_dim)
    }

    /// 16-column mma steps over head_dim (padded to the tile).
    pub fn mma_head_steps(&self) -> u32 {
        self.head_dim.div_ceil(MATRIX_TILE)
    }

    /// 16-column mma steps over val_dim (padded to the tile).
    pub fn mma_val_steps(&self) -> u32 {
        self.val_dim.div_ceil(MATRIX_TILE)
    }

    /// Row length, in chunks, of the mma path's dO and V tiles.
    pub fn mma_val_stride(&self) -> u32 {
        tile_stride(self.val_dim)
    }

    /// Mma path: rows of the inner block (dK/dV: query rows, dQ: key rows).
    pub fn inner_rows(&self) -> u32 {
        match self.kernel {
            BackwardKernel::KeyValue => self.block_q,
            BackwardKernel::Query => self.block_kv,
        }
    }

    /// Mma path: the inner block streamed through shared memory (Q and dO, or K and V).
    pub fn mma_inner_pair(&self) -> PairShape {
        PairShape {
            rows: self.inner_rows(),
            first_dim: self.head_dim,
            second_dim: self.val_dim,
            units: self.units,
        }
    }

    /// Shared memory the kernel declares, in bytes.
    pub fn shared_memory_bytes(&self) -> usize {
        let (bq, bkv) = (self.block_q as usize, self.block_kv as usize);
        if self.path == BackwardPath::Mma {
            // The inner block's tiles hold `buffers` blocks.
            let rows = bq + bkv + (self.buffers as usize - 1) * self.inner_rows() as usize;
            let chunks = rows * (self.mma_head_stride() + self.mma_val_stride()) as usize;
            let chunk_bytes = MMA_CHUNK as usize * 2;
            let row_stats = match self.kernel {
                BackwardKernel::KeyValue => 2 * self.buffers as usize * bq * F32_BYTES,
                BackwardKernel::Query => 0,
            };
            let barrier = if self.async_inner {
                ASYNC_BARRIER_BYTES
            } else {
                0
            };
            return chunks * chunk_bytes + row_stats + barrier;
        }
        let rows_dims = (bq + bkv) * (self.head_dim_tile() + self.val_dim_tile()) as usize;
        let ds = bq * self.score_tile_cols() as usize;
        // lse and delta of the query block.
        let row_stats = 2 * bq;
        (rows_dims + ds + self.p_tile_len() as usize + row_stats) * F32_BYTES
    }

    fn fits(&self, props: &DeviceProperties) -> bool {
        if self.path == BackwardPath::Mma {
            return self.shared_memory_bytes() <= props.hardware.max_shared_memory_size
                && self.units <= props.hardware.max_units_per_cube;
        }
        self.shared_memory_bytes() <= props.hardware.max_shared_memory_size
            && self.units <= props.hardware.max_units_per_cube
            && self.accumulators_per_unit() <= MAX_ACCUMULATORS_PER_UNIT
    }
}

/// A chosen configuration and why.
#[derive(Debug, Clone, PartialEq)]
pub struct BackwardPlan {
    pub config: BackwardConfig,
    pub reason: String,
}

/// Smallest block the planner starts from, however short the sequence: blocks of 1-4 rows
/// leave most of a 128-unit cube idle and, at head_dim 128, spilled scalar registers on gfx942
/// (docs/HIP.md, known gap 2). Smaller candidates remain for fitting wide heads.
const SMALLEST_USEFUL_BLOCK: u32 = 8;

/// Largest candidate block not much larger than the sequence: bigger blocks only idle units.
fn useful_block(seq: usize) -> u32 {
    (seq.next_power_of_two() as u32).clamp(SMALLEST_USEFUL_BLOCK, BLOCK_CANDIDATES[0])
}

/// Picks the largest block pair that fits the device's shared memory, cube size and the
/// accumulator register budget. The outer (accumulated) block is favoured: it is reused across
/// the whole inner loop.
pub fn plan_backward(
    props: &DeviceProperties,
    problem: &AttentionProblem,
    kernel: BackwardKernel,
) -> Result<BackwardPlan, FlashError> {
    problem.validate()?;
    if has_register_mma(props, problem.dtype) && mma_fits_registers(problem) {
        let MmaBlocks {
            planes,
            block_kv: inner,
            buffers,
            async_copy,
            ..
        } = mma_blocks::backward();
        let outer = planes * MATRIX_TILE;
        let (block_q, block_kv) = match kernel {
            BackwardKernel::KeyValue => (inner, outer),
            BackwardKernel::Query => (outer, inner),
        };
        let config = BackwardConfig {
            path: BackwardPath::Mma,
            kernel,
            block_q,
            block_kv,
            head_dim: problem.head_dim as u32,
            val_dim: problem.val_dim as u32,
            units: planes * crate::primitives::mma::LANES,
            buffers,
            async_inner: async_copy && props.features.copy_async,
            score: problem.score_options(),
        };
        if config.fits(props) {
            let reason = format!(
                "{kernel:?} kernel, mma path (16x8x16 {:?} register mma): block_q = {block_q}, \
                 block_kv = {block_kv}, {buffers} inner buffer(s){}, {} bytes of shared memory",
                problem.dtype,
                if config.async_inner {
                    " filled by cp.async"
                } else {
                    ""
                },
                config.shared_memory_bytes()
            );
            return Ok(BackwardPlan { config, reason });
        }
    }
    plan_backward_portable(props, problem, kernel)
}

/// [`plan_backward`] restricted to the portable path (inputs the mma path cannot load).
pub fn plan_backward_portable(
    props: &DeviceProperties,
    problem: &AttentionProblem,
    kernel: BackwardKernel,
) -> Result<BackwardPlan, FlashError> {
    problem.validate()?;
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
            .max(PLANES_PER_CUBE_AT_LEAST * props.hardware.plane_size_max);
            let config = BackwardConfig {
                path: BackwardPath::Portable,
                kernel,
                block_q,
                block_kv,
                head_dim: problem.head_dim as u32,
                val_dim: problem.val_dim as u32,
                units,
                buffers: 1,
                async_inner: false,
                score: problem.score_options(),
            };
            if config.fits(props) {
                let reason = format!(
                    "{kernel:?} kernel: block_q = {block_q}, block_kv = {block_kv}, {units} units: \
                     largest that fit {} of {} bytes of shared memory and {} accumulators per unit",
                    config.shared_memory_bytes(),
                    props.hardware.max_shared_memory_size,
                    MAX_ACCUMULATORS_PER_UNIT
                );
                return Ok(BackwardPlan { config, reason });
            }
        }
    }
    Err(FlashError::Device(format!(
        "head_dim {} / val_dim {} do not fit in {} bytes of shared memory with 1-row blocks",
        problem.head_dim, problem.val_dim, props.hardware.max_shared_memory_size
    )))
}
