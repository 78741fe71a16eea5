//! The comptime configurations of the forward kernels, one type per kernel family: everything
//! a kernel sizes or branches on at compile time, and nothing it ignores. [`crate::plan`]
//! fills them from the problem and the device; derived sizes are methods, so the kernels and
//! the planner agree on them.
//!
//! ```text
//! ForwardConfig ── Portable(PortableConfig)  forward/portable.rs ┐ one body: forward/unit_rows.rs
//!               ├─ Matrix(MatrixConfig)      forward/matrix/     ┘ (SplitRows: how rows split)
//!               └─ Mma(MmaConfig)            forward/mma/
//! ```
use crate::primitives::arena::Carver;
use crate::primitives::chunk_io::{PairShape, tile_stride};
use crate::primitives::dot::DotSum;
use crate::primitives::mma::LANES as MMA_LANES;
use crate::primitives::score::ScoreOptions;

mod matrix;
pub use matrix::MatrixConfig;

/// How the tiles are multiplied.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ForwardPath {
    /// Scalar FMAs on f32 tiles in shared memory; row reductions through shared memory, no
    /// plane operations. Runs everywhere (WGPU, lavapipe, HIP bf16, f32 on every device).
    Portable,
    /// `cmma` fragments for `S = Q K^T` and `O += P V`, softmax through shared memory.
    /// Needs a registered cmma config for (dtype, dtype, f32, 16x16x16).
    Matrix,
    /// FA-2's own recipe: register-level `mma` 16x8x16 (CubeCL's manual MMA), the online
    /// softmax on the accumulators in registers, P fed back as the A operand without leaving
    /// registers. Needs a registered manual MMA config for (dtype, dtype, f32, 16x8x16), plane
    /// size 32 (the PTX fragment layout) and rows of q, k, v loadable 8 elements at a time.
    Mma,
}

impl core::str::FromStr for ForwardPath {
    type Err = crate::error::FlashError;

    /// `portable`, `matrix` or `mma`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let paths = [ForwardPath::Portable, ForwardPath::Matrix, ForwardPath::Mma];
        crate::error::parse_named(text, &paths, ForwardPath::name, "forward path")
    }
}

impl ForwardPath {
    pub fn name(self) -> &'static str {
        match self {
            ForwardPath::Portable => "portable",
            ForwardPath::Matrix => "matrix",
            ForwardPath::Mma => "mma",
        }
    }
}

/// Edge of one cmma tile (m = n = k): the matrix path pads head_dim and val_dim to it.
pub const MATRIX_TILE: u32 = 16;

/// Bytes of alignment of every shared-memory tile a cmma fragment is loaded from or stored to
/// (wmma needs 256-bit aligned pointers; every such tile's size is a multiple of it, so the
/// offsets cubecl gives them stay aligned).
pub const CMMA_ALIGN: usize = 32;

/// Bytes of padding after every row of the matrix kernels' shared tiles (forward and gradient
/// kernels): the 8 rows a fragment load reads at once start in 8 different groups of 4
/// shared-memory banks (unpadded, rows of a multiple of 128 bytes all start in the same ones);
/// rows of 16 tiles stay 32-byte aligned, as fragment loads need.
pub(crate) const MATRIX_PAD_BYTES: u32 = 16;

/// Bytes of padding after each f32 score row of the matrix kernels (the forward's S, the
/// gradient kernels' S and dP): [`MATRIX_PAD_BYTES`], or twice that with `wide_scores`. A wmma
/// f32 accumulator store writes, per half-warp, four rows of eight floats: rows starting 4
/// banks apart (16 bytes past a multiple of 128) overlap; 8 apart, the four take 32 banks.
pub(crate) fn score_row_pad_bytes(wide_scores: bool) -> u32 {
    if wide_scores { 2 * MATRIX_PAD_BYTES } else { MATRIX_PAD_BYTES }
}

/// Elements per global load and per `ldmatrix` row on the mma path (16 bytes of f16/bf16).
pub use crate::primitives::chunk_io::CHUNK as MMA_CHUNK;
/// Mma path: Q columns times row tiles up to which a plane keeps its Q fragments in registers
/// (128 = 64 registers per lane; more spills next to the O accumulators).
const MMA_Q_REGISTER_COLS: u32 = 128;
/// Bytes of one f16 / bf16 element: the mma kernels take nothing else.
pub(crate) const MMA_ELEM_BYTES: usize = 2;
/// Shared memory of the mbarrier that completes the `cp.async` copies (8 bytes, 16-aligned).
pub(crate) const ASYNC_BARRIER_BYTES: usize = 16;
/// Bytes of one f32 (softmax statistics, S, the portable tiles and the accumulators).
const F32_BYTES: usize = 4;

