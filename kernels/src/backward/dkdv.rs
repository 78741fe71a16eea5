//! dK and dV: FlashAttention-2's backward outer loop over key/value blocks (Algorithm 2).
//!
//! One cube per (key/value block, batch * head). K and V of the block stay in shared memory;
//! the query blocks that can see the block stream through it (causal: the query blocks above
//! the diagonal are skipped). Per query block:
//! ```text
//! P, dS  recomputed from Q, K, V, dO, lse, delta        (block_pair)
//! dV    += P^T dO
//! dK    += dS^T Q          (times scale once, at the end)
//! ```
//! Each unit owns fixed elements of dK and dV in registers, so every element is written once
//! by one unit: no atomics, bit-identical reruns. The one-pass variant
//! ([`PortableGradientConfig::atomic_dq`], [`super::dq_sink`]) also adds each pair's
//! `dS K` to an f32 dQ accumulator with atomic adds (FlashAttention-2's schedule).
use cubecl::prelude::*;

use crate::primitives::block_range::{pair_needs_masked_pass, query_block_span};
use crate::primitives::score::{ScoreParams, ScoreTensors, score_tensors};
use crate::problem::AttentionProblem;

use super::GradientInputs;
use super::dq_sink::{AtomicDq, DqSink, NoDq, no_accumulator};
use super::block_pair::{
    BlockPair, BlockPairTiles, load_kv_block, load_query_block, new_tiles, recompute_p_and_ds,
    unit_element,
};
use super::compensated::CompensatedSums;
use super::config::{BackwardKernel, PortableGradientConfig};
use crate::primitives::score::score_params;

/// Launches the dK/dV kernel with `config` (a [`BackwardKernel::KeyValue`] config from
/// [`crate::plan::backward`], without [`PortableGradientConfig::atomic_dq`]). `dk` and `dv` are
/// fully overwritten.
///
/// # Important
///
/// The caller has checked every shape against the problem; the kernel trusts them.
pub fn flash_attention_backward_dkdv<R: Runtime, F: Float, M: Int>(
    client: &ComputeClient<R>,
    problem: &AttentionProblem,
    inputs: GradientInputs<R>,
    dk: TensorBinding<R>,
    dv: TensorBinding<R>,
    config: PortableGradientConfig,
) {
    debug_assert!(!config.atomic_dq, "the one-pass config takes launch_dkdv_dq");
    let dq_acc = no_accumulator(client);
    launch::<R, F, M, NoDq>(client, problem, inputs, dk, dv, dq_acc, config)
}

/// The one-pass dK/dV kernel (`config.atomic_dq`): dK and dV as
/// [`flash_attention_backward_dkdv`], and every block pair's `dS K` added to `dq_acc` (f32,
/// zeroed, `[batch, num_heads, seq_q, head_dim]`, without the scale) by atomic adds. The device
/// must register f32 atomic add (the planner checks).
pub(crate) fn launch_dkdv_dq<R: Runtime, F: Float, M: Int>(
    client: &ComputeClient<R>,
    problem: &AttentionProblem,
    inputs: GradientInputs<R>,
    (dk, dv, dq_acc): (TensorBinding<R>, TensorBinding<R>, TensorBinding<R>),
    config: PortableGradientConfig,
) {
    debug_assert!(config.atomic_dq, "a two-kernel config takes flash_attention_backward_dkdv");
    launch::<R, F, M, AtomicDq>(client, problem, inputs, dk, dv, dq_acc.into_tensor_arg(), config)
}

#[allow(clippy::too_many_arguments)]
fn launch<R: Runtime, F: Float, M: Int, D: DqSink>(
    client: &ComputeClient<R>,
    problem: &AttentionProblem,
    inputs: GradientInputs<R>,
    dk: TensorBinding<R>,
    dv: TensorBinding<R>,
    dq_acc: TensorArg<R>,
    config: PortableGradientConfig,
) {
    debug_assert_eq!(config.kernel, BackwardKernel::KeyValue);
    let kv_blocks = problem.seq_kv.div_ceil(config.block_kv as usize) as u32;
    let heads_total = problem.heads_total() as u32;
    let args = inputs.into_args(client);
    // SAFETY: shapes and strides were validated against the problem; every global access is
    // bounds-checked against the problem's sizes inside the kernel (dq_acc: rows against
    // seq_q, columns against head_dim; only touched by the one-pass config).
    unsafe {
        flash_attention_backward_dkdv_kernel::launch_unchecked::<F, M, D, R>(
            client,
            CubeCount::Static(kv_blocks, heads_total, 1),
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
            dk.into_tensor_arg(),
            dv.into_tensor_arg(),
            dq_acc,
            score_params(problem),
            // `opaque_one`: see `CompensatedSums`.
            1.0f32,
            config,
        )
    }
}

