//! The matrix gradient kernels: FlashAttention-2's backward (Algorithm 2) on 16x16x16 tile
//! products ([`crate::primitives::tile_mma`]: `cmma` fragments, or their scalar stand-in for
//! the tests), for devices whose matrix units CubeCL reaches only through cmma (gfx942 with
//! rocWMMA; CUDA runs them too, forced, so that their numerics are measured on a GPU).
//!
//! One cube per outer block (dK/dV: `block_kv` key rows; dQ: `block_q` query rows), one plane
//! per 16 outer rows. Plane `w` keeps its 16 rows of the gradients in 16x16 f32 accumulators
//! for the whole run and computes only its own strip of each block pair's scores:
//! ```text
//!            dK/dV kernel (plane w: key rows 16w..16w+16)   dQ kernel (plane w: query rows)
//!            keys ->                                        keys ->
//!   queries  ┌────┬────┬────┬────┐                         ┌───────────────────┐
//!     │      │    │ w  │    │    │  S, dP: column strip    │        w          │ row strip
//!     v      │    │    │    │    │                         ├───────────────────┤
//!            └────┴────┴────┴────┘                         └───────────────────┘
//!   S  = Q K_w^T, dP = dO V_w^T   (f32, to shared memory)   S = Q_w K^T, dP = dO_w V^T
//!   P  = exp(logit(S) - lse), dS = P ∘ (dP - delta)  (each lane its entries of the strip;
//!        stored in the dtype, as FA-2 rounds them, with the softcap and dropout factors)
//!   dV_w += P_w^T dO, dK_w += dS_w^T Q                      dQ_w += dS_w K
//! ```
//! Q, dO, K, V are staged in the dtype, zero-padded to whole tiles; rows past the sequences
//! are zeros and their entries masked. dS is the gradient of the scaled dot divided by the
//! scale: dK and dQ are multiplied by it once, when written. Every gradient element is written
//! by one lane and every sum runs in a fixed order: reruns are bit-identical. Synchronization
//! is cube-wide only (`sync_plane` does not compile on HIP), control flow uniform.
use cubecl::prelude::*;

use crate::config::MATRIX_TILE;
use crate::primitives::block_range::{
    kv_block_range_full_rows, pair_needs_masked_pass, query_block_heaviest_first, query_block_span,
};
use crate::primitives::score::{
    ScoreParams, ScoreTensors, is_masked_logit, score, score_params, score_tensors,
};
use crate::primitives::tile_io::{HeadView, head_view, load_tile, row_stat};
use crate::primitives::tile_mma::{Cmma, StandIn, TileLayout, TileMma};
use crate::problem::AttentionProblem;

use super::GradientInputs;
use super::block_pair::entry_p_and_ds;
use super::config::{BackwardKernel, MatrixGradientConfig};

/// Bytes of alignment of every tile a fragment is loaded from or stored to (wmma needs
/// 256-bit aligned pointers; every tile offset the kernels use is a multiple of it).
const CMMA_ALIGN: usize = 32;
/// Elements of one 16x16 tile: a plane's staging area when it writes its gradients.
const TILE_ELEMENTS: u32 = MATRIX_TILE * MATRIX_TILE;

/// Launches the matrix dK/dV kernel with `config` (a [`BackwardKernel::KeyValue`] config from
/// [`crate::plan::backward`]). `dk` and `dv` are fully overwritten.
pub(crate) fn launch_dkdv<R: Runtime, F: Float, M: Int>(
    client: &ComputeClient<R>,
    problem: &AttentionProblem,
    inputs: GradientInputs<R>,
    dk: TensorBinding<R>,
    dv: TensorBinding<R>,
    config: MatrixGradientConfig,
) {
    debug_assert_eq!(config.kernel, BackwardKernel::KeyValue);
    let blocks = problem.seq_kv.div_ceil(config.block_kv as usize) as u32;
    let cube_count = CubeCount::Static(blocks, problem.heads_total() as u32, 1);
    let cube_dim = CubeDim::new_2d(config.plane_size, config.planes());
    let a = inputs.into_args(client);
    let (dk, dv) = (dk.into_tensor_arg(), dv.into_tensor_arg());
    let params = score_params(problem);
    // The tiles' type (the dtype, or f32) and the products' implementation are types.
    macro_rules! launch {
        ($tile:ty, $mma:ty) => {
            // SAFETY: shapes and strides were validated against the problem; global reads are
            // bounds-checked in the tile loads, global writes against seq_kv and the dims.
            unsafe {
                matrix_dkdv_kernel::launch_unchecked::<F, $tile, M, $mma, R>(
                    client, cube_count, cube_dim, a.q, a.k, a.v, a.d_out, a.lse, a.delta, a.mask,
                    a.bias, a.slopes, dk, dv, params, config,
                )
            }
        };
    }
    match (config.f32_tiles, config.stand_in) {
        (false, false) => launch!(F, Cmma),
        (false, true) => launch!(F, StandIn),
        (true, false) => launch!(f32, Cmma),
        (true, true) => launch!(f32, StandIn),
    }
}

