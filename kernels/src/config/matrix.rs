//! [`MatrixConfig`]: the matrix forward's blocks, tile strides and shared memory.
use super::{
    CMMA_ALIGN, F32_BYTES, MATRIX_PAD_BYTES, MATRIX_TILE, RowSplit, SplitsRows, score_row_pad_bytes,
};
use crate::primitives::row_stream::{RowCols, RowStreamShape};
use crate::primitives::score::ScoreOptions;

/// The matrix kernel (`forward/matrix/`): 16x16x16 tile products (cmma, or the scalar
/// stand-in) on tiles staged in the dtype or in f32, the softmax through shared memory. Each
/// plane owns 16 query rows, or 32 with `row_tiles` = 2.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct MatrixConfig {
    /// Query rows per cube ([`Self::plane_rows`] per plane).
    pub block_q: u32,
    /// Key/value rows per iteration of the main loop (a multiple of the tile).
    pub block_kv: u32,
    /// Exact head_dim (q, k columns).
    pub head_dim: u32,
    /// Exact val_dim (v, o columns).
    pub val_dim: u32,
    /// Units per plane (32 on NVIDIA, 64 on AMD wave64): `plane_size / plane_rows` units share
    /// a row.
    pub plane_size: u32,
    /// Row tiles (16 query rows each) per plane, 1 or 2: with 2 a plane loads each K and V
    /// fragment once for 32 rows instead of 16, and each row has half as many units, each
    /// taking twice as many of its columns ([`crate::plan::Tuning::matrix_plane_rows`]).
    pub row_tiles: u32,
    /// Bytes per element of the Q, K, V and P tiles: the dtype's, or 4 with `f32_tiles`.
    pub elem_bytes: u32,
    /// The tiles are f32 (the inputs converted exactly) and the products run on the f32 cmma:
    /// bf16 on gfx942, whose bf16 fragments rocWMMA cannot compile (as
    /// [`crate::backward::config::MatrixGradientConfig::f32_tiles`]).
    pub f32_tiles: bool,
    /// The products run on the scalar stand-in for the fragments
    /// ([`crate::primitives::tile_mma::StandIn`]; tests on devices without cmma).
    pub stand_in: bool,
    /// ~1 ulp exp / ln instead of the device built-ins (see `primitives::precise_math`).
    pub precise_math: bool,
    /// Quiet softmax ([`crate::problem::AttentionProblem::quiet_softmax`]).
    pub quiet_softmax: bool,
    pub score: ScoreOptions,
    /// 16 bytes of padding after every tile row ([`Self::head_stride`]); the planner drops it
    /// where the padded tiles do not fit (head dim 128 in an MI300X's 64 KiB).
    pub padded: bool,
    /// The launcher may read q, k, v in 16-byte vectors where the rows allow
    /// ([`crate::primitives::tile_io::load_width`]): [`crate::plan::Tuning::matrix_vector_loads`],
    /// never with `stand_in`.
    pub vector_loads: bool,
    /// Each block's K and V loads are issued one block ahead, into registers, while the
    /// previous block computes ([`crate::primitives::tile_io::fetch_rows_ahead`]): set by the
    /// planner with `vector_loads` where the registers fit
    /// ([`crate::plan::Tuning::matrix_prefetch`]).
    pub prefetch: bool,
    /// Rows 8-15 of every plane's 16 walk their S and P columns one step later
    /// (`unit_column` in `forward/unit_rows.rs`), so that the rows whose padded starts share
    /// shared-memory banks do not read S or write P in the same bank at once
    /// ([`crate::plan::Tuning::matrix_staggered`]).
    pub staggered: bool,
    /// The softmax's row maxima and sums across a row's units (adjacent units of one plane) by
    /// plane shuffles, not through shared memory and cube syncs
    /// ([`crate::plan::Tuning::matrix_plane_softmax`], where the device has plane operations).
    pub plane_shuffles: bool,
    /// With `plane_shuffles`: the plane hands S to its units and P back to its fragments with
    /// plane syncs, and decides the rescale of its O by a plane vote, so that only K and V
    /// synchronize the cube (where the device has plane syncs).
    pub plane_sync: bool,
    /// With `padded`: S's f32 rows padded by 32 bytes instead of 16, so that the four rows a
    /// half-warp stores from its accumulator fragments fall in distinct banks, and (with
    /// `staggered`) the rows staggered in four groups of four instead of two of eight
    /// ([`crate::plan::Tuning::matrix_wide_scores`]).
    pub wide_scores: bool,
    /// S's f32 tile and O's staging tile are one allocation ([`Self::stage_stride`] a row):
    /// a plane reads its rows of S into its units before it stages O there (the rescale, the
    /// end), so the two never hold data at once, and the cube declares the larger of the two
    /// instead of both (f16, head dim 64, four planes of 16 rows, 64 keys: 54 KiB instead of 71;
    /// `matrix_tuning`) ([`crate::plan::Tuning::matrix_shared_stage`]).
    pub shared_stage: bool,
}

