//! The matrix forward path: `S = Q K^T` and `P V` on 16x16x16 `cmma` fragments, the online
//! softmax through shared memory.
//!
//! One cube per (query block, batch * head), `block_q / 16` planes; plane `p` owns query rows
//! `[16p, 16p + 16)` of the block. Per key/value block: each plane computes its 16 rows of S
//! into shared memory (f32), the units of each row turn them into logits and P (stored in the
//! input dtype, as FA-2 does), each plane computes its rows of `P V` into shared memory, and
//! every unit folds its O columns into f32 registers with the `alpha` rescale.
//! head_dim and val_dim are padded to 16 with zeros in the tiles.
//!
//! Needs a registered cmma config for (F, F, f32, 16x16x16) and a plane size that is a
//! multiple of 16; `plan` never picks it otherwise. Synchronization is cube-wide only
//! (`sync_plane` does not compile on HIP), and control flow is uniform across the cube.
use cubecl::prelude::*;

use crate::config::{MATRIX_TILE, MatrixConfig};
use crate::primitives::online_softmax::OnlineSoftmax;
use crate::primitives::score::{ScoreParams, ScoreParamsLaunch, ScoreTensors, score};
use crate::primitives::tile_io::{HeadView, load_tile};

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
    // SAFETY: shapes and strides were validated against the problem; global reads are
    // bounds-checked in the tile loads and global writes against seq_q / val_dim.
    unsafe {
        flash_attention_forward_matrix_kernel::launch_unchecked::<F, M, R>(
            client,
            cube_count,
            cube_dim,
            args.q,
            args.k,
            args.v,
            args.mask,
            args.bias,
            args.slopes,
            args.o,
            args.lse,
            params,
            config,
        )
    }
}

/// Shared-memory tiles of one cube.
#[derive(CubeType)]
pub(crate) struct Tiles<F: Float> {
    /// `[block_q, head_stride]` in F, loaded once, zero-padded.
    q: SharedMemory<F>,
    /// `[block_kv, head_stride]` in F, one key block, zero-padded.
    k: SharedMemory<F>,
    /// `[block_kv, val_stride]` in F, one value block, zero-padded.
    v: SharedMemory<F>,
    /// `[block_q, score_stride]` f32: raw `q · k` of the current block.
    s: SharedMemory<f32>,
    /// `[block_q, prob_stride]` in F: the probabilities, A operand of `P V`.
    p: SharedMemory<F>,
    /// `[block_q, out_stride]` f32: `P V` of the current block.
    pv: SharedMemory<f32>,
    /// One f32 per unit: partial row maxima.
    partial_max: SharedMemory<f32>,
    /// One f32 per unit: partial row sums.
    partial_sum: SharedMemory<f32>,
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn flash_attention_forward_matrix_kernel<F: Float, M: Int>(
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
    forward_rows::<F, M, MatrixStep>(q, k, v, mask, bias, slopes, o, lse, params, config);
}

/// The matrix path's part of [`forward_rows`]: tiles in F, S and P V on cmma fragments.
pub(crate) struct MatrixStep;

#[cube]
impl<F: Float, M: Int> BlockStep<F, M> for MatrixStep {
    type Tiles = Tiles<F>;
    type Config = MatrixConfig;

    fn query_tiles(
        q: &Tensor<F>,
        q_view: &HeadView,
        q_start: u32,
        #[comptime] config: MatrixConfig,
    ) -> Tiles<F> {
        let units = comptime!(config.units());
        let mut tiles = Tiles::<F> {
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
        load_tile::<F, F>(
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
        tiles: &mut Tiles<F>,
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

        load_tile::<F, F>(
            k,
            k_view,
            &mut tiles.k.to_slice_mut(),
            kv_start,
            bkv,
            config.head_dim,
            dk_stride,
            units,
        );
        load_tile::<F, F>(
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
        plane_product::<F>(
            &tiles.q,
            dk_stride,
            &tiles.k,
            cmma::MatrixLayout::ColMajor,
            dk_stride,
            comptime!(MATRIX_TILE * dk_stride),
            MATRIX_TILE,
            &mut tiles.s,
            score_stride,
            plane_row,
            comptime!(bkv / MATRIX_TILE),
            comptime!(dk / MATRIX_TILE),
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
        let alpha = softmax_block::<F>(
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
        plane_product::<F>(
            &tiles.p,
            prob_stride,
            &tiles.v,
            cmma::MatrixLayout::RowMajor,
            dv_stride,
            MATRIX_TILE,
            comptime!(MATRIX_TILE * dv_stride),
            &mut tiles.pv,
            out_stride,
            plane_row,
            comptime!(dv / MATRIX_TILE),
            comptime!(bkv / MATRIX_TILE),
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

/// `out = A B` for this plane's 16 rows on 16x16x16 cmma, f32 accumulation: A row-major with
/// `a_cols` columns (rows `[plane_row, plane_row + 16)`, `k_tiles` tiles of k); B read in
/// `b_layout` with leading dimension `b_stride`, its tile `(k, n)` at `k b_k_step + n b_n_step`;
/// `n_tiles` output tiles stored row-major into `out` (`out_cols` columns).
#[cube]
#[allow(clippy::too_many_arguments)]
fn plane_product<F: Float>(
    a: &SharedMemory<F>,
    #[comptime] a_cols: u32,
    b: &SharedMemory<F>,
    #[comptime] b_layout: cmma::MatrixLayout,
    #[comptime] b_stride: u32,
    #[comptime] b_n_step: u32,
    #[comptime] b_k_step: u32,
    out: &mut SharedMemory<f32>,
    #[comptime] out_cols: u32,
    plane_row: u32,
    #[comptime] n_tiles: u32,
    #[comptime] k_tiles: u32,
) {
    #[unroll]
    for n in 0..n_tiles {
        let acc = cmma::Matrix::<f32>::from_value(
            cmma::MatrixIdent::Accumulator,
            MATRIX_TILE as usize,
            MATRIX_TILE as usize,
            MATRIX_TILE as usize,
            cmma::MatrixLayout::Undefined,
            0.0f32,
        );
        #[unroll]
        for kk in 0..k_tiles {
            let a_frag = cmma::Matrix::<F>::from_slice(
                cmma::MatrixIdent::A,
                MATRIX_TILE as usize,
                MATRIX_TILE as usize,
                MATRIX_TILE as usize,
                cmma::MatrixLayout::RowMajor,
                &a.slice((plane_row * a_cols + kk * MATRIX_TILE) as usize, a.len()),
                a_cols,
            );
            let b_frag = cmma::Matrix::<F>::from_slice(
                cmma::MatrixIdent::B,
                MATRIX_TILE as usize,
                MATRIX_TILE as usize,
                MATRIX_TILE as usize,
                b_layout,
                &b.slice((kk * b_k_step + n * b_n_step) as usize, b.len()),
                b_stride,
            );
            cmma::execute::<F, F, f32, f32>(&a_frag, &b_frag, &acc, &acc);
        }
        let out_len = out.len();
        cmma::store(
            &mut out.slice_mut((plane_row * out_cols + n * MATRIX_TILE) as usize, out_len),
            &acc,
            out_cols,
            cmma::MatrixLayout::RowMajor,
        );
    }
}
