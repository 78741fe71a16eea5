//! The matrix forward path: `S = Q K^T` and `P V` on 16x16x16 tile products
//! ([`TileMma`]: the device's `cmma` fragments, or the scalar stand-in on devices without
//! them), the online softmax through shared memory.
//!
//! One cube per (query block, batch * head), `block_q / plane_rows` planes; plane `p` owns
//! query rows `[p R, p R + R)` of the block (R = `plane_rows`: 16, or 32 with two row tiles a
//! plane) and keeps their O in its accumulator fragments across the key/value loop. Per
//! key/value block: each plane computes its R rows of S into shared memory (f32), the units of
//! each row turn them into logits and P (stored in the tiles' type, as FA-2 does), and each
//! plane adds its rows of `P V` to its O fragments. Both products run the plane's rows of output
//! tiles per step of their shared dimension ([`TileMma::execute_rows`]), so each Q and P
//! fragment is read from shared memory once per block, not once per output tile, and each K
//! and V fragment once for all the plane's row tiles. The running
//! maxima move lazily (FA-4's rescaling): only when a row's maximum grows by more than 2^8 in the
//! exponentials do the planes pass O through shared memory to scale it row by row.
//! ```text
//!   per block:  K, V -> smem | S = Q K^T (plane) -> smem | units: logits, max, P -> smem
//!               [rare: O fragments -> smem, O *= alpha per row, -> fragments] | O += P V
//!   at the end: O fragments -> smem -> units: O / l, lse -> global
//! ```
//! head_dim and val_dim are padded to 16 with zeros in the tiles. The tiles (Q, K, V, P) are
//! of type `T`: the dtype, or f32 (`MatrixConfig::f32_tiles`: bf16 inputs converted exactly,
//! P rounded to f32 instead of the dtype, on the f32 cmma of gfx942 with rocWMMA).
//!
//! Needs (with [`Cmma`]) a registered cmma config for (T, T, f32, 16x16x16) and a plane size
//! that is a multiple of 16; `plan` never picks it otherwise. A plane's S, P and O are its own:
//! only K and V are shared by the cube. With `MatrixConfig::plane_shuffles` the rows' maxima and
//! sums are plane shuffles; with `plane_sync` too (CUDA: `sync_plane` does not compile on HIP)
//! S and P pass within the plane and each plane decides its O's rescale by a vote, two cube
//! syncs a block. Control flow is uniform across the cube, with `plane_sync` across each plane.
use cubecl::prelude::*;

use crate::config::MatrixConfig;
use crate::primitives::block_stream::BlockSpan;
use crate::primitives::online_softmax::OnlineSoftmax;
use crate::primitives::row_reduce::sync_units;
use crate::primitives::row_stream::{RowSource, stream_ahead, stream_block};
use crate::primitives::score::{ScoreParams, ScoreParamsLaunch, ScoreTensors, score};
use crate::primitives::tile_io::HeadView;
use crate::primitives::tile_mma::{Cmma, StandIn, TileMma};

use core::marker::PhantomData;

use super::ForwardArgs;
use super::unit_rows::{
    BlockStep, RowUnits, UnitRole, block_alpha, block_probabilities, forward_rows, unit_column,
};

mod tiles;

use tiles::Tiles;

