//! How the portable and matrix forward kernels split a query row across units: a unit's
//! place ([`UnitRole`]), the softmax step of one key/value block over the row's units, and the
//! final write of its O columns and the row's log-sum-exp. (The mma path keeps rows in
//! registers instead: see [`super::mma`].)
use cubecl::prelude::*;

use crate::config::SplitsRows;
use crate::primitives::block_range::{kv_block_range, query_block_heaviest_first};
use crate::primitives::block_stream::BlockSpan;
use crate::primitives::dropout::dropout_factor;
use crate::primitives::online_softmax::OnlineSoftmax;
use crate::primitives::row_reduce::{plane_row_max, plane_row_sum, row_max, row_sum};
use crate::primitives::score::{ScoreParams, ScoreTensors, score_tensors};
use crate::primitives::tile_io::{HeadView, head_view};

/// Normalizes this unit's O columns `lane + c * lanes` (c < `cols`, column < `val_dim`) of
/// query row `row` once, writes them, and writes the row's lse from lane 0 (`quiet`: of the
/// quiet softmax).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_outputs<F: Float>(
    o: &mut Tensor<F>,
    lse: &mut Tensor<f32>,
    acc: &Array<f32>,
    softmax: &OnlineSoftmax,
    batch: u32,
    head: u32,
    row: u32,
    lane: u32,
    #[comptime] lanes: u32,
    #[comptime] val_dim: u32,
    #[comptime] cols: u32,
    #[comptime] precise: bool,
    #[comptime] quiet: bool,
) {
    let normalizer = if comptime!(quiet) {
        softmax.quiet_normalizer(precise)
    } else {
        softmax.normalizer()
    };
    let o_row =
        batch as usize * o.stride(0) + head as usize * o.stride(1) + row as usize * o.stride(2);
    #[unroll]
    for c in 0..cols {
        let col = lane + c * lanes;
        if col < val_dim {
            o[o_row + col as usize * o.stride(3)] = F::cast_from(acc[c as usize] * normalizer);
        }
    }
    if lane == 0 {
        let at = batch as usize * lse.stride(0)
            + head as usize * lse.stride(1)
            + row as usize * lse.stride(2);
        lse[at] = if comptime!(quiet) {
            softmax.quiet_lse(precise)
        } else {
            softmax.lse(precise)
        };
    }
}

/// Where a unit sits in the cube (both paths): unit `UNIT_POS` owns query row
/// `UNIT_POS / units_per_row` of the block, as lane `UNIT_POS % units_per_row` of that row.
#[derive(CubeType, Clone, Copy)]
pub(crate) struct UnitRole {
    /// Row inside the query block.
    pub row: u32,
    /// Index among the units of that row.
    pub lane: u32,
    /// Row inside the (batch, head), clamped to `seq_q - 1`: rows past the end compute as the
    /// last row (so every read is in bounds) and are never written.
    pub read_row: u32,
}

#[cube]
pub(crate) fn unit_role(q_start: u32, seq_q: u32, #[comptime] units_per_row: u32) -> UnitRole {
    let row = UNIT_POS / units_per_row;
    UnitRole {
        row,
        lane: UNIT_POS % units_per_row,
        read_row: min(q_start + row, seq_q - 1),
    }
}

/// The softmax step of one key/value block for this unit's logits (its columns
/// `kv_start + lane + t * lanes` of row `role.row`): new row max, `alpha`, P written to
/// `p_tile` (row stride `p_cols`, element type of the next product; times its dropout factor
/// with `dropout`, the row sum taking P undropped), row sum. Returns `alpha`, by which the
/// caller rescales its O accumulators. Synchronizes the cube; P is visible to all units after.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn softmax_block<P: Float>(
    logits: &Array<f32>,
    softmax: &mut OnlineSoftmax,
    p_tile: &mut Slice<P, ReadWrite>,
    partial_max: &mut Slice<f32, ReadWrite>,
    partial_sum: &mut Slice<f32, ReadWrite>,
    role: UnitRole,
    params: &ScoreParams,
    kv_start: u32,
    #[comptime] cols_per_unit: u32,
    #[comptime] lanes: u32,
    #[comptime] p_cols: u32,
    #[comptime] masked_pass: bool,
    #[comptime] precise: bool,
    #[comptime] dropout: bool,
) -> f32 {
    let units = comptime!(RowUnits::plain(lanes, cols_per_unit));
    let alpha = block_alpha(logits, softmax, partial_max, role, units, precise, false);
    block_probabilities::<P>(
        logits,
        softmax,
        p_tile,
        partial_sum,
        role,
        params,
        kv_start,
        units,
        p_cols,
        masked_pass,
        precise,
        dropout,
    );
    alpha
}

