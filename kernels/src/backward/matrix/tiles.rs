//! The matrix gradient kernels' pieces: the shared tiles of a block pair, the tile-product
//! chains of a plane, the elementwise P / dS of a plane's strip, the staging of the inputs and
//! the write of a plane's gradient rows (see the parent module for how the kernels use them).
use cubecl::prelude::*;

use crate::backward::block_pair::entry_p_and_ds;
use crate::backward::config::{MatrixGradientConfig, ROWS_PER_PAIRING};
use crate::config::{CMMA_ALIGN, MATRIX_TILE};
use crate::primitives::score::{ScoreParams, ScoreTensors, is_masked_logit, score};
use crate::primitives::tile_io::{HeadView, StatView, load_rows, view_row_stat};
use crate::primitives::tile_mma::{TileLayout, TileMma, execute_row};

/// Elements of one 16x16 tile: a plane's staging area when it writes its gradients.
pub(super) const TILE_ELEMENTS: u32 = MATRIX_TILE * MATRIX_TILE;

/// The shared tiles of one block pair (row-major, dims padded to whole tiles, each row followed by
/// 16 bytes of padding: [`MatrixGradientConfig::head_stride`] and the other strides).
#[derive(CubeType)]
pub(super) struct PairTiles<F: Float> {
    /// `[block_q, head_stride]`.
    pub q: SharedMemory<F>,
    /// `[block_q, val_stride]`.
    pub d_out: SharedMemory<F>,
    /// `[block_kv, head_stride]`.
    pub k: SharedMemory<F>,
    /// `[block_kv, val_stride]`.
    pub v: SharedMemory<F>,
    /// `[block_q, score_stride]` f32: the raw dots `q · k`; at the end, each plane's staging
    /// tile.
    pub s: SharedMemory<f32>,
    /// `[block_q, score_stride]` f32: `dO · v`.
    pub dp: SharedMemory<f32>,
    /// `[block_q, prob_stride]`: P (dK/dV kernel; one tile's worth, unused, in the dQ kernel).
    pub p: SharedMemory<F>,
    /// `[block_q, prob_stride]`: dS.
    pub ds: SharedMemory<F>,
    /// `[block_q]`: the forward's log-sum-exp of each query row.
    pub lse: SharedMemory<f32>,
    /// `[block_q]`: `rowsum(d_out ∘ o)`.
    pub delta: SharedMemory<f32>,
}

#[cube]
pub(super) fn new_pair_tiles<F: Float>(#[comptime] config: MatrixGradientConfig) -> PairTiles<F> {
    let (bq, bkv) = comptime!((config.block_q as usize, config.block_kv as usize));
    let (dk, dv) = comptime!((config.head_stride() as usize, config.val_stride() as usize));
    let (scores, probs) = comptime!((bq * config.score_stride() as usize, bq * config.prob_stride() as usize));
    let p_len = comptime!(if config.keeps_p() { probs } else { TILE_ELEMENTS as usize });
    PairTiles::<F> {
        q: SharedMemory::new_aligned(comptime!(bq * dk), CMMA_ALIGN),
        d_out: SharedMemory::new_aligned(comptime!(bq * dv), CMMA_ALIGN),
        k: SharedMemory::new_aligned(comptime!(bkv * dk), CMMA_ALIGN),
        v: SharedMemory::new_aligned(comptime!(bkv * dv), CMMA_ALIGN),
        s: SharedMemory::new_aligned(scores, CMMA_ALIGN),
        dp: SharedMemory::new_aligned(scores, CMMA_ALIGN),
        p: SharedMemory::new_aligned(p_len, CMMA_ALIGN),
        ds: SharedMemory::new_aligned(probs, CMMA_ALIGN),
        lse: SharedMemory::new(comptime!(bq)),
        delta: SharedMemory::new(comptime!(bq)),
    }
}

/// Where the cube's block pair sits: its (batch, head), the query and key/value heads' views.
#[derive(CubeType, Clone, Copy)]
pub(super) struct Place {
    pub batch: u32,
    pub head: u32,
    pub kv_head: u32,
}

#[cube]
pub(super) fn place<I: CubePrimitive>(q: &Tensor<I>, k: &Tensor<I>) -> Place {
    let heads = q.shape(1) as u32;
    let head = CUBE_POS_Y % heads;
    Place {
        batch: CUBE_POS_Y / heads,
        head,
        kv_head: head / (heads / k.shape(1) as u32),
    }
}

