//! The ONE comptime configuration of the forward kernels. Everything the kernels size or
//! branch on at compile time is here; [`crate::plan`] fills it from the problem and the
//! device. Derived sizes are methods, so the kernels and the planner agree on them.
use crate::primitives::chunk_io::{PairShape, tile_stride};
use crate::primitives::dot::DotSum;
use crate::primitives::score::ScoreOptions;

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
/// Elements per global load and per `ldmatrix` row on the mma path (16 bytes of f16/bf16).
pub use crate::primitives::chunk_io::CHUNK as MMA_CHUNK;
/// Mma path: Q columns times row tiles up to which a plane keeps its Q fragments in registers
/// (128 = 64 registers per lane; more spills next to the O accumulators).
const MMA_Q_REGISTER_COLS: u32 = 128;
/// Shared memory of the mbarrier that completes the `cp.async` copies (8 bytes, 16-aligned).
pub(crate) const ASYNC_BARRIER_BYTES: usize = 16;
/// Bytes of one f32 (softmax statistics, S, the portable tiles and the accumulators).
const F32_BYTES: usize = 4;

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct FlashConfig {
    pub path: ForwardPath,
    /// Query rows per cube.
    pub block_q: u32,
    /// Key/value rows per iteration of the main loop.
    pub block_kv: u32,
    /// Exact head_dim (q, k columns).
    pub head_dim: u32,
    /// Exact val_dim (v, o columns).
    pub val_dim: u32,
    /// Units that share one query row (its S columns, its O columns, its softmax partials).
    /// Portable: a free choice; matrix: `plane_size / MATRIX_TILE`.
    pub units_per_row: u32,
    /// Matrix path: units per plane (32 on NVIDIA, 64 on AMD wave64). Unused by the portable
    /// path, which never relies on planes.
    pub plane_size: u32,
    /// Bytes per element of q, k, v (the matrix path stages its tiles in that type).
    pub elem_bytes: u32,
    /// ~1 ulp exp / ln instead of the device built-ins (see `primitives::precise_math`).
    pub precise_math: bool,
    /// Mma path: shared-memory buffers of the key/value block (1: the next block is stored
    /// between two cube syncs; 2: into the other buffer, one sync per block). 1 elsewhere.
    pub kv_buffers: u32,
    /// Mma path with two buffers: the next key/value block arrives by `cp.async` (see
    /// `primitives::pair_stream`) instead of through registers. False elsewhere.
    pub async_kv: bool,
    /// Portable path: how q·k is summed (f64 or compensated f32 for f32 outputs).
    pub dot: DotSum,
    pub score: ScoreOptions,
}

impl FlashConfig {
    /// Units per cube.
    pub fn units(&self) -> u32 {
        self.block_q * self.units_per_row
    }

    /// Rows of S each unit handles: `block_kv / units_per_row` columns of its row.
    pub fn kv_cols_per_unit(&self) -> u32 {
        self.block_kv / self.units_per_row
    }

    /// Columns of O each unit accumulates (`ceil(val_dim / units_per_row)`, padded dims on
    /// the matrix path).
    pub fn out_cols_per_unit(&self) -> u32 {
        self.val_dim_tile().div_ceil(self.units_per_row)
    }

    /// Row length of the Q and K tiles in shared memory. Portable: head_dim made odd, so that
    /// units reading one column of different rows hit different banks. Matrix: padded to the
    /// cmma tile (the padding is zero).
    pub fn head_dim_tile(&self) -> u32 {
        match self.path {
            ForwardPath::Portable => self.head_dim | 1,
            ForwardPath::Matrix | ForwardPath::Mma => self.head_dim.next_multiple_of(MATRIX_TILE),
        }
    }

    /// Row length of the V tile (and of the matrix path's O block). Portable: val_dim rounded
    /// up to a multiple of units_per_row, so every unit's last O column exists (as zeros).
    pub fn val_dim_tile(&self) -> u32 {
        match self.path {
            ForwardPath::Portable => self.val_dim.next_multiple_of(self.units_per_row),
            ForwardPath::Matrix | ForwardPath::Mma => self.val_dim.next_multiple_of(MATRIX_TILE),
        }
    }

    /// Row length of the S / P tiles. Portable: block_kv + 1 so rows start in different
    /// banks; matrix: block_kv (cmma needs strides that are multiples of the tile).
    pub fn score_tile_cols(&self) -> u32 {
        match self.path {
            ForwardPath::Portable => self.block_kv + 1,
            ForwardPath::Matrix | ForwardPath::Mma => self.block_kv,
        }
    }

    /// Row length, in 8-element chunks, of the mma path's Q and K tiles: one chunk of padding
    /// makes the row stride an odd multiple of 16 bytes, so the 8 rows of an `ldmatrix` phase
    /// fall in 8 different bank groups.
    pub fn mma_head_stride(&self) -> u32 {
        tile_stride(self.head_dim)
    }

    /// Row length, in chunks, of the mma path's V tile (same padding).
    pub fn mma_val_stride(&self) -> u32 {
        tile_stride(self.val_dim)
    }

    /// Mma path: the key/value block streamed through shared memory.
    pub fn mma_kv_pair(&self) -> PairShape {
        PairShape {
            rows: self.block_kv,
            first_dim: self.head_dim,
            second_dim: self.val_dim,
            units: self.units(),
        }
    }

    /// Planes per cube on the matrix and mma paths: `plane_size / units_per_row` query rows
    /// per plane (16 on the matrix path; 16 or 32 on the mma path).
    pub fn num_planes(&self) -> u32 {
        self.units() / self.plane_size
    }

    /// Mma path: 16-row tiles of queries each plane owns (1 or 2). With 2, every K and V
    /// fragment read from shared memory feeds two mmas (FA-2's 32 rows per warp).
    pub fn mma_row_tiles(&self) -> u32 {
        self.plane_size / (self.units_per_row * MATRIX_TILE)
    }

    /// Mma path: whether the plane's Q fragments stay in registers for the whole kernel
    /// (otherwise they are read from the shared Q tile for every key block).
    pub fn mma_q_in_registers(&self) -> bool {
        self.mma_row_tiles() * self.head_dim_tile() <= MMA_Q_REGISTER_COLS
    }

    /// Shared memory the kernel declares, in bytes.
    pub fn shared_memory_bytes(&self) -> usize {
        let (bq, bkv) = (self.block_q as usize, self.block_kv as usize);
        let (dk, dv) = (self.head_dim_tile() as usize, self.val_dim_tile() as usize);
        let partials = 2 * bq * self.units_per_row as usize * F32_BYTES;
        let score_tile = bq * self.score_tile_cols() as usize;
        match self.path {
            ForwardPath::Portable => {
                (bq * dk + bkv * dk + bkv * dv + score_tile) * F32_BYTES + partials
            }
            ForwardPath::Matrix => {
                let staged =
                    (bq * dk + bkv * dk + bkv * dv + score_tile) * self.elem_bytes as usize;
                let f32_tiles = (score_tile + bq * dv) * F32_BYTES;
                staged + f32_tiles + partials
            }
            ForwardPath::Mma => {
                let chunks = bq * self.mma_head_stride() as usize
                    + self.kv_buffers as usize
                        * bkv
                        * (self.mma_head_stride() + self.mma_val_stride()) as usize;
                let barrier = if self.async_kv { ASYNC_BARRIER_BYTES } else { 0 };
                chunks * MMA_CHUNK as usize * self.elem_bytes as usize + barrier
            }
        }
    }
}