/// How a query row's columns of one block split over the row's units.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(crate) struct RowUnits {
    /// Units sharing the row.
    pub lanes: u32,
    /// Columns of the block each unit takes (see [`unit_column`]).
    pub cols_per_unit: u32,
    /// Groups of `stagger_rows` rows, cycling through the block's rows, whose column walks are
    /// staggered: group g starts g steps later ([`unit_column`]; 1: none; the matrix path's
    /// [`crate::config::MatrixConfig::stagger_groups`]).
    pub stagger_groups: u32,
    /// Rows per staggered group (8, or 4 with the matrix forward's wide score rows).
    pub stagger_rows: u32,
    /// The row's units reduce by plane shuffles, without shared memory or a sync (the matrix
    /// path's [`crate::config::MatrixConfig::plane_shuffles`]), not through `partials`.
    pub shuffles: bool,
}

impl RowUnits {
    /// `lanes` units of `cols_per_unit` columns each, unstaggered, reducing through shared
    /// memory.
    pub fn plain(lanes: u32, cols_per_unit: u32) -> Self {
        Self { lanes, cols_per_unit, stagger_groups: 1, stagger_rows: 1, shuffles: false }
    }
}

/// The first half of [`softmax_block`]: the row's block max over its units (one cube sync,
/// none with `units.shuffles`), the running max moved (lazily with `lazy`, see
/// [`OnlineSoftmax::rescale_lazy`]) and the sum rescaled. Returns `alpha`.
#[cube]
pub(crate) fn block_alpha(
    logits: &Array<f32>,
    softmax: &mut OnlineSoftmax,
    partial_max: &mut Slice<f32, ReadWrite>,
    role: UnitRole,
    #[comptime] units: RowUnits,
    #[comptime] precise: bool,
    #[comptime] lazy: bool,
) -> f32 {
    let mut local_max = logits[0];
    #[unroll]
    for t in 1..units.cols_per_unit {
        local_max = max(local_max, logits[t as usize]);
    }
    let block_max = if comptime!(units.shuffles) {
        plane_row_max(local_max, units.lanes)
    } else {
        row_max(partial_max, local_max, role.row, role.lane, units.lanes)
    };
    if comptime!(lazy) {
        softmax.rescale_lazy(block_max, precise)
    } else {
        softmax.rescale(block_max, precise)
    }
}

/// The column of a block that this unit's `t`-th logit belongs to: `lane + t * lanes`, each unit
/// of a row taking every `lanes`-th column. Staggered (`units.stagger_groups` > 1): group g of
/// every plane's rows (`units.stagger_rows` rows each) walks its columns g steps later (the last
/// wrapping to the first), the same set in another order, so that where 16 rows of 2 units (or
/// 32 rows of 1) share a 32-bank access the rows whose padded starts fall on the same bank (`r`
/// and `r + 8` with 16-byte padding; `r`, `r + 4`, `r + 8`, ... with S's 32-byte rows) read S in
/// different banks, and with 2 units a row write P in different banks too.
#[cube]
pub(crate) fn unit_column(role: UnitRole, t: u32, #[comptime] units: RowUnits) -> u32 {
    let lanes = units.lanes;
    if comptime!(units.stagger_groups > 1) {
        let groups = comptime!(units.stagger_groups);
        let rows = comptime!(units.stagger_rows);
        role.lane + ((t + (role.row / rows) % groups) % units.cols_per_unit) * lanes
    } else {
        role.lane + t * lanes
    }
}

/// The second half of [`softmax_block`]: P against the running max written to `p_tile`, the
/// row sum over its units (one cube sync, after which P is visible to all units) added. With
/// `units.shuffles` there is no sync: the caller makes P visible. Logit `t` belongs to column
/// [`unit_column`]`(t)`.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn block_probabilities<P: Float>(
    logits: &Array<f32>,
    softmax: &mut OnlineSoftmax,
    p_tile: &mut Slice<P, ReadWrite>,
    partial_sum: &mut Slice<f32, ReadWrite>,
    role: UnitRole,
    params: &ScoreParams,
    kv_start: u32,
    #[comptime] units: RowUnits,
    #[comptime] p_cols: u32,
    #[comptime] masked_pass: bool,
    #[comptime] precise: bool,
    #[comptime] dropout: bool,
) {
    let p_row = (role.row * p_cols) as usize;
    let mut local_sum = 0.0f32;
    #[unroll]
    for t in 0..units.cols_per_unit {
        let p = softmax.probability(logits[t as usize], masked_pass, precise);
        let col = unit_column(role, t, units);
        let mut dropped = p;
        if comptime!(dropout) {
            dropped *= dropout_factor(role.read_row, kv_start + col, params);
        }
        p_tile[p_row + col as usize] = P::cast_from(dropped);
        local_sum += p;
    }
    let block_sum = if comptime!(units.shuffles) {
        plane_row_sum(local_sum, units.lanes)
    } else {
        row_sum(partial_sum, local_sum, role.row, role.lane, units.lanes)
    };
    softmax.accumulate(block_sum);
}

