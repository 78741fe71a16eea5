//! The portable forward path: tiled FlashAttention-2 on scalar FMAs, no cmma, no plane ops.
//!
//! One cube per (query block, batch * head). `block_q * units_per_row` units: unit
//! `(row, lane)` owns query row `row` of the block, the S columns `lane + t * units_per_row`
//! and the O columns `lane + c * units_per_row`. Q stays in shared memory for the whole loop;
//! K and V blocks stream through it; S lives in registers, P goes through shared memory (every
//! unit of a row needs all of P's row for its O columns).
use cubecl::prelude::*;

use crate::config::PortableConfig;
use crate::primitives::arena::carve;
use crate::primitives::dot::{fuses_dots, row_dot, row_dots};
use crate::primitives::online_softmax::OnlineSoftmax;
use crate::primitives::score::{ScoreParams, ScoreParamsLaunch, ScoreTensors, score};
use crate::primitives::block_stream::BlockSpan;
use crate::primitives::tile_io::{HeadView, load_tile};

use super::ForwardArgs;
use super::unit_rows::{BlockStep, UnitRole, forward_rows, softmax_block};

/// Launches the portable kernel. The caller (`flash_attention_forward`) has validated the
/// problem and picked `config`.
pub(crate) fn launch<R: Runtime, F: Float, M: Int>(
    client: &ComputeClient<R>,
    args: ForwardArgs<R>,
    params: ScoreParamsLaunch<R>,
    config: PortableConfig,
    cube_count: CubeCount,
) {
    let cube_dim = CubeDim::new_1d(config.units());
    // SAFETY: shapes and strides were validated against the problem; every global access is
    // bounds-checked against the tensor shapes inside the kernel.
    unsafe {
        flash_attention_forward_kernel::launch_unchecked::<F, M, R>(
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

/// Shared-memory tiles of one cube: views of one shared allocation laid out by
/// [`PortableConfig::tile_layout`].
#[derive(CubeType)]
pub(crate) struct Tiles {
    /// `[block_q, head_dim_tile]` f32, loaded once.
    q: Slice<f32, ReadWrite>,
    /// `[block_kv, head_dim_tile]` f32, one key block.
    k: Slice<f32, ReadWrite>,
    /// `[block_kv, val_dim_tile]` f32, one value block.
    v: Slice<f32, ReadWrite>,
    /// `[block_q, score_tile_cols]` f32, the probabilities of the current block.
    p: Slice<f32, ReadWrite>,
    /// One f32 per unit: partial row maxima.
    partial_max: Slice<f32, ReadWrite>,
    /// One f32 per unit: partial row sums.
    partial_sum: Slice<f32, ReadWrite>,
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn flash_attention_forward_kernel<F: Float, M: Int>(
    q: &Tensor<F>,
    k: &Tensor<F>,
    v: &Tensor<F>,
    mask: &Tensor<M>,
    bias: &Tensor<F>,
    slopes: &Tensor<f32>,
    o: &mut Tensor<F>,
    lse: &mut Tensor<f32>,
    params: ScoreParams,
    #[comptime] config: PortableConfig,
) {
    forward_rows::<F, F, M, PortableStep>(q, k, v, mask, bias, slopes, o, lse, params, config);
}

/// The portable path's part of [`forward_rows`]: f32 tiles, S in registers, P through shared memory.
pub(crate) struct PortableStep;

#[cube]
impl<F: Float, M: Int> BlockStep<F, F, M> for PortableStep {
    type Tiles = Tiles;
    type Config = PortableConfig;

    fn query_tiles(
        q: &Tensor<F>,
        q_view: &HeadView,
        q_start: u32,
        #[comptime] config: PortableConfig,
    ) -> Tiles {
        let units = comptime!(config.units());
        let layout = comptime!(config.tile_layout());
        let mut arena = SharedMemory::<f32>::new(comptime!(layout.len));
        let mut tiles = Tiles {
            q: carve(&mut arena, layout.q),
            k: carve(&mut arena, layout.k),
            v: carve(&mut arena, layout.v),
            p: carve(&mut arena, layout.p),
            partial_max: carve(&mut arena, layout.partial_max),
            partial_sum: carve(&mut arena, layout.partial_sum),
        };
        load_tile::<F, f32>(
            q,
            q_view,
            &mut tiles.q,
            q_start,
            config.block_q,
            config.head_dim,
            config.head_dim_tile(),
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
        _range: &BlockSpan,
        role: UnitRole,
        tiles: &mut Tiles,
        softmax: &mut OnlineSoftmax,
        acc: &mut Array<f32>,
        #[comptime] config: PortableConfig,
        #[comptime] masked_pass: bool,
    ) {
        let units = comptime!(config.units());
        let lanes = config.units_per_row;
        let dk = comptime!(config.head_dim_tile());
        let dv = comptime!(config.val_dim_tile());
        let score_cols = comptime!(config.score_tile_cols());
        let kv_start = kv_block * config.block_kv;

        load_tile::<F, f32>(
            k,
            k_view,
            &mut tiles.k,
            kv_start,
            config.block_kv,
            config.head_dim,
            dk,
            units,
        );
        load_tile::<F, f32>(
            v,
            v_view,
            &mut tiles.v,
            kv_start,
            config.block_kv,
            config.val_dim,
            dv,
            units,
        );
        sync_cube();

        // S = Q K^T for this unit's columns (keys `lane + t * lanes`), transformed into
        // logits, kept in registers.
        let cols = comptime!(config.kv_cols_per_unit());
        let fused = comptime!(fuses_dots(config.dot, cols));
        let q_row = (role.row * dk) as usize;
        let mut logits = Array::<f32>::new(cols as usize);
        if comptime!(fused) {
            row_dots(
                &tiles.q,
                q_row,
                &tiles.k,
                (role.lane * dk) as usize,
                comptime!(lanes * dk),
                config.head_dim,
                cols,
                &mut logits,
            );
        }
        #[unroll]
        for t in 0..cols {
            let col = role.lane + t * lanes;
            let dot = if comptime!(fused) {
                logits[t as usize]
            } else {
                let k_row = (col * dk) as usize;
                row_dot(
                    &tiles.q,
                    q_row,
                    &tiles.k,
                    k_row,
                    config.head_dim,
                    config.dot,
                )
            };
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

        // Online softmax: new row max, alpha, P through shared memory, row sum.
        let alpha = softmax_block::<f32>(
            &logits,
            softmax,
            &mut tiles.p,
            &mut tiles.partial_max,
            &mut tiles.partial_sum,
            role,
            params,
            kv_start,
            config.kv_cols_per_unit(),
            lanes,
            score_cols,
            masked_pass,
            config.precise_math,
            config.score.dropout,
        );

        // O = alpha * O + P V for this unit's O columns.
        #[unroll]
        for c in 0..config.out_cols_per_unit() {
            acc[c as usize] *= alpha;
        }
        for j in 0..config.block_kv {
            let p = tiles.p[(role.row * score_cols + j) as usize];
            let v_row = (j * dv + role.lane) as usize;
            #[unroll]
            for c in 0..config.out_cols_per_unit() {
                acc[c as usize] = fma(p, tiles.v[v_row + (c * lanes) as usize], acc[c as usize]);
            }
        }
        // The next block overwrites K, V and P.
        sync_cube();
    }

    fn finish(
        _tiles: &mut Tiles,
        _role: UnitRole,
        _acc: &mut Array<f32>,
        #[comptime] _config: PortableConfig,
    ) {
    }
}