/// The forward kernel one plan launches, with its configuration.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ForwardConfig {
    Portable(PortableConfig),
    Matrix(MatrixConfig),
    Mma(MmaConfig),
}

impl ForwardConfig {
    pub fn path(&self) -> ForwardPath {
        match self {
            ForwardConfig::Portable(_) => ForwardPath::Portable,
            ForwardConfig::Matrix(_) => ForwardPath::Matrix,
            ForwardConfig::Mma(_) => ForwardPath::Mma,
        }
    }

    /// Query rows per cube.
    pub fn block_q(&self) -> u32 {
        match self {
            ForwardConfig::Portable(c) => c.block_q,
            ForwardConfig::Matrix(c) => c.block_q,
            ForwardConfig::Mma(c) => c.block_q(),
        }
    }

    /// Key/value rows per iteration of the main loop.
    pub fn block_kv(&self) -> u32 {
        match self {
            ForwardConfig::Portable(c) => c.block_kv,
            ForwardConfig::Matrix(c) => c.block_kv,
            ForwardConfig::Mma(c) => c.block_kv,
        }
    }

    /// Units per cube.
    pub fn units(&self) -> u32 {
        match self {
            ForwardConfig::Portable(c) => c.units(),
            ForwardConfig::Matrix(c) => c.units(),
            ForwardConfig::Mma(c) => c.units(),
        }
    }

    /// Shared memory the kernel declares, in bytes.
    pub fn shared_memory_bytes(&self) -> usize {
        match self {
            ForwardConfig::Portable(c) => c.shared_memory_bytes(),
            ForwardConfig::Matrix(c) => c.shared_memory_bytes(),
            ForwardConfig::Mma(c) => c.shared_memory_bytes(),
        }
    }

    /// Exact (head_dim, val_dim) it was made for.
    pub fn dims(&self) -> (u32, u32) {
        match self {
            ForwardConfig::Portable(c) => (c.head_dim, c.val_dim),
            ForwardConfig::Matrix(c) => (c.head_dim, c.val_dim),
            ForwardConfig::Mma(c) => (c.head_dim, c.val_dim),
        }
    }

    pub fn score(&self) -> ScoreOptions {
        match self {
            ForwardConfig::Portable(c) => c.score,
            ForwardConfig::Matrix(c) => c.score,
            ForwardConfig::Mma(c) => c.score,
        }
    }

    /// Whether the kernel normalizes with the quiet softmax.
    pub fn quiet_softmax(&self) -> bool {
        match self {
            ForwardConfig::Portable(c) => c.quiet_softmax,
            ForwardConfig::Matrix(c) => c.quiet_softmax,
            ForwardConfig::Mma(c) => c.quiet_softmax,
        }
    }
}

/// How the portable and matrix kernels split a block of query rows over the cube's units
/// (`forward/unit_rows.rs`, their shared body): `units_per_row` units share one row (its S
/// columns, its O columns, its softmax partials).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct RowSplit {
    pub block_q: u32,
    pub block_kv: u32,
    pub val_dim: u32,
    pub units_per_row: u32,
    /// O columns each unit accumulates.
    pub out_cols_per_unit: u32,
    /// ~1 ulp exp / ln instead of the device built-ins (see `primitives::precise_math`).
    pub precise_math: bool,
    /// Quiet softmax ([`crate::problem::AttentionProblem::quiet_softmax`]).
    pub quiet_softmax: bool,
    pub score: ScoreOptions,
}

/// A configuration whose kernel runs on [`RowSplit`] rows.
pub trait SplitsRows: Copy + core::fmt::Debug + core::hash::Hash + Eq + Send + Sync + 'static {
    fn split(&self) -> RowSplit;
}

/// The portable kernel (`forward/portable.rs`): f32 tiles in shared memory, scalar FMAs.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct PortableConfig {
    /// Query rows per cube.
    pub block_q: u32,
    /// Key/value rows per iteration of the main loop.
    pub block_kv: u32,
    /// Exact head_dim (q, k columns).
    pub head_dim: u32,
    /// Exact val_dim (v, o columns).
    pub val_dim: u32,
    /// Units that share one query row: a free choice (a power of two).
    pub units_per_row: u32,
    /// ~1 ulp exp / ln instead of the device built-ins (see `primitives::precise_math`).
    pub precise_math: bool,
    /// How q·k is summed (f64 or compensated f32 for f32 outputs).
    pub dot: DotSum,
    /// Quiet softmax ([`crate::problem::AttentionProblem::quiet_softmax`]).
    pub quiet_softmax: bool,
    pub score: ScoreOptions,
}

