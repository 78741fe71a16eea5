//! [`MatrixGradientConfig`]: the matrix gradient kernels' blocks, tile strides and shared
//! memory.
use crate::config::{MATRIX_PAD_BYTES, MATRIX_TILE, score_row_pad_bytes};

use super::{BackwardKernel, F32_BYTES, outer_inner};
use crate::primitives::score::ScoreOptions;
use crate::primitives::row_stream::{RowCols, RowStreamShape};

/// The matrix gradient kernels ([`crate::backward::matrix`]): one plane per 16 accumulated rows (its
/// gradient rows held in 16x16 cmma accumulators for the whole run), the inner block and the
/// pair's S, dP, P and dS in shared memory. Each plane computes its own 16-column (dK/dV) or
/// 16-row (dQ) strip of the pair's scores, so only its own strip passes through its products.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct MatrixGradientConfig {
    pub kernel: BackwardKernel,
    /// Query rows per tile (a multiple of 16).
    pub block_q: u32,
    /// Key/value rows per tile (a multiple of 16).
    pub block_kv: u32,
    /// Exact head_dim (q, k columns); tiles pad it to 16 with zeros.
    pub head_dim: u32,
    /// Exact val_dim (v, o, d_out columns); tiles pad it to 16 with zeros.
    pub val_dim: u32,
    /// Units per plane (32 on NVIDIA, 64 on AMD wave64).
    pub plane_size: u32,
    /// Bytes per element of the operand tiles: the inputs' (staged in their type), or 4 with
    /// `f32_tiles`.
    pub elem_bytes: u32,
    /// The operand tiles are f32, the inputs converted exactly, on f32 cmma: bf16 on gfx942,
    /// whose rocWMMA bf16 fragments do not compile (docs/HIP.md), takes the f32 MFMA.
    pub f32_tiles: bool,
    pub score: ScoreOptions,
    /// Products by a scalar stand-in for cmma with the fragments' shapes (each lane owns fixed
    /// elements of a 16x16 tile): the same kernels on devices without cmma, for the tests
    /// ([`crate::plan::Tuning::matrix_stand_in`]). Never planned otherwise.
    pub stand_in: bool,
    /// The one-pass backward (dK/dV kernel only): each block pair's `dS K` is also added to an
    /// f32 dQ accumulator with atomic adds ([`crate::backward::dq_sink`]), on the same blocks
    /// and shared memory (S's tile stages each plane's dQ tile).
    pub atomic_dq: bool,
    /// f32 per atomic add request (1, 2 or 4) with `atomic_dq`; head_dim is a multiple of it.
    pub dq_width: u32,
    /// The launcher may read q, k, v, d_out in 16-byte vectors where the rows allow
    /// ([`crate::primitives::tile_io::load_width`]): [`crate::plan::Tuning::matrix_vector_loads`],
    /// never with `stand_in`.
    pub vector_loads: bool,
    /// The streamed (inner) block's loads are issued one block ahead, into registers, while the
    /// previous block computes (dK/dV: Q and dO; dQ: K and V): set by the planner with
    /// `vector_loads` where the registers fit ([`crate::plan::Tuning::matrix_prefetch`]).
    pub prefetch: bool,
    /// Each plane hands its strip of S and dP to its units, and P and dS back to its
    /// fragments, with a plane sync instead of a cube sync (the strips are the plane's own;
    /// the one pass's dQ share still reads every plane's dS): where the device has plane syncs
    /// ([`crate::plan::Tuning::matrix_plane_softmax`]; CUDA, not HIP).
    pub plane_sync: bool,
    /// S's and dP's f32 rows padded by 32 bytes instead of 16, so that the four rows a
    /// half-warp stores from its accumulator fragments fall in distinct banks; the units then
    /// take a 16-column strip's rows in pairs two apart ([`Self::pairs_rows_two_apart`]):
    /// [`crate::plan::Tuning::matrix_wide_scores`].
    pub wide_scores: bool,
}

impl MatrixGradientConfig {
    /// Rows of the accumulated gradients: block_kv for dK/dV, block_q for dQ.
    pub fn accumulated_rows(&self) -> u32 {
        outer_inner(self.kernel, self.block_q, self.block_kv).0
    }

    /// Rows of the inner (streamed) block.
    pub fn inner_rows(&self) -> u32 {
        outer_inner(self.kernel, self.block_q, self.block_kv).1
    }

