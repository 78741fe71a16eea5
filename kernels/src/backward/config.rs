//! The comptime configurations of the gradient kernels, one type per kernel family:
//! [`PortableGradientConfig`] ([`super::dkdv`], [`super::dq`]), [`MmaGradientConfig`]
//! ([`super::mma`]) and [`MatrixGradientConfig`] ([`super::matrix`]);
//! [`crate::plan::backward`] chooses them.
//!
//! Both kernels work on a pair of blocks at a time: `block_q` query rows (with their `d_out`,
//! lse and delta) against `block_kv` key/value rows. dK/dV iterate over query blocks for a fixed
//! key/value block; dQ iterates over key/value blocks for a fixed query block.
use crate::config::{ASYNC_BARRIER_BYTES, MATRIX_TILE, MMA_CHUNK, MMA_ELEM_BYTES};
use crate::primitives::arena::Carver;
use crate::primitives::chunk_io::{CHUNK_PAIRS, PairShape, tile_stride};
use crate::primitives::mma::LANES as MMA_LANES;
use crate::primitives::score::ScoreOptions;

mod matrix;
pub use matrix::MatrixGradientConfig;
pub(crate) use matrix::ROWS_PER_PAIRING;

/// Bytes of one f32: every staged tile of the portable kernels and every accumulator is f32.
const F32_BYTES: usize = 4;

/// Rows of the inner block summed plainly before they join a compensated sum (see
/// [`PortableGradientConfig::sum_group`]).
const SUM_GROUP: u32 = 4;

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
    /// 16x16x16 `cmma` fragments on tiles staged in the dtype, S, dP, P and dS through shared
    /// memory ([`super::matrix`]): where the device registers cmma for the dtype but not the
    /// register mma (gfx942 with rocWMMA, f16).
    Matrix,
}

impl core::str::FromStr for BackwardPath {
    type Err = crate::error::FlashError;

    /// `portable`, `mma` or `matrix`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let paths = [BackwardPath::Portable, BackwardPath::Mma, BackwardPath::Matrix];
        crate::error::parse_named(text, &paths, BackwardPath::name, "backward path")
    }
}

impl BackwardPath {
    pub fn name(self) -> &'static str {
        match self {
            BackwardPath::Portable => "portable",
            BackwardPath::Mma => "mma",
            BackwardPath::Matrix => "matrix",
        }
    }
}

/// The gradient kernel one plan launches, with its configuration.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum GradientConfig {
    Portable(PortableGradientConfig),
    Mma(MmaGradientConfig),
    Matrix(MatrixGradientConfig),
}

impl GradientConfig {
    pub fn path(&self) -> BackwardPath {
        match self {
            GradientConfig::Portable(_) => BackwardPath::Portable,
            GradientConfig::Mma(_) => BackwardPath::Mma,
            GradientConfig::Matrix(_) => BackwardPath::Matrix,
        }
    }

    pub fn kernel(&self) -> BackwardKernel {
        match self {
            GradientConfig::Portable(c) => c.kernel,
            GradientConfig::Mma(c) => c.kernel,
            GradientConfig::Matrix(c) => c.kernel,
        }
    }

    /// (block_q, block_kv): query rows and key/value rows of one block pair.
    pub fn blocks(&self) -> (u32, u32) {
        match self {
            GradientConfig::Portable(c) => (c.block_q, c.block_kv),
            GradientConfig::Mma(c) => (c.block_q, c.block_kv),
            GradientConfig::Matrix(c) => (c.block_q, c.block_kv),
        }
    }

    /// Units per cube.
    pub fn units(&self) -> u32 {
        match self {
            GradientConfig::Portable(c) => c.units,
            GradientConfig::Mma(c) => c.units(),
            GradientConfig::Matrix(c) => c.units(),
        }
    }

    /// Shared memory the kernel declares, in bytes.
    pub fn shared_memory_bytes(&self) -> usize {
        match self {
            GradientConfig::Portable(c) => c.shared_memory_bytes(),
            GradientConfig::Mma(c) => c.shared_memory_bytes(),
            GradientConfig::Matrix(c) => c.shared_memory_bytes(),
        }
    }

    /// Exact (head_dim, val_dim) it was made for.
    pub fn dims(&self) -> (u32, u32) {
        match self {
            GradientConfig::Portable(c) => (c.head_dim, c.val_dim),
            GradientConfig::Mma(c) => (c.head_dim, c.val_dim),
            GradientConfig::Matrix(c) => (c.head_dim, c.val_dim),
        }
    }