impl MatrixConfig {
    /// Elements of `bytes` each in a row's padding.
    fn pad(&self, bytes: u32) -> u32 {
        if self.padded { MATRIX_PAD_BYTES / bytes } else { 0 }
    }

    /// Query rows per plane: `row_tiles` tiles of 16.
    pub fn plane_rows(&self) -> u32 {
        self.row_tiles * MATRIX_TILE
    }

    /// Units sharing one query row.
    pub fn units_per_row(&self) -> u32 {
        self.plane_size / self.plane_rows()
    }

    /// Units per cube.
    pub fn units(&self) -> u32 {
        self.block_q * self.units_per_row()
    }

    /// Planes per cube: [`Self::plane_rows`] query rows each.
    pub fn num_planes(&self) -> u32 {
        self.units() / self.plane_size
    }

    /// Columns of S each unit handles.
    pub fn kv_cols_per_unit(&self) -> u32 {
        self.block_kv / self.units_per_row()
    }

    /// Columns of O each unit accumulates.
    pub fn out_cols_per_unit(&self) -> u32 {
        self.val_dim_tile().div_ceil(self.units_per_row())
    }

    /// Row length of the Q and K tiles: padded to the cmma tile (the padding is zero).
    pub fn head_dim_tile(&self) -> u32 {
        self.head_dim.next_multiple_of(MATRIX_TILE)
    }

    /// Row length of the V tile and of the O block (padded to the tile).
    pub fn val_dim_tile(&self) -> u32 {
        self.val_dim.next_multiple_of(MATRIX_TILE)
    }

    /// Row stride of the Q and K tiles (dtype elements): with `padded`, 16 bytes after each row,
    /// so that the 8 rows a fragment load reads at once start in different shared-memory banks
    /// (unpadded, rows of a multiple of 128 bytes all start in the same ones); rows of 16 tiles
    /// stay 32-byte aligned, as fragment loads need.
    pub fn head_stride(&self) -> u32 {
        self.head_dim_tile() + self.pad(self.elem_bytes)
    }

    /// Row stride of the V tile (dtype elements), padded as [`Self::head_stride`].
    pub fn val_stride(&self) -> u32 {
        self.val_dim_tile() + self.pad(self.elem_bytes)
    }

    /// Row stride of the f32 S tile, padded ([`score_row_pad_bytes`]: twice as much with
    /// `wide_scores`).
    pub fn score_stride(&self) -> u32 {
        if self.shared_stage { self.stage_stride() } else { self.block_kv + self.score_pad() }
    }

    /// S's row padding in f32 ([`score_row_pad_bytes`]).
    fn score_pad(&self) -> u32 {
        let pad = if self.padded { score_row_pad_bytes(self.wide_scores) } else { 0 };
        pad / F32_BYTES as u32
    }

    /// With `shared_stage`, the row stride of the one tile S and O's staging share: the longer
    /// of their rows with S's padding, so that each plane's rows of either lie within its rows
    /// of the tile (planes rescale their O while others still read their S).
    pub fn stage_stride(&self) -> u32 {
        self.block_kv.max(self.val_dim_tile()) + self.score_pad()
    }