impl PortableConfig {
    /// Units per cube.
    pub fn units(&self) -> u32 {
        self.block_q * self.units_per_row
    }

    /// Columns of S each unit handles: `block_kv / units_per_row` of its row.
    pub fn kv_cols_per_unit(&self) -> u32 {
        self.block_kv / self.units_per_row
    }

    /// Columns of O each unit accumulates (`val_dim_tile / units_per_row`).
    pub fn out_cols_per_unit(&self) -> u32 {
        self.val_dim_tile().div_ceil(self.units_per_row)
    }

    /// Row length of the Q and K tiles: head_dim made odd, so that units reading one column of
    /// different rows hit different banks.
    pub fn head_dim_tile(&self) -> u32 {
        self.head_dim | 1
    }

    /// Row length of the V tile: val_dim rounded up to a multiple of units_per_row, so every
    /// unit's last O column exists (as zeros).
    pub fn val_dim_tile(&self) -> u32 {
        self.val_dim.next_multiple_of(self.units_per_row)
    }

    /// Row length of the P tile: block_kv + 1 so rows start in different banks.
    pub fn score_tile_cols(&self) -> u32 {
        self.block_kv + 1
    }

    /// Where each tile lies in the kernel's one shared f32 allocation.
    pub fn tile_layout(&self) -> PortableTileLayout {
        let mut at = Carver::default();
        let (bq, bkv) = (self.block_q, self.block_kv);
        PortableTileLayout {
            q: at.take(bq * self.head_dim_tile()),
            k: at.take(bkv * self.head_dim_tile()),
            v: at.take(bkv * self.val_dim_tile()),
            p: at.take(bq * self.score_tile_cols()),
            partial_max: at.take(self.units()),
            partial_sum: at.take(self.units()),
            len: at.end(),
        }
    }

    /// Shared memory the kernel declares, in bytes.
    pub fn shared_memory_bytes(&self) -> usize {
        self.tile_layout().len * F32_BYTES
    }
}

/// `[start, end)` in f32 elements of each tile of the portable forward inside its one shared
/// allocation, in this order (one allocation, so that the kernel is generated the same in every
/// run: see [`crate::primitives::arena`]).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct PortableTileLayout {
    pub q: (usize, usize),
    pub k: (usize, usize),
    pub v: (usize, usize),
    pub p: (usize, usize),
    pub partial_max: (usize, usize),
    pub partial_sum: (usize, usize),
    /// Elements of the whole allocation.
    pub len: usize,
}

impl SplitsRows for PortableConfig {
    fn split(&self) -> RowSplit {
        RowSplit {
            block_q: self.block_q,
            block_kv: self.block_kv,
            val_dim: self.val_dim,
            units_per_row: self.units_per_row,
            out_cols_per_unit: self.out_cols_per_unit(),
            precise_math: self.precise_math,
            quiet_softmax: self.quiet_softmax,
            score: self.score,
        }
    }
}