    pub fn score(&self) -> ScoreOptions {
        match self {
            GradientConfig::Portable(c) => c.score,
            GradientConfig::Mma(c) => c.score,
            GradientConfig::Matrix(c) => c.score,
        }
    }
}

/// Rows of the block a kernel accumulates over its whole run (dK/dV: key rows, dQ: query
/// rows), and of the block it streams (the other one).
fn outer_inner(kernel: BackwardKernel, block_q: u32, block_kv: u32) -> (u32, u32) {
    match kernel {
        BackwardKernel::KeyValue => (block_kv, block_q),
        BackwardKernel::Query => (block_q, block_kv),
    }
}

/// The portable gradient kernels: every tile in shared memory as f32, the accumulators (and
/// their Kahan compensations) in registers, `units` units in a 1D cube.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct PortableGradientConfig {
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
    pub score: ScoreOptions,
    /// dK/dV kernel only: also add every block pair's `dS K` to an f32 dQ accumulator with
    /// atomic adds (the one-pass backward, [`super::dq_sink`]); no dQ kernel runs then.
    pub atomic_dq: bool,
}

impl PortableGradientConfig {
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
        outer_inner(self.kernel, self.block_q, self.block_kv).0
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
        SUM_GROUP.min(outer_inner(self.kernel, self.block_q, self.block_kv).1)
    }

    /// Whether the P tile is kept (dV needs it; dQ only needs dS).
    pub fn keeps_p(&self) -> bool {
        self.kernel == BackwardKernel::KeyValue
    }

    /// Elements of the P tile (0 when it is not kept).
    pub fn p_tile_len(&self) -> u32 {
        if self.keeps_p() { self.block_q * self.score_tile_cols() } else { 0 }
    }

    /// Where each tile of [`super::block_pair::BlockPairTiles`] lies in the kernel's one shared
    /// f32 allocation.
    pub fn tile_layout(&self) -> PairTileLayout {
        let mut at = Carver::default();
        let (bq, bkv) = (self.block_q, self.block_kv);
        PairTileLayout {
            q: at.take(bq * self.head_dim_tile()),
            d_out: at.take(bq * self.val_dim_tile()),
            k: at.take(bkv * self.head_dim_tile()),
            v: at.take(bkv * self.val_dim_tile()),
            p: at.take(self.p_tile_len()),
            ds: at.take(bq * self.score_tile_cols()),
            lse: at.take(bq),
            delta: at.take(bq),
            len: at.end(),
        }
    }

    /// Shared memory the kernel declares, in bytes.
    pub fn shared_memory_bytes(&self) -> usize {
        self.tile_layout().len * F32_BYTES
    }
}

/// `[start, end)` in f32 elements of each tile of a block pair inside the kernel's one shared
/// allocation, in this order (one allocation, so that the kernel is generated the same in every
/// run: see [`crate::primitives::arena`]).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct PairTileLayout {
    pub q: (usize, usize),
    pub d_out: (usize, usize),
    pub k: (usize, usize),
    pub v: (usize, usize),
    pub p: (usize, usize),
    pub ds: (usize, usize),
    pub lse: (usize, usize),
    pub delta: (usize, usize),
    /// Elements of the whole allocation.
    pub len: usize,
}

/// The mma gradient kernels: one plane of 32 lanes per 16 accumulated rows, the inner block
/// streamed through `buffers` shared-memory copies (see [`crate::plan::mma_blocks`]).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct MmaGradientConfig {
    pub kernel: BackwardKernel,
    /// Query rows per tile.
    pub block_q: u32,
    /// Key/value rows per tile.
    pub block_kv: u32,
    /// Exact head_dim (q, k columns).
    pub head_dim: u32,
    /// Exact val_dim (v, o, d_out columns).
    pub val_dim: u32,
    /// Shared-memory buffers of the inner block (1: each inner block is loaded between two
    /// cube waits; 2: the next one is started while this one computes).
    pub buffers: u32,
    /// The inner block arrives by `cp.async` (see `primitives::pair_stream`) instead of
    /// through registers.
    pub async_inner: bool,
    pub score: ScoreOptions,
    /// dK/dV kernel only: also add every block pair's `dS K` to an f32 dQ accumulator with
    /// atomic adds (the one-pass backward, [`super::dq_sink`]); dS^T goes through a shared
    /// tile for it ([`Self::ds_tile_pairs`]) and no dQ kernel runs.
    pub atomic_dq: bool,
    /// With `atomic_dq`: f32 elements of dQ per atomic request, 1, 2 or 4 (adjacent columns;
    /// [`super::dq_sink`]'s `AtomicDq`, `AtomicDqPairs`, `AtomicDqQuads`), as the planner takes
    /// it from the device ([`crate::plan::DeviceCaps::has_atomic_f32_add_of`]) and the tuning.
    pub dq_width: u32,
    /// No block pair can need the masked pass (the planner's
    /// [`crate::primitives::block_range::never_masked`]): it is not compiled.
    pub never_masked: bool,
    /// The products over the head dim (`S = Q K^T`, `dP = dO V^T` and their transposes) as
    /// loops over their k steps in the generated source ([`crate::config::MmaConfig::rolled_steps`]).
    pub rolled_steps: bool,
    /// The kernel's gradients (dK and dV, or dQ) are written through each plane's own rows of
    /// the K and V tiles (or the Q tile) and out in 16-byte chunks
    /// ([`crate::primitives::chunked_out`]) instead of element by element from the accumulators
    /// ([`crate::plan::Tuning::backward_chunked_output`]). The launchers turn it off where the
    /// gradients' rows are not contiguous whole chunks.
    pub chunked_output: bool,
}

