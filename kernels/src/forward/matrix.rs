//! The matrix forward path: `S = Q K^T` and `P V` on 16x16x16 tile products
//! ([`TileMma`]: the device's `cmma` fragments, or the scalar stand-in on devices without
//! them), the online softmax through shared memory.
//!
//! One cube per (query block, batch * head), `block_q / 16` planes; plane `p` owns query rows
//! `[16p, 16p + 16)` of the block. Per key/value block: each plane computes its 16 rows of S
//! into shared memory (f32), the units of each row turn them into logits and P (stored in the
//! input dtype, as FA-2 does), each plane computes its rows of `P V` into shared memory, and
//! every unit folds its O columns into f32 registers with the `alpha` rescale.
//! head_dim and val_dim are padded to 16 with zeros in the tiles. The tiles (Q, K, V, P) are
//! of type `T`: the dtype, or f32 (`MatrixConfig::f32_tiles`: bf16 inputs converted exactly,
//! P rounded to f32 instead of the dtype, on the f32 cmma of gfx942 with rocWMMA).
//!
//! Needs (with [`Cmma`]) a registered cmma config for (T, T, f32, 16x16x16) and a plane size
//! that is a multiple of 16; `plan` never picks it otherwise. Synchronization is cube-wide only
//! (`sync_plane` does not compile on HIP), and control flow is uniform across the cube.
use cubecl::prelude::*;

use crate::config::{MATRIX_TILE, MatrixConfig};
use crate::primitives::online_softmax::OnlineSoftmax;
use crate::primitives::score::{ScoreParams, ScoreParamsLaunch, ScoreTensors, score};
use crate::primitives::tile_io::{HeadView, load_tile};
use crate::primitives::tile_mma::{Cmma, StandIn, TileLayout, TileMma};

use core::marker::PhantomData;

use super::ForwardArgs;
use super::unit_rows::{BlockStep, UnitRole, forward_rows, softmax_block};

/// Bytes of alignment of every tile a cmma fragment is loaded from or stored to (wmma needs
/// 256-bit aligned pointers; every tile's size is a multiple of it, so offsets stay aligned).
const CMMA_ALIGN: usize = 32;