/// Launches the matrix dQ kernel with `config` (a [`BackwardKernel::Query`] config). `dq` is
/// fully overwritten.
pub(crate) fn launch_dq<R: Runtime, F: Float, M: Int>(
    client: &ComputeClient<R>,
    problem: &AttentionProblem,
    inputs: GradientInputs<R>,
    dq: TensorBinding<R>,
    config: MatrixGradientConfig,
) {
    debug_assert_eq!(config.kernel, BackwardKernel::Query);
    let blocks = problem.seq_q.div_ceil(config.block_q as usize) as u32;
    let cube_count = CubeCount::Static(blocks, problem.heads_total() as u32, 1);
    let cube_dim = CubeDim::new_2d(config.plane_size, config.planes());
    let a = inputs.into_args(client);
    let dq = dq.into_tensor_arg();
    let params = score_params(problem);
    macro_rules! launch {
        ($tile:ty, $mma:ty) => {
            // SAFETY: as in `launch_dkdv`; writes are checked against seq_q and head_dim.
            unsafe {
                matrix_dq_kernel::launch_unchecked::<F, $tile, M, $mma, R>(
                    client, cube_count, cube_dim, a.q, a.k, a.v, a.d_out, a.lse, a.delta, a.mask,
                    a.bias, a.slopes, dq, params, config,
                )
            }
        };
    }
    match (config.f32_tiles, config.stand_in) {
        (false, false) => launch!(F, Cmma),
        (false, true) => launch!(F, StandIn),
        (true, false) => launch!(f32, Cmma),
        (true, true) => launch!(f32, StandIn),
    }
}

/// The shared tiles of one block pair (row-major, dims padded to whole tiles, each row followed by
/// 16 bytes of padding: [`MatrixGradientConfig::head_stride`] and the other strides).
#[derive(CubeType)]
struct PairTiles<F: Float> {
    /// `[block_q, head_dim_tile]`.
    q: SharedMemory<F>,
    /// `[block_q, val_dim_tile]`.
    d_out: SharedMemory<F>,
    /// `[block_kv, head_dim_tile]`.
    k: SharedMemory<F>,
    /// `[block_kv, val_dim_tile]`.
    v: SharedMemory<F>,
    /// `[block_q, block_kv]` f32: the raw dots `q · k`; at the end, each plane's staging tile.
    s: SharedMemory<f32>,
    /// `[block_q, block_kv]` f32: `dO · v`.
    dp: SharedMemory<f32>,
    /// `[block_q, block_kv]`: P (dK/dV kernel; one tile's worth, unused, in the dQ kernel).
    p: SharedMemory<F>,
    /// `[block_q, block_kv]`: dS.
    ds: SharedMemory<F>,
    /// `[block_q]`: the forward's log-sum-exp of each query row.
    lse: SharedMemory<f32>,
    /// `[block_q]`: `rowsum(d_out ∘ o)`.
    delta: SharedMemory<f32>,
}