impl MmaGradientConfig {
    /// Rows of the accumulated gradients: block_kv for dK/dV, block_q for dQ.
    pub fn accumulated_rows(&self) -> u32 {
        outer_inner(self.kernel, self.block_q, self.block_kv).0
    }

    /// Rows of the inner (streamed) block (dK/dV: query rows, dQ: key rows).
    pub fn inner_rows(&self) -> u32 {
        outer_inner(self.kernel, self.block_q, self.block_kv).1
    }

    /// Planes per cube: one per 16 accumulated rows.
    pub fn planes(&self) -> u32 {
        self.accumulated_rows() / MATRIX_TILE
    }

    /// Units per cube.
    pub fn units(&self) -> u32 {
        self.planes() * MMA_LANES
    }

    /// Row length, in 8-element chunks, of the Q and K tiles (one chunk of padding: see
    /// [`crate::primitives::mma`]).
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

    /// Row length, in chunks, of the dO and V tiles.
    pub fn mma_val_stride(&self) -> u32 {
        tile_stride(self.val_dim)
    }

    /// The inner block streamed through shared memory (Q and dO, or K and V).
    pub fn mma_inner_pair(&self) -> PairShape {
        PairShape {
            rows: self.inner_rows(),
            first_dim: self.head_dim,
            second_dim: self.val_dim,
            units: self.units(),
        }
    }

    /// Whether the kernel holds the dS^T tile: the one-pass dK/dV kernel.
    fn has_ds_tile(&self) -> bool {
        self.atomic_dq && self.kernel == BackwardKernel::KeyValue
    }

    /// Row stride, in f16/bf16 pairs, of the one-pass dK/dV kernel's dS^T tile (`block_kv` key
    /// rows of `block_q` query columns): an odd number of chunks, like every chunked tile's.
    pub fn ds_tile_row_pairs(&self) -> u32 {
        tile_stride(self.block_q) * CHUNK_PAIRS
    }

    /// Elements (f16/bf16 pairs) of the dS^T tile: two buffers of `block_kv` rows (a block
    /// pair's dS^T is stored in one while the previous pair's share is read from the other); one
    /// 16-byte chunk's worth where the kernel uses none (a shared array cannot be empty; unused,
    /// it is not declared).
    pub fn ds_tile_pairs(&self) -> u32 {
        if self.has_ds_tile() { 2 * self.block_kv * self.ds_tile_row_pairs() } else { CHUNK_PAIRS }
    }

    /// Shared memory the kernel declares, in bytes.
    pub fn shared_memory_bytes(&self) -> usize {
        let (bq, bkv) = (self.block_q as usize, self.block_kv as usize);
        // The inner block's tiles hold `buffers` blocks.
        let rows = bq + bkv + (self.buffers as usize - 1) * self.inner_rows() as usize;
        let chunks = rows * (self.mma_head_stride() + self.mma_val_stride()) as usize;
        let chunk_bytes = MMA_CHUNK as usize * MMA_ELEM_BYTES;
        let row_stats = match self.kernel {
            BackwardKernel::KeyValue => 2 * self.buffers as usize * bq * F32_BYTES,
            BackwardKernel::Query => 0,
        };
        let barrier = if self.async_inner { ASYNC_BARRIER_BYTES } else { 0 };
        // The dS^T tile (a whole number of 16-byte chunks: it adds no padding); the kernels
        // without one never touch their stand-in, and the compiler drops it.
        let ds = if self.has_ds_tile() { self.ds_tile_pairs() as usize * 2 * MMA_ELEM_BYTES } else { 0 };
        chunks * chunk_bytes + ds + row_stats + barrier
    }
}