/// Launches the matrix kernel. The caller (`flash_attention_forward`) has validated the
/// problem, checked that the device registers the cmma config, and found that q, k and v load
/// in vectors of `width` elements ([`crate::primitives::tile_io::load_width`]).
pub(crate) fn launch<R: Runtime, F: Float, M: Int>(
    client: &ComputeClient<R>,
    args: ForwardArgs<R>,
    params: ScoreParamsLaunch<R>,
    config: MatrixConfig,
    cube_count: CubeCount,
    width: usize,
) {
    let cube_dim = CubeDim::new_2d(config.plane_size, config.num_planes());
    // The tiles' type (the dtype, or f32) and the products' implementation are types.
    macro_rules! launch {
        ($tile:ty, $mma:ty) => {
            // SAFETY: shapes and strides were validated against the problem; global reads are
            // bounds-checked in the tile loads (in vectors only where `load_width` found rows
            // of whole vectors) and global writes against seq_q / val_dim.
            unsafe {
                flash_attention_forward_matrix_kernel::launch_unchecked::<F, $tile, M, $mma, R>(
                    client, cube_count, cube_dim, width, args.q, args.k, args.v, args.mask,
                    args.bias, args.slopes, args.o, args.lse, params, config,
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
pub fn flash_attention_forward_matrix_kernel<F: Float, T: Float, M: Int, Mm: TileMma, N: Size>(
    q: &Tensor<Vector<F, N>>,
    k: &Tensor<Vector<F, N>>,
    v: &Tensor<Vector<F, N>>,
    mask: &Tensor<M>,
    bias: &Tensor<F>,
    slopes: &Tensor<f32>,
    o: &mut Tensor<F>,
    lse: &mut Tensor<f32>,
    params: ScoreParams,
    #[comptime] config: MatrixConfig,
) {
    forward_rows::<F, Vector<F, N>, M, MatrixStep<T, Mm>>(
        q, k, v, mask, bias, slopes, o, lse, params, config,
    );
}

/// The matrix path's part of [`forward_rows`]: tiles in T, S and P V on `Mm`'s tile products.
pub(crate) struct MatrixStep<T: Float, Mm: TileMma> {
    _types: PhantomData<(T, Mm)>,
}

#[cube]
impl<F: Float, M: Int, T: Float, Mm: TileMma, N: Size> BlockStep<F, Vector<F, N>, M>
    for MatrixStep<T, Mm>
{
    type Tiles = Tiles<F, T, Mm, N>;
    type Config = MatrixConfig;

    fn query_tiles(
        q: &Tensor<Vector<F, N>>,
        q_view: &HeadView,
        q_start: u32,
        #[comptime] config: MatrixConfig,
    ) -> Tiles<F, T, Mm, N> {
        tiles::query_tiles::<F, T, Mm, N>(q, q_view, q_start, config)
    }

    #[allow(clippy::too_many_arguments)]
    fn attend(
        k: &Tensor<Vector<F, N>>,
        v: &Tensor<Vector<F, N>>,
        mask: &Tensor<M>,
        bias: &Tensor<F>,
        k_view: &HeadView,
        v_view: &HeadView,
        params: &ScoreParams,
        tensors: &ScoreTensors,
        kv_block: u32,
        range: &BlockSpan,
        role: UnitRole,
        tiles: &mut Tiles<F, T, Mm, N>,
        softmax: &mut OnlineSoftmax,
        _acc: &mut Array<f32>,
        #[comptime] config: MatrixConfig,
        #[comptime] masked_pass: bool,
    ) {
        let (score_stride, prob_stride) = comptime!((config.score_stride(), config.prob_stride()));
        let bkv = config.block_kv;
        let kv_start = kv_block * bkv;
        // First row of this plane's query rows.
        let plane_row = UNIT_POS_Y * config.plane_rows();

        // K and V of this block into shared memory (with `prefetch`, from registers that were
        // loaded while the previous block computed), then the next block's loads issued, to be
        // in flight while this block computes (`row_stream`).
        let source = RowSource::<F, N> {
            first: *k,
            first_view: *k_view,
            second: *v,
            second_view: *v_view,
        };
        let stream = comptime!(config.kv_stream());
        stream_block::<F, T, N>(
            &mut tiles.kv, &source, &mut tiles.k, &mut tiles.v, kv_block, range, stream,
        );
        sync_cube();
        stream_ahead::<F, N>(&mut tiles.kv, &source, kv_block, range, stream);

        // S = Q K^T for this plane's rows, into its rows of `s`.
        tiles::plane_scores::<F, T, Mm, N>(tiles, plane_row, config);
        // With shuffles but cube syncs, the rescale flag has its own word (`partial_max[0]`),
        // cleared here: after the K / V sync, which every read of the previous block's flag
        // precedes, and before the S sync, which every unit passes before it sets the flag.
        if comptime!(config.plane_shuffles && !config.plane_sync) && UNIT_POS == 0 {
            tiles.partial_max[0] = 0.0f32;
        }
        // S is this plane's alone: with `plane_sync` the plane hands it to its units by itself.
        sync_units(config.plane_sync);

        // Logits of this unit's columns, then the online softmax; P goes to shared memory in T.
        let units = comptime!(row_units(&config));
        let mut logits = Array::<f32>::new(comptime!(config.kv_cols_per_unit() as usize));
        let s_row = (role.row * score_stride) as usize;
        #[unroll]
        for t in 0..config.kv_cols_per_unit() {
            let col = unit_column(role, t, units);
            let dot = tiles.s[s_row + col as usize];
            logits[t as usize] = score::<F, M>(
                dot,
                role.read_row,
                kv_start + col,
                params,
                tensors,
                mask,
                bias,
                config.score,
                masked_pass,
            );
        }
        // Without shuffles the cube's rescale flag lives in the S tile (`rescale_flag`): in
        // `s[0]` it needs no shared memory of its own (at head dim 128 an MI300X's 64 KiB hold
        // the tiles with no byte to spare): S's element (0, 0) is read by unit 0 alone (row 0,
        // lane 0, its first column; row 0 is never staggered), so unit 0 clears the flag once
        // it has its logits; units set it only after `block_alpha`'s sync, which every read of
        // S precedes, and read it after `block_probabilities`' sync; the next block's S stores
        // come after its first sync, which every read of the flag precedes. With
        // `shared_stage` plane 0 stages O over `s[0]` while other units may still read the
        // flag: it has a word after S's rows then.
        let flag = comptime!(config.rescale_flag() as usize);
        if comptime!(!config.plane_shuffles) && UNIT_POS == 0 {
            tiles.s[flag] = 0.0f32;
        }
        // O stays in the planes' fragments, which only a round trip through shared memory can
        // scale row by row: the rows' maxima move lazily (FA-4's rescaling, P at most 2^8), so
        // that most blocks leave O as it is. Not with dropout, whose factor 1 / (1 - p) on top
        // of 2^8 could pass f16's range.
        let lazy = comptime!(!config.score.dropout);
        // O is zero while the row's sum is: a moved max needs no rescale of it then.
        let holds_mass = softmax.row_sum > 0.0f32;
        let alpha = block_alpha(
            &logits,
            softmax,
            &mut tiles.partial_max.to_slice_mut(),
            role,
            units,
            config.precise_math,
            lazy,
        );
        let moved = holds_mass && alpha != 1.0f32;
        if comptime!(!config.plane_sync) && moved {
            if comptime!(config.plane_shuffles) {
                tiles.partial_max[0] = 1.0f32;
            } else {
                tiles.s[flag] = 1.0f32;
            }
        }
        block_probabilities::<T>(
            &logits,
            softmax,
            &mut tiles.p.to_slice_mut(),
            &mut tiles.partial_sum.to_slice_mut(),
            role,
            params,
            kv_start,
            units,
            prob_stride,
            masked_pass,
            config.precise_math,
            config.score.dropout,
        );
        // Without shuffles `block_probabilities` synchronized the cube; with them P (the plane's
        // own, as S) is handed to the fragments here.
        if comptime!(config.plane_shuffles) {
            sync_units(config.plane_sync);
        }

        // Whether this plane's O moves: with `plane_sync` the plane's vote (each plane decides
        // for itself), else the cube's flag, the same for every unit after the sync above.
        let rescale = if comptime!(config.plane_sync) {
            plane_any(moved)
        } else if comptime!(config.plane_shuffles) {
            tiles.partial_max[0] != 0.0f32
        } else {
            tiles.s[flag] != 0.0f32
        };
        if rescale {
            tiles::rescale_o::<F, T, Mm, N>(tiles, role, plane_row, alpha, config);
        }

        // O += P V for this plane's rows, in its fragments.
        tiles::accumulate_pv::<F, T, Mm, N>(tiles, plane_row, config);
        // The next block overwrites K and V (after this sync), S (with the flag) and P (after
        // one more).
        sync_cube();
    }

    fn finish(
        tiles: &mut Tiles<F, T, Mm, N>,
        role: UnitRole,
        acc: &mut Array<f32>,
        #[comptime] config: MatrixConfig,
    ) {
        let lanes = comptime!(config.units_per_row());
        tiles::stage_o::<F, T, Mm, N>(tiles, UNIT_POS_Y * config.plane_rows(), false, config);
        let at = (role.row * config.out_stride() + role.lane) as usize;
        #[unroll]
        for c in 0..config.out_cols_per_unit() {
            acc[c as usize] = tiles.o_stage[at + (c * lanes) as usize];
        }
    }
}

/// How the matrix forward splits a row's block of S over its units.
fn row_units(config: &MatrixConfig) -> RowUnits {
    RowUnits {
        lanes: config.units_per_row(),
        cols_per_unit: config.kv_cols_per_unit(),
        stagger_groups: config.stagger_groups(),
        stagger_rows: config.stagger_rows(),
        shuffles: config.plane_shuffles,
    }
}
