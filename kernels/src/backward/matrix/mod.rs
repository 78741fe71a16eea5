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
//! by one lane and every sum runs in a fixed order: reruns are bit-identical. A plane's strips
//! of S, dP, P and dS are its own: with `MatrixGradientConfig::plane_sync` (CUDA; `sync_plane`
//! does not compile on HIP) it hands them over with plane syncs, the streamed blocks (and the
//! one pass's dQ share) with cube syncs. Control flow is uniform across the cube.
//!
//! The one pass ([`MatrixGradientConfig::atomic_dq`], FlashAttention-2's schedule): the dK/dV
//! kernel also computes each pair's `dQ share = dS K` (`[block_q, head_dim]`, 16x16 tiles
//! dealt round-robin to the planes, each chained over the block's keys), stages each tile
//! through its plane's part of S's tile and adds it to an f32 accumulator with atomic adds
//! ([`super::dq_sink`]); dQ's kernel does not run. Its last bits vary from run to run.
use cubecl::prelude::*;

use crate::config::MATRIX_TILE;
use crate::primitives::block_range::{
    kv_block_range_full_rows, pair_needs_masked_pass, query_block_heaviest_first, query_block_span,
};
use crate::primitives::row_reduce::sync_units;
use crate::primitives::row_stream::{row_source, row_stream, stream_ahead, stream_block};
use crate::primitives::score::{ScoreParams, score_params, score_tensors};
use crate::primitives::tile_io::{head_view, stat_view};
use crate::primitives::tile_mma::{Cmma, StandIn, TileLayout, TileMma, execute_row, zero_tiles};
use crate::problem::AttentionProblem;

use super::GradientInputs;
use super::config::{BackwardKernel, MatrixGradientConfig};
use super::dq_sink::{AtomicDq, AtomicDqPairs, AtomicDqQuads, DqSink, NoDq, no_accumulator};
use dq_share::add_dq_share;
use tiles::{
    dots_tile, new_pair_tiles, place, stage, stage_stats, strip_gradients,
    strip_transposed_product, write_rows,
};

mod dq_share;
mod tiles;