    /// Planes per cube: one per 16 accumulated rows.
    pub fn planes(&self) -> u32 {
        self.accumulated_rows() / MATRIX_TILE
    }

    /// Units per cube.
    pub fn units(&self) -> u32 {
        self.planes() * self.plane_size
    }

    /// Row length of the Q, dQ and K tiles: head_dim padded to the tile.
    pub fn head_dim_tile(&self) -> u32 {
        self.head_dim.next_multiple_of(MATRIX_TILE)
    }

    /// Row length of the dO and V tiles: val_dim padded to the tile.
    pub fn val_dim_tile(&self) -> u32 {
        self.val_dim.next_multiple_of(MATRIX_TILE)
    }

    /// Whether the P tile is kept (dV needs it; dQ only needs dS).
    pub fn keeps_p(&self) -> bool {
        self.kernel == BackwardKernel::KeyValue
    }

    /// Row stride of a tile of `cols` elements of `bytes` each, [`MATRIX_PAD_BYTES`] padded.
    fn padded(cols: u32, bytes: u32) -> u32 {
        cols + MATRIX_PAD_BYTES / bytes
    }

    /// Row stride of the Q and K tiles (dtype elements).
    pub fn head_stride(&self) -> u32 {
        Self::padded(self.head_dim_tile(), self.elem_bytes)
    }

    /// Row stride of the dO and V tiles (dtype elements).
    pub fn val_stride(&self) -> u32 {
        Self::padded(self.val_dim_tile(), self.elem_bytes)
    }

    /// Row stride of the f32 S and dP tiles ([`score_row_pad_bytes`]: padded as the others, or
    /// twice as much with `wide_scores`).
    pub fn score_stride(&self) -> u32 {
        self.block_kv + score_row_pad_bytes(self.wide_scores) / F32_BYTES as u32
    }

    /// Whether the units walk a strip of `rows` x `cols` with its rows paired two apart (with
    /// `wide_scores`, for 16-column strips of a multiple of 4 rows): a warp reads two rows of
    /// 16 at once, which with the wide stride start 16 banks apart two rows on (one row on,
    /// 8: half their banks shared), and writes P and dS (2-byte elements, 16-byte padding) 8
    /// words of each, which then start 8 or 24 banks apart (one row on, 4).
    pub fn pairs_rows_two_apart(&self, rows: u32, cols: u32) -> bool {
        self.wide_scores && cols == MATRIX_TILE && rows.is_multiple_of(ROWS_PER_PAIRING)
    }

    /// Row stride of the P and dS tiles (dtype elements).
    pub fn prob_stride(&self) -> u32 {
        Self::padded(self.block_kv, self.elem_bytes)
    }

    /// Shared memory the kernel declares, in bytes: Q, dO, K, V and (dK/dV) P in the dtype, dS
    /// too; S and dP in f32; lse and delta.
    pub fn shared_memory_bytes(&self) -> usize {
        let (bq, bkv) = (self.block_q as usize, self.block_kv as usize);
        let (dk, dv) = (self.head_stride() as usize, self.val_stride() as usize);
        let probs = bq * self.prob_stride() as usize;
        // The dQ kernel declares one tile's worth of P, unused (a shared array cannot be empty).
        let p = if self.keeps_p() { probs } else { (MATRIX_TILE * MATRIX_TILE) as usize };
        let staged = (bq + bkv) * (dk + dv) + probs + p;
        let scores = bq * self.score_stride() as usize;
        staged * self.elem_bytes as usize + (2 * scores + 2 * bq) * F32_BYTES
    }

    /// How the inner block's two tensors stream into their tiles (dK/dV: Q and dO; dQ: K and
    /// V), a head_dim-wide one first.
    pub fn inner_stream(&self) -> RowStreamShape {
        RowStreamShape {
            rows: self.inner_rows(),
            first: RowCols::new(self.head_dim, self.head_dim_tile(), self.head_stride()),
            second: RowCols::new(self.val_dim, self.val_dim_tile(), self.val_stride()),
            units: self.units(),
            whole: !self.f32_tiles,
            prefetch: self.prefetch,
        }
    }
}

/// Rows in which [`MatrixGradientConfig::pairs_rows_two_apart`] pairs rows (0 with 2, 1 with 3).
pub(crate) const ROWS_PER_PAIRING: u32 = 4;