/// The mma kernel (`forward/mma/`): `planes` planes of 32 lanes, each owning `plane_rows`
/// (16 or 32) query rows in registers; the key/value block streamed through shared memory.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct MmaConfig {
    /// Planes per cube.
    pub planes: u32,
    /// Query rows per plane: 16 (one row tile) or 32 (two, FA-2's 32 rows per warp).
    pub plane_rows: u32,
    /// Key/value rows per iteration of the main loop.
    pub block_kv: u32,
    /// Exact head_dim (q, k columns).
    pub head_dim: u32,
    /// Exact val_dim (v, o columns).
    pub val_dim: u32,
    /// Shared-memory buffers of the key/value block (1: the next block is stored between two
    /// cube syncs; 2: into the other buffer, one sync per block).
    pub kv_buffers: u32,
    /// With two buffers: the next key/value block arrives by `cp.async` (see
    /// `primitives::pair_stream`) instead of through registers.
    pub async_kv: bool,
    /// Quiet softmax ([`crate::problem::AttentionProblem::quiet_softmax`]).
    pub quiet_softmax: bool,
    pub score: ScoreOptions,
    /// No key/value block can need the masked pass
    /// ([`crate::primitives::block_range::never_masked`]): it is not compiled. The planner
    /// leaves it false (measured slower on the H200: see `plan::mma_blocks`); the codegen tests
    /// and the register dumps expand both forms.
    pub never_masked: bool,
    /// Where Q is re-read from its shared tile (not [`Self::mma_q_in_registers`]), `S = Q K^T`
    /// is a loop over the head dim's k steps in the generated source instead of unrolled:
    /// nothing in registers is indexed by the step. The compiler may still unroll it; the
    /// source, and the first call's compilation, shrink (`scripts/cuda_offline_sass.sh`).
    pub rolled_steps: bool,
    /// The plane's Q fragments may stay in registers for the whole kernel, where they fit
    /// ([`Self::mma_q_in_registers`]); false re-reads them from the shared Q tile every key
    /// block, leaving those registers to larger key blocks
    /// ([`crate::plan::Tuning::forward_q_registers`]).
    pub q_registers: bool,
    /// The first key/value block's copy is started before the query block is loaded, so that
    /// the two loads' latencies overlap instead of following one another
    /// ([`crate::plan::Tuning::forward_early_kv`]).
    pub early_kv: bool,
    /// O is written through shared memory in 16-byte chunks where it can
    /// ([`Self::mma_chunked_output`]) instead of element by element from the accumulators
    /// ([`crate::plan::Tuning::forward_chunked_output`]). The launcher turns it off where o's rows
    /// are not contiguous whole chunks.
    pub chunked_output: bool,
}

impl MmaConfig {
    /// Query rows per cube.
    pub fn block_q(&self) -> u32 {
        self.planes * self.plane_rows
    }

    /// Units per cube.
    pub fn units(&self) -> u32 {
        self.planes * MMA_LANES
    }

    /// Planes per cube.
    pub fn num_planes(&self) -> u32 {
        self.planes
    }

    /// 16-row tiles of queries each plane owns (1 or 2). With 2, every K and V fragment read
    /// from shared memory feeds two mmas.
    pub fn mma_row_tiles(&self) -> u32 {
        self.plane_rows / MATRIX_TILE
    }

    /// head_dim padded to the mma tile.
    pub fn head_dim_tile(&self) -> u32 {
        self.head_dim.next_multiple_of(MATRIX_TILE)
    }

    /// val_dim padded to the mma tile (the O accumulators).
    pub fn val_dim_tile(&self) -> u32 {
        self.val_dim.next_multiple_of(MATRIX_TILE)
    }

    /// Row length, in 8-element chunks, of the Q and K tiles: one chunk of padding makes the
    /// row stride an odd multiple of 16 bytes, so the 8 rows of an `ldmatrix` phase fall in 8
    /// different bank groups.
    pub fn mma_head_stride(&self) -> u32 {
        tile_stride(self.head_dim)
    }

    /// Row length, in chunks, of the V tile (same padding).
    pub fn mma_val_stride(&self) -> u32 {
        tile_stride(self.val_dim)
    }

    /// The key/value block streamed through shared memory.
    pub fn mma_kv_pair(&self) -> PairShape {
        PairShape {
            rows: self.block_kv,
            first_dim: self.head_dim,
            second_dim: self.val_dim,
            units: self.units(),
        }
    }

    /// Whether the plane's Q fragments stay in registers for the whole kernel (otherwise they
    /// are read from the shared Q tile for every key block): where `q_registers` allows and
    /// they fit.
    pub fn mma_q_in_registers(&self) -> bool {
        self.q_registers && self.mma_row_tiles() * self.head_dim_tile() <= MMA_Q_REGISTER_COLS
    }

    /// Whether each plane writes its rows of O through its own rows of the shared Q tile (no
    /// other plane reads them) and then to global memory in 16-byte chunks: where
    /// `chunked_output` asks and O's tile rows fit the Q tile's (val_dim no wider than head_dim,
    /// both padded to the mma tile).
    pub fn mma_chunked_output(&self) -> bool {
        self.chunked_output && self.val_dim_tile() <= self.head_dim_tile()
    }

    /// Shared memory the kernel declares, in bytes.
    pub fn shared_memory_bytes(&self) -> usize {
        let (bq, bkv) = (self.block_q() as usize, self.block_kv as usize);
        let chunks = bq * self.mma_head_stride() as usize
            + self.kv_buffers as usize
                * bkv
                * (self.mma_head_stride() + self.mma_val_stride()) as usize;
        let barrier = if self.async_kv { ASYNC_BARRIER_BYTES } else { 0 };
        chunks * MMA_CHUNK as usize * MMA_ELEM_BYTES + barrier
    }
}