/// Launches the matrix dK/dV kernel with `config` (a [`BackwardKernel::KeyValue`] config from
/// [`crate::plan::backward`]). `dk` and `dv` are fully overwritten. With `config.atomic_dq`
/// (the one pass) every block pair's `dS K` is also added to `dq_acc` (f32, zeroed, contiguous
/// `[batch, num_heads, seq_q, head_dim]`, without the scale), `config.dq_width` columns per
/// atomic request; otherwise `dq_acc` is `None`.
pub(crate) fn launch_dkdv<R: Runtime, F: Float, M: Int>(
    client: &ComputeClient<R>,
    problem: &AttentionProblem,
    inputs: GradientInputs<R>,
    (dk, dv, dq_acc): (TensorBinding<R>, TensorBinding<R>, Option<TensorBinding<R>>),
    config: MatrixGradientConfig,
) {
    debug_assert_eq!(config.atomic_dq, dq_acc.is_some());
    debug_assert_eq!(config.kernel, BackwardKernel::KeyValue);
    let blocks = problem.seq_kv.div_ceil(config.block_kv as usize) as u32;
    let cube_count = CubeCount::Static(blocks, problem.heads_total() as u32, 1);
    let cube_dim = CubeDim::new_2d(config.plane_size, config.planes());
    let width = inputs.load_width(client, problem.dtype, config.vector_loads);
    let a = inputs.into_args(client);
    let (dk, dv) = (dk.into_tensor_arg(), dv.into_tensor_arg());
    let dq_acc = match dq_acc {
        Some(acc) => acc.into_tensor_arg(),
        None => no_accumulator(client),
    };
    let params = score_params(problem);
    // The tiles' type (the dtype, or f32), the products' implementation and where dQ goes are
    // types.
    macro_rules! launch {
        ($tile:ty, $mma:ty, $sink:ty) => {
            // SAFETY: shapes and strides were validated against the problem; global reads are
            // bounds-checked in the tile loads (in vectors only where `load_width` found rows
            // of whole vectors), global writes against seq_kv and the dims
            // (dq_acc: rows against seq_q, columns against head_dim, one-pass configs only).
            unsafe {
                matrix_dkdv_kernel::launch_unchecked::<F, $tile, M, $mma, $sink, R>(
                    client, cube_count, cube_dim, width, a.q, a.k, a.v, a.d_out, a.lse, a.delta,
                    a.mask, a.bias, a.slopes, dk, dv, dq_acc, params, config,
                )
            }
        };
    }
    macro_rules! by_sink {
        ($tile:ty, $mma:ty) => {
            match (config.atomic_dq, config.dq_width) {
                (false, _) => launch!($tile, $mma, NoDq),
                (true, 4) => launch!($tile, $mma, AtomicDqQuads),
                (true, 2) => launch!($tile, $mma, AtomicDqPairs),
                (true, _) => launch!($tile, $mma, AtomicDq),
            }
        };
    }
    match (config.f32_tiles, config.stand_in) {
        (false, false) => by_sink!(F, Cmma),
        (false, true) => by_sink!(F, StandIn),
        (true, false) => by_sink!(f32, Cmma),
        (true, true) => by_sink!(f32, StandIn),
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
    let width = inputs.load_width(client, problem.dtype, config.vector_loads);
    let a = inputs.into_args(client);
    let dq = dq.into_tensor_arg();
    let params = score_params(problem);
    macro_rules! launch {
        ($tile:ty, $mma:ty) => {
            // SAFETY: as in `launch_dkdv`; writes are checked against seq_q and head_dim.
            unsafe {
                matrix_dq_kernel::launch_unchecked::<F, $tile, M, $mma, R>(
                    client, cube_count, cube_dim, width, a.q, a.k, a.v, a.d_out, a.lse, a.delta,
                    a.mask, a.bias, a.slopes, dq, params, config,
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

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn matrix_dkdv_kernel<F: Float, E: Float, M: Int, T: TileMma, D: DqSink, N: Size>(
    q: &Tensor<Vector<F, N>>,
    k: &Tensor<Vector<F, N>>,
    v: &Tensor<Vector<F, N>>,
    d_out: &Tensor<Vector<F, N>>,
    lse: &Tensor<f32>,
    delta: &Tensor<f32>,
    mask: &Tensor<M>,
    bias: &Tensor<F>,
    slopes: &Tensor<f32>,
    dk: &mut Tensor<F>,
    dv: &mut Tensor<F>,
    dq_acc: &mut Tensor<D::Acc>,
    params: ScoreParams,
    #[comptime] config: MatrixGradientConfig,
) {
    let (bq, bkv) = comptime!((config.block_q, config.block_kv));
    let (dk_tile, dv_tile) = comptime!((config.head_dim_tile(), config.val_dim_tile()));
    let (dk_stride, dv_stride) = comptime!((config.head_stride(), config.val_stride()));
    let score_stride = comptime!(config.score_stride());
    let (units, plane_size) = comptime!((config.units(), config.plane_size));
    let at = place::<Vector<F, N>>(q, k);
    let kv_start = CUBE_POS_X * bkv;
    // This plane's key rows inside the block, and its 16 columns of each pair's scores.
    let own = UNIT_POS_Y * MATRIX_TILE;
    let tensors = score_tensors(mask, bias, slopes, at.batch, at.head, config.score);
    let mut tiles = new_pair_tiles::<E>(config);
    let stats = (stat_view(lse, at.batch, at.head), stat_view(delta, at.batch, at.head));
    let mut dk_acc = zero_tiles::<T>(comptime!(dk_tile / MATRIX_TILE), plane_size);
    let mut dv_acc = zero_tiles::<T>(comptime!(dv_tile / MATRIX_TILE), plane_size);
    let source = row_source::<F, N>(q, d_out, at.batch, at.head);
    let stream = comptime!(config.inner_stream());
    let mut staged = row_stream::<F, N>(q, stream);

    // Step 1: K and V of this block, once; the first query block's sync makes them visible.
    stage::<F, E, N>(k, &head_view(k, at.batch, at.kv_head), &mut tiles.k, kv_start, bkv, false, config);
    stage::<F, E, N>(v, &head_view(v, at.batch, at.kv_head), &mut tiles.v, kv_start, bkv, true, config);

    // Step 2: the query blocks that see this block (causal: none above the diagonal), Q and
    // dO streamed (with `prefetch`, the next block's loads in flight while one computes).
    let span = query_block_span(kv_start, &params, bq, bkv, config.score);
    for q_block in span.start..span.end {
        let q_start = q_block * bq;
        let (q_tile, d_out_tile) = (&mut tiles.q, &mut tiles.d_out);
        stream_block::<F, E, N>(&mut staged, &source, q_tile, d_out_tile, q_block, &span, stream);
        stage_stats(lse, delta, &stats, &mut tiles, q_start, bq, units);
        sync_cube();
        stream_ahead::<F, N>(&mut staged, &source, q_block, &span, stream);

        // S and dP of this plane's column strip, one 16x16 tile per 16 query rows.
        for i in 0..comptime!(bq / MATRIX_TILE) {
            let out_at = i * MATRIX_TILE * score_stride + own;
            dots_tile::<E, T>(&tiles.q, i * MATRIX_TILE, &tiles.k, own, &mut tiles.s, out_at, dk_tile, dk_stride, config);
            dots_tile::<E, T>(&tiles.d_out, i * MATRIX_TILE, &tiles.v, own, &mut tiles.dp, out_at, dv_tile, dv_stride, config);
        }
        // The strips are the plane's own: with `plane_sync` it hands them over by itself.
        sync_units(config.plane_sync);

        // A uniform branch: every unit of the cube takes the same pass.
        if pair_needs_masked_pass(q_start, kv_start, &params, bq, bkv, config.score) {
            strip_gradients::<F, E, M>(mask, bias, &params, &tensors, &mut tiles, q_start, kv_start, 0, own, bq, MATRIX_TILE, config, true);
        } else {
            strip_gradients::<F, E, M>(mask, bias, &params, &tensors, &mut tiles, q_start, kv_start, 0, own, bq, MATRIX_TILE, config, false);
        }
        // P and dS back to the plane's fragments; the one pass's dQ share reads every plane's.
        sync_units(comptime!(config.plane_sync && !config.atomic_dq));

        // dV_w += P_w^T dO and dK_w += dS_w^T Q.
        strip_transposed_product::<E, T>(&mut dv_acc, &tiles.p, own, &tiles.d_out, dv_tile, dv_stride, config);
        strip_transposed_product::<E, T>(&mut dk_acc, &tiles.ds, own, &tiles.q, dk_tile, dk_stride, config);
        // The one pass: dQ += dS K for the block's query rows (S's tile is free until the next
        // block's dots).
        if comptime!(config.atomic_dq) {
            add_dq_share::<E, T, D>(dq_acc, &mut tiles, q_start, params.seq_q, config);
        }
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
pub fn matrix_dq_kernel<F: Float, E: Float, M: Int, T: TileMma, N: Size>(
    q: &Tensor<Vector<F, N>>,
    k: &Tensor<Vector<F, N>>,
    v: &Tensor<Vector<F, N>>,
    d_out: &Tensor<Vector<F, N>>,
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
    let at = place::<Vector<F, N>>(q, k);
    let q_block = query_block_heaviest_first(config.score.causal);
    let q_start = q_block * bq;
    // This plane's query rows inside the block: its 16-row strip of each pair's scores.
    let own = UNIT_POS_Y * MATRIX_TILE;
    let tensors = score_tensors(mask, bias, slopes, at.batch, at.head, config.score);
    let mut tiles = new_pair_tiles::<E>(config);
    let stats = (stat_view(lse, at.batch, at.head), stat_view(delta, at.batch, at.head));
    let mut dq_acc = zero_tiles::<T>(comptime!(dk_tile / MATRIX_TILE), plane_size);
    let source = row_source::<F, N>(k, v, at.batch, at.kv_head);
    let stream = comptime!(config.inner_stream());
    let mut staged = row_stream::<F, N>(k, stream);

    // Step 1: Q, dO, lse and delta of this block, once; the first key block's sync makes them
    // visible.
    stage::<F, E, N>(q, &head_view(q, at.batch, at.head), &mut tiles.q, q_start, bq, false, config);
    stage::<F, E, N>(d_out, &head_view(d_out, at.batch, at.head), &mut tiles.d_out, q_start, bq, true, config);
    stage_stats(lse, delta, &stats, &mut tiles, q_start, bq, units);

    // Step 2: the visible key/value blocks, unmasked pass first; a partial query block takes the
    // masked pass everywhere (its rows past seq_q must not read the bias).
    let range = kv_block_range_full_rows(q_block, &params, bq, bkv, config.score);
    for kv_block in range.start..range.end {
        let kv_start = kv_block * bkv;
        let (k_tile, v_tile) = (&mut tiles.k, &mut tiles.v);
        stream_block::<F, E, N>(&mut staged, &source, k_tile, v_tile, kv_block, &range, stream);
        sync_cube();
        stream_ahead::<F, N>(&mut staged, &source, kv_block, &range, stream);

        // S and dP of this plane's row strip, one 16x16 tile per 16 keys.
        for j in 0..comptime!(bkv / MATRIX_TILE) {
            let out_at = own * score_stride + j * MATRIX_TILE;
            dots_tile::<E, T>(&tiles.q, own, &tiles.k, j * MATRIX_TILE, &mut tiles.s, out_at, dk_tile, dk_stride, config);
            dots_tile::<E, T>(&tiles.d_out, own, &tiles.v, j * MATRIX_TILE, &mut tiles.dp, out_at, dv_tile, dv_stride, config);
        }
        sync_units(config.plane_sync);

        if kv_block >= range.first_masked {
            strip_gradients::<F, E, M>(mask, bias, &params, &tensors, &mut tiles, q_start, kv_start, own, 0, MATRIX_TILE, bkv, config, true);
        } else {
            strip_gradients::<F, E, M>(mask, bias, &params, &tensors, &mut tiles, q_start, kv_start, own, 0, MATRIX_TILE, bkv, config, false);
        }
        sync_units(config.plane_sync);

        // dQ_w += dS_w K: per 16 keys, the plane's dS fragment once for all of dQ's tiles.
        for kk in 0..comptime!(bkv / MATRIX_TILE) {
            execute_row::<T, E>(
                &mut dq_acc,
                comptime!(dk_tile / MATRIX_TILE),
                &tiles.ds.slice((own * prob_stride + kk * MATRIX_TILE) as usize, tiles.ds.len()),
                TileLayout::RowMajor,
                prob_stride,
                &tiles.k.slice((kk * MATRIX_TILE * dk_stride) as usize, tiles.k.len()),
                TileLayout::RowMajor,
                dk_stride,
                MATRIX_TILE,
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