/// `acc += Σ_kk A_kk B_kk` over `steps` tile steps: A's tile `kk` at `a[a_at + kk a_step]`, B's
/// at `b[b_at + kk b_step]`.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn chain<F: Float, T: TileMma>(
    acc: &mut T::Acc,
    a: &SharedMemory<F>,
    a_at: u32,
    #[comptime] a_step: u32,
    #[comptime] a_layout: TileLayout,
    #[comptime] a_stride: u32,
    b: &SharedMemory<F>,
    b_at: u32,
    #[comptime] b_step: u32,
    #[comptime] b_layout: TileLayout,
    #[comptime] b_stride: u32,
    #[comptime] steps: u32,
    #[comptime] plane_size: u32,
) {
    // A loop the compilers unroll where it pays (CUDA's and HIP's do for these short counts),
    // not copies in the source: smaller sources compile faster (lavapipe's LLVM by minutes).
    for kk in 0..steps {
        T::execute::<F>(
            acc,
            &a.slice((a_at + kk * a_step) as usize, a.len()),
            a_layout,
            a_stride,
            &b.slice((b_at + kk * b_step) as usize, b.len()),
            b_layout,
            b_stride,
            plane_size,
        );
    }
}

/// `out[tile] = A B^T` over the head (or value) dim, for one 16x16 tile of S (or dP): A's 16
/// rows start at row `a_row` of `a`, B's at row `b_row` of `b` (both `[rows, stride]`, `dim_tile`
/// columns used), the tile is stored at `out[out_at]`, `score_stride` per row.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn dots_tile<F: Float, T: TileMma>(
    a: &SharedMemory<F>,
    a_row: u32,
    b: &SharedMemory<F>,
    b_row: u32,
    out: &mut SharedMemory<f32>,
    out_at: u32,
    #[comptime] dim_tile: u32,
    #[comptime] stride: u32,
    #[comptime] config: MatrixGradientConfig,
) {
    let mut acc = T::zero(config.plane_size);
    chain::<F, T>(
        &mut acc,
        a,
        a_row * stride,
        MATRIX_TILE,
        TileLayout::RowMajor,
        stride,
        b,
        b_row * stride,
        MATRIX_TILE,
        // B^T's tile (kk, n): row-major B read column-major.
        TileLayout::ColMajor,
        stride,
        comptime!(dim_tile / MATRIX_TILE),
        config.plane_size,
    );
    let len = out.len();
    T::store(&acc, &mut out.slice_mut(out_at as usize, len), config.score_stride(), config.plane_size);
}

/// `accs[n] += strip^T B` for each 16-column tile `n` of `b` (`[block_q, stride]`, `dim_tile`
/// columns used): `strip` is the plane's 16-column strip of a `[block_q, prob_stride]` tile (P or
/// dS) from column `own`, its transpose's tile (0, kk) read column-major, 16 query rows further
/// per step. Per step the strip's fragment is loaded once for all of `accs`.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn strip_transposed_product<E: Float, T: TileMma>(
    accs: &mut Sequence<T::Acc>,
    strip: &SharedMemory<E>,
    own: u32,
    b: &SharedMemory<E>,
    #[comptime] dim_tile: u32,
    #[comptime] stride: u32,
    #[comptime] config: MatrixGradientConfig,
) {
    let prob_stride = comptime!(config.prob_stride());
    // A loop, as in `chain`; each step's row of products is unrolled.
    for kk in 0..comptime!(config.block_q / MATRIX_TILE) {
        execute_row::<T, E>(
            accs,
            comptime!(dim_tile / MATRIX_TILE),
            &strip.slice((own + kk * MATRIX_TILE * prob_stride) as usize, strip.len()),
            TileLayout::ColMajor,
            prob_stride,
            &b.slice((kk * MATRIX_TILE * stride) as usize, b.len()),
            TileLayout::RowMajor,
            stride,
            MATRIX_TILE,
            config.plane_size,
        );
    }
}