/// This unit's dK and dV elements.
#[derive(CubeType)]
struct KeyValueGradients {
    /// `Σ dS^T Q` for elements `UNIT_POS + t * units` of the `[block_kv, head_dim]` block.
    dk: CompensatedSums,
    /// `Σ P^T dO` for elements `UNIT_POS + t * units` of the `[block_kv, val_dim]` block.
    dv: CompensatedSums,
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn flash_attention_backward_dkdv_kernel<F: Float, M: Int, D: DqSink>(
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
    dq_acc: &mut Tensor<D::Acc>,
    params: ScoreParams,
    opaque_one: f32,
    #[comptime] config: PortableGradientConfig,
) {
    let heads = q.shape(1) as u32;
    let (batch, head) = (CUBE_POS_Y / heads, CUBE_POS_Y % heads);
    let kv_start = CUBE_POS_X * config.block_kv;
    let kv_head = head / (heads / k.shape(1) as u32);
    let tensors = score_tensors(mask, bias, slopes, batch, head, config.score);
    let mut tiles = new_tiles(config);
    let mut grads = KeyValueGradients {
        dk: CompensatedSums::new(opaque_one, config.head_acc_per_unit()),
        dv: CompensatedSums::new(opaque_one, config.val_acc_per_unit()),
    };

    // Step 1: K and V of this block, once; the first query block's sync makes them visible.
    let first = BlockPair {
        batch,
        head,
        kv_head,
        q_start: 0,
        kv_start,
    };
    load_kv_block::<F>(k, v, &mut tiles, &first, config);

    // Step 2: the query blocks that see this block (causal: none above the diagonal; window:
    // none outside it).
    let span = query_block_span(
        kv_start,
        &params,
        config.block_q,
        config.block_kv,
        config.score,
    );
    for q_block in span.start..span.end {
        let pair = BlockPair {
            batch,
            head,
            kv_head,
            q_start: q_block * config.block_q,
            kv_start,
        };
        load_query_block::<F>(q, d_out, lse, delta, &mut tiles, &pair, config);
        sync_cube();
        // A uniform branch: every unit of the cube takes the same pass.
        let (block_q, block_kv) = (config.block_q, config.block_kv);
        if pair_needs_masked_pass(
            pair.q_start,
            kv_start,
            &params,
            block_q,
            block_kv,
            config.score,
        ) {
            accumulate_query_block::<F, M>(
                mask, bias, &params, &tensors, &mut tiles, &pair, &mut grads, config, true,
            );
        } else {
            accumulate_query_block::<F, M>(
                mask, bias, &params, &tensors, &mut tiles, &pair, &mut grads, config, false,
            );
        }
        // dS and K are still in the tiles: the next block's loads write Q, dO and the stats,
        // and its dS comes after the sync that follows them.
        if comptime!(config.atomic_dq) {
            add_dq_share::<D>(dq_acc, &tiles, &pair, params.seq_q, params.seq_kv, config);
        }
    }

    // Step 3: write dK = scale * Σ dS^T Q and dV = Σ P^T dO (rows past seq_kv are not written).
    write_block::<F>(
        dk,
        &grads.dk.sum,
        batch,
        head,
        kv_start,
        params.seq_kv,
        params.scale,
        config.head_dim,
        config,
    );
    write_block::<F>(
        dv,
        &grads.dv.sum,
        batch,
        head,
        kv_start,
        params.seq_kv,
        1.0f32,
        config.val_dim,
        config,
    );
}

/// One query block: recompute P and dS, then `dV += P^T dO`, `dK += dS^T Q` for this unit's
/// elements. Synchronizes the cube before returning (the next block overwrites the tiles).
#[cube]
#[allow(clippy::too_many_arguments)]
fn accumulate_query_block<F: Float, M: Int>(
    mask: &Tensor<M>,
    bias: &Tensor<F>,
    params: &ScoreParams,
    tensors: &ScoreTensors,
    tiles: &mut BlockPairTiles,
    pair: &BlockPair,
    grads: &mut KeyValueGradients,
    #[comptime] config: PortableGradientConfig,
    #[comptime] masked_pass: bool,
) {
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
    let dv_cols = config.val_dim_tile();
    // This unit's elements of the [block_kv, dim] blocks: `unit_element`.
    // Groups of rows summed plainly, then added to the compensated totals.
    let group = config.sum_group();
    for first in 0..config.block_q / group {
        let i0 = first * group;
        #[unroll]
        for t in 0..config.val_acc_per_unit() {
            let (j, c) = accumulated_element(t, config.val_dim, config);
            let mut group_sum = 0.0f32;
            #[unroll]
            for r in 0..group {
                let i = i0 + r;
                group_sum += tiles.p[(i * score_cols + j) as usize]
                    * tiles.d_out[(i * dv_cols + c) as usize];
            }
            grads.dv.add(t, group_sum);
        }
        #[unroll]
        for t in 0..config.head_acc_per_unit() {
            let (j, c) = accumulated_element(t, config.head_dim, config);
            let mut group_sum = 0.0f32;
            #[unroll]
            for r in 0..group {
                let i = i0 + r;
                group_sum +=
                    tiles.ds[(i * score_cols + j) as usize] * tiles.q[(i * dk_cols + c) as usize];
            }
            grads.dk.add(t, group_sum);
        }
    }
    sync_cube();
}

/// This unit's `t`-th element of a `[block_kv, dim]` gradient block: [`unit_element`], except
/// in the one-pass kernel when a row is exactly one step of the units (`units == dim`: head dim
/// 256 on 256 units), where the plain `e / dim, e % dim` form is kept. Measured on gfx942 (the
/// offline compile, docs/HIP.md gap 2): there `unit_element`'s constant rows put the kernel at
/// 256 VGPRs + 108 AGPRs, 1 wave per SIMD, against 114 VGPRs with the plain form.
#[cube]
fn accumulated_element(t: u32, #[comptime] dim: u32, #[comptime] config: PortableGradientConfig) -> (u32, u32) {
    if comptime!(config.atomic_dq && config.units == dim) {
        let e = min(UNIT_POS + t * config.units, comptime!(config.block_kv * dim - 1));
        (e / dim, e % dim)
    } else {
        unit_element(t, config.block_kv, dim, config.units)
    }
}

/// The one-pass backward: adds this pair's `dS K` (`[block_q, head_dim]`, without the scale)
/// to the dQ accumulator's rows `q_start..`, one f32 atomic add per element. dS is 0 wherever
/// P is, so masked entries add nothing; rows past seq_q and keys past seq_kv are not visited.
#[cube]
fn add_dq_share<D: DqSink>(
    dq_acc: &mut Tensor<D::Acc>,
    tiles: &BlockPairTiles,
    pair: &BlockPair,
    seq_q: u32,
    seq_kv: u32,
    #[comptime] config: PortableGradientConfig,
) {
    let score_cols = config.score_tile_cols();
    let k_cols = config.head_dim_tile();
    // The block's rows before seq_q and keys before seq_kv: run-time trip counts.
    let rows = min(config.block_q, seq_q - pair.q_start);
    let keys = min(config.block_kv, seq_kv - pair.kv_start);
    let total = rows * config.head_dim;
    let base = pair.batch as usize * dq_acc.stride(0) + pair.head as usize * dq_acc.stride(1);
    let mut e = UNIT_POS;
    while e < total {
        let (i, c) = (e / config.head_dim, e % config.head_dim);
        let mut share = 0.0f32;
        for j in 0..keys {
            share += tiles.ds[(i * score_cols + j) as usize] * tiles.k[(j * k_cols + c) as usize];
        }
        let row = pair.q_start + i;
        let at = base + row as usize * dq_acc.stride(2) + c as usize * dq_acc.stride(3);
        D::add(dq_acc, at, share);
        e += config.units;
    }
}

/// Writes this unit's elements of a `[block_kv, dim]` gradient block, times `factor`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn write_block<F: Float>(
    out: &mut Tensor<F>,
    acc: &Array<f32>,
    batch: u32,
    head: u32,
    kv_start: u32,
    seq_kv: u32,
    factor: f32,
    #[comptime] dim: u32,
    #[comptime] config: PortableGradientConfig,
) {
    let base = batch as usize * out.stride(0) + head as usize * out.stride(1);
    #[unroll]
    for t in 0..comptime!((config.block_kv * dim).div_ceil(config.units)) {
        let e = UNIT_POS + t * config.units;
        let row = kv_start + e / dim;
        if e < config.block_kv * dim && row < seq_kv {
            let at = base + row as usize * out.stride(2) + (e % dim) as usize * out.stride(3);
            out[at] = F::cast_from(acc[t as usize] * factor);
        }
    }
}