    /// Groups of rows in a plane whose column walks are staggered (`staggered`): groups of 8
    /// rows (group g walks g steps later), or of 4 with `wide_scores`, so 2 or 4 groups in a
    /// plane of 16 rows and 4 or 8 in one of 32; 1 without.
    pub fn stagger_groups(&self) -> u32 {
        match (self.staggered, self.wide_scores) {
            (false, _) => 1,
            (true, false) => 2 * self.row_tiles,
            (true, true) => 4 * self.row_tiles,
        }
    }

    /// Rows per staggered group ([`Self::stagger_groups`]): 8, or 4 with `wide_scores`.
    pub fn stagger_rows(&self) -> u32 {
        self.plane_rows() / self.stagger_groups()
    }

    /// Row stride of the P tile (dtype elements), padded.
    pub fn prob_stride(&self) -> u32 {
        self.block_kv + self.pad(self.elem_bytes)
    }

    /// Row stride of the f32 O staging tile, padded.
    pub fn out_stride(&self) -> u32 {
        if self.shared_stage {
            self.stage_stride()
        } else {
            self.val_dim_tile() + self.pad(F32_BYTES as u32)
        }
    }

    /// f32 of the S tile (with `shared_stage`, the tile O's staging shares): `block_q` rows,
    /// and where the cube's rescale flag lives in this tile (without `plane_shuffles`) and S
    /// does not hold it ([`Self::rescale_flag`]), one [`CMMA_ALIGN`] chunk after them.
    pub fn score_tile_len(&self) -> u32 {
        let rows = self.block_q * self.score_stride();
        if self.shared_stage && !self.plane_shuffles {
            rows + (CMMA_ALIGN / F32_BYTES) as u32
        } else {
            rows
        }
    }

    /// Where in the S tile the cube's rescale flag lives without `plane_shuffles`: S's
    /// element (0, 0), which only unit 0 reads; with `shared_stage` after the rows, which
    /// plane 0 overwrites with its O while other planes may still read the flag.
    pub fn rescale_flag(&self) -> u32 {
        if self.shared_stage { self.block_q * self.score_stride() } else { 0 }
    }

    /// f32 per partial-statistics tile (maxima, sums): one per unit, or with `plane_shuffles`
    /// only the cube's rescale flag (in the maxima's tile), in a tile of [`CMMA_ALIGN`] bytes:
    /// the tiles declared after it keep their alignment without padding that
    /// `shared_memory_bytes` would not count (one word each made the gfx942 kernels 24 bytes
    /// larger than planned).
    pub fn partials(&self) -> u32 {
        if self.plane_shuffles { (CMMA_ALIGN / F32_BYTES) as u32 } else { self.units() }
    }

    /// Shared memory the kernel declares, in bytes.
    pub fn shared_memory_bytes(&self) -> usize {
        let (bq, bkv) = (self.block_q as usize, self.block_kv as usize);
        let (dk, dv) = (self.head_stride() as usize, self.val_stride() as usize);
        let partials = self.partials() as usize * 2 * F32_BYTES;
        let staged = (bq * dk + bkv * dk + bkv * dv + bq * self.prob_stride() as usize) * self.elem_bytes as usize;
        let stage = if self.shared_stage { 0 } else { bq * self.out_stride() as usize };
        let f32_tiles = (self.score_tile_len() as usize + stage) * F32_BYTES;
        staged + f32_tiles + partials
    }

    /// How the K and V rows stream into their tiles, one key/value block at a time.
    pub fn kv_stream(&self) -> RowStreamShape {
        RowStreamShape {
            rows: self.block_kv,
            first: RowCols::new(self.head_dim, self.head_dim_tile(), self.head_stride()),
            second: RowCols::new(self.val_dim, self.val_dim_tile(), self.val_stride()),
            units: self.units(),
            whole: !self.f32_tiles,
            prefetch: self.prefetch,
        }
    }
}

impl SplitsRows for MatrixConfig {
    fn split(&self) -> RowSplit {
        RowSplit {
            block_q: self.block_q,
            block_kv: self.block_kv,
            val_dim: self.val_dim,
            units_per_row: self.units_per_row(),
            out_cols_per_unit: self.out_cols_per_unit(),
            precise_math: self.precise_math,
            quiet_softmax: self.quiet_softmax,
            score: self.score,
        }
    }
}