/// What the portable and matrix forward kernels do differently: their shared-memory tiles
/// (with the query block staged in them) and the work of one key/value block. The rest, unit
/// roles, the key/value loop with its unmasked and masked passes, and the output, is
/// [`forward_rows`]. `I` is the element q, k and v are read in: `F`, or (the matrix path) a
/// vector of `F`.
#[cube]
pub(crate) trait BlockStep<F: Float, I: CubePrimitive, M: Int>: 'static + Send + Sync {
    type Tiles: CubeType;
    /// The kernel's configuration: it says how rows split over units ([`SplitsRows`]).
    type Config: SplitsRows;

    /// Declares the tiles and stages query rows `[q_start, q_start + block_q)` in them (no
    /// sync: the first key block's makes them visible).
    fn query_tiles(
        q: &Tensor<I>,
        q_view: &HeadView,
        q_start: u32,
        #[comptime] config: Self::Config,
    ) -> Self::Tiles;

    /// One iteration of the main loop: key/value block `kv_block` (of the cube's `range`, which
    /// the matrix path reads to fetch the next block ahead) updates the softmax state and the O
    /// accumulators of this unit (`acc`; the matrix path keeps them in its planes' fragments
    /// instead, see [`Self::finish`]). `masked_pass` emits the tail / causal / mask checks.
    #[allow(clippy::too_many_arguments)]
    fn attend(
        k: &Tensor<I>,
        v: &Tensor<I>,
        mask: &Tensor<M>,
        bias: &Tensor<F>,
        k_view: &HeadView,
        v_view: &HeadView,
        params: &ScoreParams,
        tensors: &ScoreTensors,
        kv_block: u32,
        range: &BlockSpan,
        role: UnitRole,
        tiles: &mut Self::Tiles,
        softmax: &mut OnlineSoftmax,
        acc: &mut Array<f32>,
        #[comptime] config: Self::Config,
        #[comptime] masked_pass: bool,
    );

    /// After the last key/value block: this unit's O columns into `acc` where the step keeps
    /// them elsewhere (the matrix path, in its fragments); nothing where `attend` accumulated
    /// into `acc`. Every unit of the cube calls it (it may synchronize the cube).
    fn finish(
        tiles: &mut Self::Tiles,
        role: UnitRole,
        acc: &mut Array<f32>,
        #[comptime] config: Self::Config,
    );
}

/// The body of the portable and matrix forward kernels, `S` doing their own part.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn forward_rows<F: Float, I: CubePrimitive, M: Int, S: BlockStep<F, I, M>>(
    q: &Tensor<I>,
    k: &Tensor<I>,
    v: &Tensor<I>,
    mask: &Tensor<M>,
    bias: &Tensor<F>,
    slopes: &Tensor<f32>,
    o: &mut Tensor<F>,
    lse: &mut Tensor<f32>,
    params: ScoreParams,
    #[comptime] config: S::Config,
) {
    let split = comptime!(config.split());
    let q_block = query_block_heaviest_first(split.score.causal);
    let heads = q.shape(1) as u32;
    let (batch, head) = (CUBE_POS_Y / heads, CUBE_POS_Y % heads);
    let q_start = q_block * split.block_q;
    let role = unit_role(q_start, params.seq_q, split.units_per_row);
    let kv_head = head / (heads / k.shape(1) as u32);
    let k_view = head_view(k, batch, kv_head);
    let v_view = head_view(v, batch, kv_head);
    let tensors = score_tensors(mask, bias, slopes, batch, head, split.score);

    // Step 1: the query block, once. The first key block's sync makes it visible.
    let mut tiles = S::query_tiles(q, &head_view(q, batch, head), q_start, config);

    let mut acc = Array::<f32>::new(comptime!(split.out_cols_per_unit as usize));
    #[unroll]
    for c in 0..split.out_cols_per_unit {
        acc[c as usize] = 0.0f32;
    }
    let mut softmax = OnlineSoftmax::new();

    // Step 2: stream the visible key/value blocks; fully masked causal blocks are skipped,
    // fully visible ones take the unmasked pass.
    let range = kv_block_range(q_block, &params, split.block_q, split.block_kv, split.score);
    for kv_block in range.start..range.first_masked {
        S::attend(
            k,
            v,
            mask,
            bias,
            &k_view,
            &v_view,
            &params,
            &tensors,
            kv_block,
            &range,
            role,
            &mut tiles,
            &mut softmax,
            &mut acc,
            config,
            false,
        );
    }
    for kv_block in range.first_masked..range.end {
        S::attend(
            k,
            v,
            mask,
            bias,
            &k_view,
            &v_view,
            &params,
            &tensors,
            kv_block,
            &range,
            role,
            &mut tiles,
            &mut softmax,
            &mut acc,
            config,
            true,
        );
    }

    // Step 3: normalize once and write O and the log-sum-exp.
    S::finish(&mut tiles, role, &mut acc, config);
    if q_start + role.row < params.seq_q {
        write_outputs::<F>(
            o,
            lse,
            &acc,
            &softmax,
            batch,
            head,
            q_start + role.row,
            role.lane,
            split.units_per_row,
            split.val_dim,
            split.out_cols_per_unit,
            split.precise_math,
            split.quiet_softmax,
        );
    }
}
