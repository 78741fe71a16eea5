//! dQ: the backward outer loop over query blocks (FlashAttention-2's dQ, as a separate kernel
//! like Triton's fused-attention tutorial and cubek-attention, so that dQ needs no atomics).
//!
//! One cube per (query block, batch * head). Q, dO, lse and delta of the block stay in shared
//! memory; the key/value blocks the block can see stream through it (causal: blocks past the
//! diagonal are skipped; fully visible ones take the unmasked pass). Per key/value block:
//! ```text
//! dS  recomputed from Q, K, V, dO, lse, delta     (block_pair)
//! dQ += dS K               (times scale once, at the end)
//! ```
//! Each unit owns fixed elements of dQ: every element is written once by one unit, and the sum
//! over key/value blocks runs in a fixed order, so reruns are bit-identical.
use cubecl::prelude::*;

use crate::primitives::block_range::{kv_block_range_full_rows, query_block_heaviest_first};
use crate::primitives::score::{ScoreParams, ScoreTensors, score_tensors};
use crate::problem::AttentionProblem;

use super::GradientInputs;
use super::block_pair::{
    BlockPair, BlockPairTiles, load_kv_block, load_query_block, new_tiles, recompute_p_and_ds,
    unit_element,
};
use super::compensated::CompensatedSums;
use super::config::{BackwardKernel, PortableGradientConfig};
use crate::primitives::score::score_params;

/// Launches the dQ kernel with `config` (a [`BackwardKernel::Query`] config from
/// [`crate::plan::backward`]). `dq` is fully overwritten.
///
/// # Important
///
/// The caller has checked every shape against the problem; the kernel trusts them.
pub fn flash_attention_backward_dq<R: Runtime, F: Float, M: Int>(
    client: &ComputeClient<R>,
    problem: &AttentionProblem,
    inputs: GradientInputs<R>,
    dq: TensorBinding<R>,
    config: PortableGradientConfig,
) {
    debug_assert_eq!(config.kernel, BackwardKernel::Query);
    let q_blocks = problem.seq_q.div_ceil(config.block_q as usize) as u32;
    let heads_total = problem.heads_total() as u32;
    let args = inputs.into_args(client);
    // SAFETY: shapes and strides were validated against the problem; every global access is
    // bounds-checked against the problem's sizes inside the kernel.
    unsafe {
        flash_attention_backward_dq_kernel::launch_unchecked::<F, M, R>(
            client,
            CubeCount::Static(q_blocks, heads_total, 1),
            CubeDim::new_1d(config.units),
            args.q,
            args.k,
            args.v,
            args.d_out,
            args.lse,
            args.delta,
            args.mask,
            args.bias,
            args.slopes,
            dq.into_tensor_arg(),
            score_params(problem),
            // `opaque_one`: see `CompensatedSums`.
            1.0f32,
            config,
        )
    }
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn flash_attention_backward_dq_kernel<F: Float, M: Int>(
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
    opaque_one: f32,
    #[comptime] config: PortableGradientConfig,
) {
    let heads = q.shape(1) as u32;
    let (batch, head) = (CUBE_POS_Y / heads, CUBE_POS_Y % heads);
    let q_block = query_block_heaviest_first(config.score.causal);
    let q_start = q_block * config.block_q;
    let kv_head = head / (heads / k.shape(1) as u32);
    let tensors = score_tensors(mask, bias, slopes, batch, head, config.score);
    let mut tiles = new_tiles(config);
    // `Σ dS K` for elements `UNIT_POS + t * units` of the `[block_q, head_dim]` block.
    let mut dq_acc = CompensatedSums::new(opaque_one, config.head_acc_per_unit());

    // Step 1: Q, dO, lse and delta of this block, once; the first key block's sync makes them
    // visible.
    let first = BlockPair {
        batch,
        head,
        kv_head,
        q_start,
        kv_start: 0,
    };
    load_query_block::<F>(q, d_out, lse, delta, &mut tiles, &first, config);

    // Step 2: the visible key/value blocks, unmasked pass first. A partial query block takes the
    // masked pass everywhere: its rows past seq_q must not read the bias.
    let range = kv_block_range_full_rows(
        q_block,
        &params,
        config.block_q,
        config.block_kv,
        config.score,
    );
    for kv_block in range.start..range.first_masked {
        let pair = BlockPair {
            batch,
            head,
            kv_head,
            q_start,
            kv_start: kv_block * config.block_kv,
        };
        accumulate_kv_block::<F, M>(
            k,
            v,
            mask,
            bias,
            &params,
            &tensors,
            &mut tiles,
            &pair,
            &mut dq_acc,
            config,
            false,
        );
    }
    for kv_block in range.first_masked..range.end {
        let pair = BlockPair {
            batch,
            head,
            kv_head,
            q_start,
            kv_start: kv_block * config.block_kv,
        };
        accumulate_kv_block::<F, M>(
            k,
            v,
            mask,
            bias,
            &params,
            &tensors,
            &mut tiles,
            &pair,
            &mut dq_acc,
            config,
            true,
        );
    }

    // Step 3: write dQ = scale * Σ dS K (rows past seq_q are not written). Query blocks that
    // see no key at all (causal with seq_q > seq_kv) write zeros.
    let base = batch as usize * dq.stride(0) + head as usize * dq.stride(1);
    #[unroll]
    for t in 0..config.head_acc_per_unit() {
        let e = UNIT_POS + t * config.units;
        let row = q_start + e / config.head_dim;
        if e < config.block_q * config.head_dim && row < params.seq_q {
            let at =
                base + row as usize * dq.stride(2) + (e % config.head_dim) as usize * dq.stride(3);
            dq[at] = F::cast_from(dq_acc.sum[t as usize] * params.scale);
        }
    }
}

/// One key/value block: load K and V, recompute dS, then `dQ += dS K` for this unit's elements.
/// Synchronizes the cube before returning (the next block overwrites the tiles).
#[cube]
#[allow(clippy::too_many_arguments)]
fn accumulate_kv_block<F: Float, M: Int>(
    k: &Tensor<F>,
    v: &Tensor<F>,
    mask: &Tensor<M>,
    bias: &Tensor<F>,
    params: &ScoreParams,
    tensors: &ScoreTensors,
    tiles: &mut BlockPairTiles,
    pair: &BlockPair,
    dq_acc: &mut CompensatedSums,
    #[comptime] config: PortableGradientConfig,
    #[comptime] masked_pass: bool,
) {
    load_kv_block::<F>(k, v, tiles, pair, config);
    sync_cube();
    recompute_p_and_ds::<F, M>(
        mask,
        bias,
        params,
        tensors,
        tiles,
        pair,
        config,
        masked_pass,
    );
    sync_cube();

    let score_cols = config.score_tile_cols();
    let dk_cols = config.head_dim_tile();
    // This unit's elements of the [block_q, head_dim] block: `unit_element`.
    // Groups of columns summed plainly, then added to the compensated totals.
    let group = config.sum_group();
    for first in 0..config.block_kv / group {
        let j0 = first * group;
        #[unroll]
        for t in 0..config.head_acc_per_unit() {
            let (i, c) = unit_element(t, config.block_q, config.head_dim, config.units);
            let mut group_sum = 0.0f32;
            #[unroll]
            for r in 0..group {
                let j = j0 + r;
                group_sum +=
                    tiles.ds[(i * score_cols + j) as usize] * tiles.k[(j * dk_cols + c) as usize];
            }
            dq_acc.add(t, group_sum);
        }
    }
    sync_cube();
}