/// Launches the matrix kernel. The caller (`flash_attention_forward`) has validated the
/// problem and checked that the device registers the cmma config.
pub(crate) fn launch<R: Runtime, F: Float, M: Int>(
    client: &ComputeClient<R>,
    args: ForwardArgs<R>,
    params: ScoreParamsLaunch<R>,
    config: MatrixConfig,
    cube_count: CubeCount,
) {
    let cube_dim = CubeDim::new_2d(config.plane_size, config.num_planes());
    // The tiles' type (the dtype, or f32) and the products' implementation are types.
    macro_rules! launch {
        ($tile:ty, $mma:ty) => {
            // SAFETY: shapes and strides were validated against the problem; global reads are
            // bounds-checked in the tile loads and global writes against seq_q / val_dim.
            unsafe {
                flash_attention_forward_matrix_kernel::launch_unchecked::<F, $tile, M, $mma, R>(
                    client, cube_count, cube_dim, args.q, args.k, args.v, args.mask, args.bias,
                    args.slopes, args.o, args.lse, params, config,
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

/// Shared-memory tiles of one cube (`T`: the tiles' type).
#[derive(CubeType)]
pub(crate) struct Tiles<T: Float> {
    /// `[block_q, head_stride]` in T, loaded once, zero-padded.
    q: SharedMemory<T>,
    /// `[block_kv, head_stride]` in T, one key block, zero-padded.
    k: SharedMemory<T>,
    /// `[block_kv, val_stride]` in T, one value block, zero-padded.
    v: SharedMemory<T>,
    /// `[block_q, score_stride]` f32: raw `q · k` of the current block.
    s: SharedMemory<f32>,
    /// `[block_q, prob_stride]` in T: the probabilities, A operand of `P V`.
    p: SharedMemory<T>,
    /// `[block_q, out_stride]` f32: `P V` of the current block.
    pv: SharedMemory<f32>,
    /// One f32 per unit: partial row maxima.
    partial_max: SharedMemory<f32>,
    /// One f32 per unit: partial row sums.
    partial_sum: SharedMemory<f32>,
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn flash_attention_forward_matrix_kernel<F: Float, T: Float, M: Int, Mm: TileMma>(
    q: &Tensor<F>,
    k: &Tensor<F>,
    v: &Tensor<F>,
    mask: &Tensor<M>,
    bias: &Tensor<F>,
    slopes: &Tensor<f32>,
    o: &mut Tensor<F>,
    lse: &mut Tensor<f32>,
    params: ScoreParams,
    #[comptime] config: MatrixConfig,
) {
    forward_rows::<F, M, MatrixStep<T, Mm>>(q, k, v, mask, bias, slopes, o, lse, params, config);
}

/// The matrix path's part of [`forward_rows`]: tiles in T, S and P V on `Mm`'s tile products.
pub(crate) struct MatrixStep<T: Float, Mm: TileMma> {
    _types: PhantomData<(T, Mm)>,
}

#[cube]
impl<F: Float, M: Int, T: Float, Mm: TileMma> BlockStep<F, M> for MatrixStep<T, Mm> {
    type Tiles = Tiles<T>;
    type Config = MatrixConfig;

    fn query_tiles(
        q: &Tensor<F>,
        q_view: &HeadView,
        q_start: u32,
        #[comptime] config: MatrixConfig,
    ) -> Tiles<T> {
        let units = comptime!(config.units());
        let mut tiles = Tiles::<T> {
            q: SharedMemory::new_aligned(
                comptime!((config.block_q * config.head_stride()) as usize),
                CMMA_ALIGN,
            ),
            k: SharedMemory::new_aligned(
                comptime!((config.block_kv * config.head_stride()) as usize),
                CMMA_ALIGN,
            ),
            v: SharedMemory::new_aligned(
                comptime!((config.block_kv * config.val_stride()) as usize),
                CMMA_ALIGN,
            ),
            s: SharedMemory::new_aligned(
                comptime!((config.block_q * config.score_stride()) as usize),
                CMMA_ALIGN,
            ),
            p: SharedMemory::new_aligned(
                comptime!((config.block_q * config.prob_stride()) as usize),
                CMMA_ALIGN,
            ),
            pv: SharedMemory::new_aligned(
                comptime!((config.block_q * config.out_stride()) as usize),
                CMMA_ALIGN,
            ),
            partial_max: SharedMemory::new(units as usize),
            partial_sum: SharedMemory::new(units as usize),
        };
        load_tile::<F, T>(
            q,
            q_view,
            &mut tiles.q.to_slice_mut(),
            q_start,
            config.block_q,
            config.head_dim,
            config.head_stride(),
            units,
        );
        tiles
    }

    #[allow(clippy::too_many_arguments)]
    fn attend(
        k: &Tensor<F>,
        v: &Tensor<F>,
        mask: &Tensor<M>,
        bias: &Tensor<F>,
        k_view: &HeadView,
        v_view: &HeadView,
        params: &ScoreParams,
        tensors: &ScoreTensors,
        kv_block: u32,
        role: UnitRole,
        tiles: &mut Tiles<T>,
        softmax: &mut OnlineSoftmax,
        acc: &mut Array<f32>,
        #[comptime] config: MatrixConfig,
        #[comptime] masked_pass: bool,
    ) {
        let units = comptime!(config.units());
        let lanes = comptime!(config.units_per_row());
        let dk = comptime!(config.head_dim_tile());
        let dv = comptime!(config.val_dim_tile());
        let (dk_stride, dv_stride) = comptime!((config.head_stride(), config.val_stride()));
        let (score_stride, prob_stride) = comptime!((config.score_stride(), config.prob_stride()));
        let out_stride = comptime!(config.out_stride());
        let bkv = config.block_kv;
        let kv_start = kv_block * bkv;
        // First row of this plane's 16 query rows.
        let plane_row = UNIT_POS_Y * MATRIX_TILE;

        load_tile::<F, T>(
            k,
            k_view,
            &mut tiles.k.to_slice_mut(),
            kv_start,
            bkv,
            config.head_dim,
            dk_stride,
            units,
        );
        load_tile::<F, T>(
            v,
            v_view,
            &mut tiles.v.to_slice_mut(),
            kv_start,
            bkv,
            config.val_dim,
            dv_stride,
            units,
        );
        sync_cube();

        // S = Q K^T for this plane's rows. K is row-major [block_kv, dk], i.e. K^T column-major.
        plane_product::<T, Mm>(
            &tiles.q,
            dk_stride,
            &tiles.k,
            TileLayout::ColMajor,
            dk_stride,
            comptime!(MATRIX_TILE * dk_stride),
            MATRIX_TILE,
            &mut tiles.s,
            score_stride,
            plane_row,
            comptime!(bkv / MATRIX_TILE),
            comptime!(dk / MATRIX_TILE),
            config.plane_size,
            comptime!(!config.stand_in),
        );
        sync_cube();

        // Logits of this unit's columns, then the online softmax; P goes to shared memory in F.
        let mut logits = Array::<f32>::new(comptime!(config.kv_cols_per_unit() as usize));
        let s_row = (role.row * score_stride) as usize;
        #[unroll]
        for t in 0..config.kv_cols_per_unit() {
            let col = role.lane + t * lanes;
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
        let alpha = softmax_block::<T>(
            &logits,
            softmax,
            &mut tiles.p.to_slice_mut(),
            &mut tiles.partial_max.to_slice_mut(),
            &mut tiles.partial_sum.to_slice_mut(),
            role,
            params,
            kv_start,
            config.kv_cols_per_unit(),
            lanes,
            prob_stride,
            masked_pass,
            config.precise_math,
            config.score.dropout,
        );

        // P V for this plane's rows, into shared memory.
        plane_product::<T, Mm>(
            &tiles.p,
            prob_stride,
            &tiles.v,
            TileLayout::RowMajor,
            dv_stride,
            MATRIX_TILE,
            comptime!(MATRIX_TILE * dv_stride),
            &mut tiles.pv,
            out_stride,
            plane_row,
            comptime!(dv / MATRIX_TILE),
            comptime!(bkv / MATRIX_TILE),
            config.plane_size,
            comptime!(!config.stand_in),
        );
        sync_cube();

        // O = alpha * O + P V for this unit's O columns. The next block's first writes (K, V)
        // come after this block's last reads of K, V and P (all before the sync above), and its
        // writes of S, P, PV after at least one more sync.
        let pv_row = (role.row * out_stride + role.lane) as usize;
        #[unroll]
        for c in 0..config.out_cols_per_unit() {
            acc[c as usize] = acc[c as usize] * alpha + tiles.pv[pv_row + (c * lanes) as usize];
        }
    }
}

/// `out = A B` for this plane's 16 rows on 16x16x16 tile products (`Mm`), f32 accumulation:
/// A row-major with `a_cols` columns (rows `[plane_row, plane_row + 16)`, `k_tiles` tiles of
/// k); B read in `b_layout` with leading dimension `b_stride`, its tile `(k, n)` at
/// `k b_k_step + n b_n_step`; `n_tiles` output tiles stored row-major into `out` (`out_cols`
/// columns).
#[cube]
#[allow(clippy::too_many_arguments)]
fn plane_product<T: Float, Mm: TileMma>(
    a: &SharedMemory<T>,
    #[comptime] a_cols: u32,
    b: &SharedMemory<T>,
    #[comptime] b_layout: TileLayout,
    #[comptime] b_stride: u32,
    #[comptime] b_n_step: u32,
    #[comptime] b_k_step: u32,
    out: &mut SharedMemory<f32>,
    #[comptime] out_cols: u32,
    plane_row: u32,
    #[comptime] n_tiles: u32,
    #[comptime] k_tiles: u32,
    #[comptime] plane_size: u32,
    #[comptime] unrolled: bool,
) {
    // (The stand-in's loops stay loops: lavapipe's LLVM takes minutes over unrolled copies.)
    #[unroll(unrolled)]
    for n in 0..n_tiles {
        let mut acc = Mm::zero(plane_size);
        #[unroll(unrolled)]
        for kk in 0..k_tiles {
            Mm::execute::<T>(
                &mut acc,
                &a.slice((plane_row * a_cols + kk * MATRIX_TILE) as usize, a.len()),
                TileLayout::RowMajor,
                a_cols,
                &b.slice((kk * b_k_step + n * b_n_step) as usize, b.len()),
                b_layout,
                b_stride,
                plane_size,
            );
        }
        let out_len = out.len();
        Mm::store(
            &acc,
            &mut out.slice_mut((plane_row * out_cols + n * MATRIX_TILE) as usize, out_len),
            out_cols,
            plane_size,
        );
    }
}