/// P (dK/dV kernel) and dS of the strip `[row0, row0 + rows) x [col0, col0 + cols)` of the pair,
/// from the dots and dP in shared memory; each lane of the plane takes entries `lane + t
/// plane_size`, row by row (with [`MatrixGradientConfig::pairs_rows_two_apart`], rows in the
/// order 0, 2, 1, 3, 4, 6, ...). `masked_pass` emits the tail, causal and mask checks.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn strip_gradients<F: Float, E: Float, M: Int>(
    mask: &Tensor<M>,
    bias: &Tensor<F>,
    params: &ScoreParams,
    tensors: &ScoreTensors,
    tiles: &mut PairTiles<E>,
    q_start: u32,
    kv_start: u32,
    row0: u32,
    col0: u32,
    #[comptime] rows: u32,
    #[comptime] cols: u32,
    #[comptime] config: MatrixGradientConfig,
    #[comptime] masked_pass: bool,
) {
    let entries = comptime!(rows * cols);
    let paired = comptime!(config.pairs_rows_two_apart(rows, cols));
    for t in 0..comptime!(entries.div_ceil(config.plane_size)) {
        let e = UNIT_POS_X + t * config.plane_size;
        if e < entries {
            let mut line = e / cols;
            if comptime!(paired) {
                // Rows 0, 1, 2, 3 of each group of 4 taken as 0, 2, 1, 3.
                let within = line % ROWS_PER_PAIRING;
                line = line - within + (within % 2) * 2 + within / 2;
            }
            let (i, j) = (row0 + line, col0 + e % cols);
            let at = (i * config.score_stride() + j) as usize;
            let prob_at = (i * config.prob_stride() + j) as usize;
            let dot = tiles.s[at];
            let logit = score::<F, M>(
                dot,
                q_start + i,
                kv_start + j,
                params,
                tensors,
                mask,
                bias,
                config.score,
                masked_pass,
            );
            let mut p = 0.0f32;
            let mut ds = 0.0f32;
            // Masked: P = 0 and dS = 0 exactly (see `recompute_p_and_ds`).
            if !is_masked_logit(logit) {
                let (entry_p, entry_ds) = entry_p_and_ds(
                    logit,
                    dot,
                    tiles.dp[at],
                    tiles.lse[i as usize],
                    tiles.delta[i as usize],
                    q_start + i,
                    kv_start + j,
                    params,
                    config.score,
                );
                p = entry_p;
                ds = entry_ds;
            }
            if comptime!(config.keeps_p()) {
                tiles.p[prob_at] = E::cast_from(p);
            }
            tiles.ds[prob_at] = E::cast_from(ds);
        }
    }
}

/// Loads rows `[start, start + rows)` of one (batch, head) of `tensor` into `tile` (converted
/// to the tiles' type `E`), padded: a head_dim-wide tensor (q, k), or with `values` a
/// val_dim-wide one (v, d_out). In vectors of `N` elements where the launcher found rows of
/// whole vectors ([`load_rows`]).
#[cube]
pub(super) fn stage<F: Float, E: Float, N: Size>(
    tensor: &Tensor<Vector<F, N>>,
    view: &HeadView,
    tile: &mut SharedMemory<E>,
    start: u32,
    #[comptime] rows: u32,
    #[comptime] values: bool,
    #[comptime] config: MatrixGradientConfig,
) {
    let (dim, dim_tile, stride) = comptime!(if values {
        (config.val_dim, config.val_dim_tile(), config.val_stride())
    } else {
        (config.head_dim, config.head_dim_tile(), config.head_stride())
    });
    load_rows::<F, E, N>(
        tensor,
        view,
        &mut tile.to_slice_mut(),
        start,
        rows,
        dim,
        dim_tile,
        stride,
        config.units(),
        !config.f32_tiles,
    );
}

/// Loads the lse and delta of query rows `[q_start, q_start + rows)` (0 past seq_q), through
/// the views of this (batch, head)'s rows made once per kernel.
#[cube]
pub(super) fn stage_stats<E: Float>(
    lse: &Tensor<f32>,
    delta: &Tensor<f32>,
    views: &(StatView, StatView),
    tiles: &mut PairTiles<E>,
    q_start: u32,
    #[comptime] rows: u32,
    #[comptime] units: u32,
) {
    let mut r = UNIT_POS;
    while r < rows {
        tiles.lse[r as usize] = view_row_stat(lse, &views.0, q_start + r);
        tiles.delta[r as usize] = view_row_stat(delta, &views.1, q_start + r);
        r += units;
    }
}

/// Writes this plane's 16 rows of a gradient (`dim` columns, accumulators `tiles`) to `out`'s
/// rows from `first_row`, times `factor` ([`TileMma::write`], through the plane's 16x16 part of
/// `staging`). Rows past `rows_end` and columns past `dim` are not written.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn write_rows<F: Float, T: TileMma>(
    out: &mut Tensor<F>,
    tiles: &Sequence<T::Acc>,
    staging: &mut SharedMemory<f32>,
    batch: u32,
    head: u32,
    first_row: u32,
    rows_end: u32,
    factor: f32,
    #[comptime] dim: u32,
    #[comptime] config: MatrixGradientConfig,
) {
    let base = batch as usize * out.stride(0) + head as usize * out.stride(1);
    let own = UNIT_POS_Y * TILE_ELEMENTS;
    let len = staging.len();
    #[unroll]
    for n in 0..comptime!(dim.div_ceil(MATRIX_TILE)) {
        T::write::<F>(
            tiles.index(n as usize),
            out,
            base,
            first_row,
            n * MATRIX_TILE,
            rows_end,
            dim,
            factor,
            &mut staging.slice_mut(own as usize, len),
            config.plane_size,
        );
    }
}