#[cube]
fn new_pair_tiles<F: Float>(#[comptime] config: MatrixGradientConfig) -> PairTiles<F> {
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
struct Place {
    batch: u32,
    head: u32,
    kv_head: u32,
}

#[cube]
fn place<F: Float>(q: &Tensor<F>, k: &Tensor<F>) -> Place {
    let heads = q.shape(1) as u32;
    let head = CUBE_POS_Y % heads;
    Place {
        batch: CUBE_POS_Y / heads,
        head,
        kv_head: head / (heads / k.shape(1) as u32),
    }
}

/// `count` zero accumulators.
#[cube]
fn zero_tiles<T: TileMma>(#[comptime] count: u32, #[comptime] plane_size: u32) -> Sequence<T::Acc> {
    let mut tiles = Sequence::<T::Acc>::new();
    #[unroll]
    for _ in 0..count {
        tiles.push(T::zero(plane_size));
    }
    tiles
}

/// `acc += Σ_kk A_kk B_kk` over `steps` tile steps: A's tile `kk` at `a[a_at + kk a_step]`, B's
/// at `b[b_at + kk b_step]`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn chain<F: Float, T: TileMma>(
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
fn dots_tile<F: Float, T: TileMma>(
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
/// per step.
#[cube]
#[allow(clippy::too_many_arguments)]
fn strip_transposed_product<E: Float, T: TileMma>(
    accs: &mut Sequence<T::Acc>,
    strip: &SharedMemory<E>,
    own: u32,
    b: &SharedMemory<E>,
    #[comptime] dim_tile: u32,
    #[comptime] stride: u32,
    #[comptime] config: MatrixGradientConfig,
) {
    let prob_stride = comptime!(config.prob_stride());
    #[unroll]
    for n in 0..comptime!(dim_tile / MATRIX_TILE) {
        chain::<E, T>(
            accs.index_mut(n as usize),
            strip,
            own,
            comptime!(MATRIX_TILE * prob_stride),
            TileLayout::ColMajor,
            prob_stride,
            b,
            n * MATRIX_TILE,
            comptime!(MATRIX_TILE * stride),
            TileLayout::RowMajor,
            stride,
            comptime!(config.block_q / MATRIX_TILE),
            config.plane_size,
        );
    }
}

/// P (dK/dV kernel) and dS of the strip `[row0, row0 + rows) x [col0, col0 + cols)` of the pair,
/// from the dots and dP in shared memory; each lane of the plane takes entries `lane + t
/// plane_size`. `masked_pass` emits the tail, causal and mask checks.
#[cube]
#[allow(clippy::too_many_arguments)]
fn strip_gradients<F: Float, E: Float, M: Int>(
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
    for t in 0..comptime!(entries.div_ceil(config.plane_size)) {
        let e = UNIT_POS_X + t * config.plane_size;
        if e < entries {
            let (i, j) = (row0 + e / cols, col0 + e % cols);
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
/// to the tiles' type `E`), padded.
#[cube]
#[allow(clippy::too_many_arguments)]
fn stage<F: Float, E: Float>(
    tensor: &Tensor<F>,
    view: &HeadView,
    tile: &mut SharedMemory<E>,
    start: u32,
    #[comptime] rows: u32,
    #[comptime] dim: u32,
    #[comptime] dim_tile: u32,
    #[comptime] units: u32,
) {
    load_tile::<F, E>(tensor, view, &mut tile.to_slice_mut(), start, rows, dim, dim_tile, units);
}

/// Loads the lse and delta of query rows `[q_start, q_start + rows)` (0 past seq_q).
#[cube]
fn stage_stats<E: Float>(
    lse: &Tensor<f32>,
    delta: &Tensor<f32>,
    tiles: &mut PairTiles<E>,
    at: Place,
    q_start: u32,
    #[comptime] rows: u32,
    #[comptime] units: u32,
) {
    let mut r = UNIT_POS;
    while r < rows {
        tiles.lse[r as usize] = row_stat(lse, at.batch, at.head, q_start + r);
        tiles.delta[r as usize] = row_stat(delta, at.batch, at.head, q_start + r);
        r += units;
    }
}

/// Writes this plane's 16 rows of a gradient (`dim` columns, accumulators `tiles`) to `out`'s
/// rows from `first_row`, times `factor` ([`TileMma::write`], through the plane's 16x16 part of
/// `staging`). Rows past `rows_end` and columns past `dim` are not written.
#[cube]
#[allow(clippy::too_many_arguments)]
fn write_rows<F: Float, T: TileMma>(
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

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn matrix_dkdv_kernel<F: Float, E: Float, M: Int, T: TileMma>(
    q: &Tensor<F>,
    k: &Tensor<F>,
    v: &Tensor<F>,
    d_out: &Tensor<F>,
    lse: &Tensor<f32>,
    delta: &Tensor<f32>,
    mask: &Tensor<M>,
    bias: &Tensor<F>,
    slopes: &Tensor<f32>,
    dk: &mut Tensor<F>,
    dv: &mut Tensor<F>,
    params: ScoreParams,
    #[comptime] config: MatrixGradientConfig,
) {
    let (bq, bkv) = comptime!((config.block_q, config.block_kv));
    let (dk_tile, dv_tile) = comptime!((config.head_dim_tile(), config.val_dim_tile()));
    let (dk_stride, dv_stride) = comptime!((config.head_stride(), config.val_stride()));
    let score_stride = comptime!(config.score_stride());
    let (units, plane_size) = comptime!((config.units(), config.plane_size));
    let at = place::<F>(q, k);
    let kv_start = CUBE_POS_X * bkv;
    // This plane's key rows inside the block, and its 16 columns of each pair's scores.
    let own = UNIT_POS_Y * MATRIX_TILE;
    let tensors = score_tensors(mask, bias, slopes, at.batch, at.head, config.score);
    let mut tiles = new_pair_tiles::<E>(config);
    let mut dk_acc = zero_tiles::<T>(comptime!(dk_tile / MATRIX_TILE), plane_size);
    let mut dv_acc = zero_tiles::<T>(comptime!(dv_tile / MATRIX_TILE), plane_size);
    let q_view = head_view(q, at.batch, at.head);
    let d_out_view = head_view(d_out, at.batch, at.head);

    // Step 1: K and V of this block, once; the first query block's sync makes them visible.
    stage::<F, E>(k, &head_view(k, at.batch, at.kv_head), &mut tiles.k, kv_start, bkv, config.head_dim, dk_stride, units);
    stage::<F, E>(v, &head_view(v, at.batch, at.kv_head), &mut tiles.v, kv_start, bkv, config.val_dim, dv_stride, units);

    // Step 2: the query blocks that see this block (causal: none above the diagonal).
    let span = query_block_span(kv_start, &params, bq, bkv, config.score);
    for q_block in span.start..span.end {
        let q_start = q_block * bq;
        stage::<F, E>(q, &q_view, &mut tiles.q, q_start, bq, config.head_dim, dk_stride, units);
        stage::<F, E>(d_out, &d_out_view, &mut tiles.d_out, q_start, bq, config.val_dim, dv_stride, units);
        stage_stats(lse, delta, &mut tiles, at, q_start, bq, units);
        sync_cube();

        // S and dP of this plane's column strip, one 16x16 tile per 16 query rows.
        for i in 0..comptime!(bq / MATRIX_TILE) {
            let out_at = i * MATRIX_TILE * score_stride + own;
            dots_tile::<E, T>(&tiles.q, i * MATRIX_TILE, &tiles.k, own, &mut tiles.s, out_at, dk_tile, dk_stride, config);
            dots_tile::<E, T>(&tiles.d_out, i * MATRIX_TILE, &tiles.v, own, &mut tiles.dp, out_at, dv_tile, dv_stride, config);
        }
        sync_cube();

        // A uniform branch: every unit of the cube takes the same pass.
        if pair_needs_masked_pass(q_start, kv_start, &params, bq, bkv, config.score) {
            strip_gradients::<F, E, M>(mask, bias, &params, &tensors, &mut tiles, q_start, kv_start, 0, own, bq, MATRIX_TILE, config, true);
        } else {
            strip_gradients::<F, E, M>(mask, bias, &params, &tensors, &mut tiles, q_start, kv_start, 0, own, bq, MATRIX_TILE, config, false);
        }
        sync_cube();

        // dV_w += P_w^T dO and dK_w += dS_w^T Q.
        strip_transposed_product::<E, T>(&mut dv_acc, &tiles.p, own, &tiles.d_out, dv_tile, dv_stride, config);
        strip_transposed_product::<E, T>(&mut dk_acc, &tiles.ds, own, &tiles.q, dk_tile, dk_stride, config);
        // The next query block overwrites Q, dO and the stats.
        sync_cube();
    }

    // Step 3: dK = scale * Σ dS^T Q and dV = Σ P^T dO, staged through S's tile.
    let first_row = kv_start + own;
    write_rows::<F, T>(dk, &dk_acc, &mut tiles.s, at.batch, at.head, first_row, params.seq_kv, params.scale, config.head_dim, config);
    write_rows::<F, T>(dv, &dv_acc, &mut tiles.s, at.batch, at.head, first_row, params.seq_kv, 1.0f32, config.val_dim, config);
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn matrix_dq_kernel<F: Float, E: Float, M: Int, T: TileMma>(
    q: &Tensor<F>,
    k: &Tensor<F>,
    v: &Tensor<F>,
    d_out: &Tensor<F>,
    lse: &Tensor<f32>,
    delta: &Tensor<f32>,
    mask: &Tensor<M>,
    bias: &Tensor<F>,
    slopes: &Tensor<f32>,
    dq: &mut Tensor<F>,
    params: ScoreParams,
    #[comptime] config: MatrixGradientConfig,
) {
    let (bq, bkv) = comptime!((config.block_q, config.block_kv));
    let (dk_tile, dv_tile) = comptime!((config.head_dim_tile(), config.val_dim_tile()));
    let (dk_stride, dv_stride) = comptime!((config.head_stride(), config.val_stride()));
    let (score_stride, prob_stride) = comptime!((config.score_stride(), config.prob_stride()));
    let (units, plane_size) = comptime!((config.units(), config.plane_size));
    let at = place::<F>(q, k);
    let q_block = query_block_heaviest_first(config.score.causal);
    let q_start = q_block * bq;
    // This plane's query rows inside the block: its 16-row strip of each pair's scores.
    let own = UNIT_POS_Y * MATRIX_TILE;
    let tensors = score_tensors(mask, bias, slopes, at.batch, at.head, config.score);
    let mut tiles = new_pair_tiles::<E>(config);
    let mut dq_acc = zero_tiles::<T>(comptime!(dk_tile / MATRIX_TILE), plane_size);
    let k_view = head_view(k, at.batch, at.kv_head);
    let v_view = head_view(v, at.batch, at.kv_head);

    // Step 1: Q, dO, lse and delta of this block, once; the first key block's sync makes them
    // visible.
    stage::<F, E>(q, &head_view(q, at.batch, at.head), &mut tiles.q, q_start, bq, config.head_dim, dk_stride, units);
    stage::<F, E>(d_out, &head_view(d_out, at.batch, at.head), &mut tiles.d_out, q_start, bq, config.val_dim, dv_stride, units);
    stage_stats(lse, delta, &mut tiles, at, q_start, bq, units);

    // Step 2: the visible key/value blocks, unmasked pass first; a partial query block takes the
    // masked pass everywhere (its rows past seq_q must not read the bias).
    let range = kv_block_range_full_rows(q_block, &params, bq, bkv, config.score);
    for kv_block in range.start..range.end {
        let kv_start = kv_block * bkv;
        stage::<F, E>(k, &k_view, &mut tiles.k, kv_start, bkv, config.head_dim, dk_stride, units);
        stage::<F, E>(v, &v_view, &mut tiles.v, kv_start, bkv, config.val_dim, dv_stride, units);
        sync_cube();

        // S and dP of this plane's row strip, one 16x16 tile per 16 keys.
        for j in 0..comptime!(bkv / MATRIX_TILE) {
            let out_at = own * score_stride + j * MATRIX_TILE;
            dots_tile::<E, T>(&tiles.q, own, &tiles.k, j * MATRIX_TILE, &mut tiles.s, out_at, dk_tile, dk_stride, config);
            dots_tile::<E, T>(&tiles.d_out, own, &tiles.v, j * MATRIX_TILE, &mut tiles.dp, out_at, dv_tile, dv_stride, config);
        }
        sync_cube();

        if kv_block >= range.first_masked {
            strip_gradients::<F, E, M>(mask, bias, &params, &tensors, &mut tiles, q_start, kv_start, own, 0, MATRIX_TILE, bkv, config, true);
        } else {
            strip_gradients::<F, E, M>(mask, bias, &params, &tensors, &mut tiles, q_start, kv_start, own, 0, MATRIX_TILE, bkv, config, false);
        }
        sync_cube();

        // dQ_w += dS_w K.
        #[unroll]
        for n in 0..comptime!(dk_tile / MATRIX_TILE) {
            chain::<E, T>(
                dq_acc.index_mut(n as usize),
                &tiles.ds,
                own * prob_stride,
                MATRIX_TILE,
                TileLayout::RowMajor,
                prob_stride,
                &tiles.k,
                n * MATRIX_TILE,
                comptime!(MATRIX_TILE * dk_stride),
                TileLayout::RowMajor,
                dk_stride,
                comptime!(bkv / MATRIX_TILE),
                plane_size,
            );
        }
        // The next key block overwrites K and V.
        sync_cube();
    }

    // Step 3: dQ = scale * Σ dS K, staged through S's tile. Query blocks that see no key at all
    // write zeros.
    write_rows::<F, T>(dq, &dq_acc, &mut tiles.s, at.batch, at.head, q_start + own, params.seq_q, params.scale, config.head_dim, config);
}
