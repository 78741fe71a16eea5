//! The one streaming loop of the mma kernels (forward, dK/dV, dQ): a fixed block stays in
//! registers or shared memory while a stream of blocks passes through shared memory, each
//! loaded ([`BlockBody::start`] / [`BlockBody::finish`], usually a
//! [`super::pair_stream::PairStream`]) and then consumed ([`BlockBody::compute`]).
//!
//! Two schedules ([`StreamSchedule::prefetch`]):
//! ```text
//! prefetch (2 buffers, or 1 through registers)      load, then compute (1 buffer)
//!   prologue: start(b0) finish(b0)                    -
//!   block b:  start(b+1)  compute(b)                  start(b) finish(b) compute(b)
//!             [1 buffer: sync]  finish(b+1)           sync
//! ```
//! With two buffers block `b + 1` lands in the buffer that every unit finished reading before
//! the previous `finish`; with one buffer through registers it is stored after the sync that
//! ends every read of block `b`. The masked pass ([`Masking`]) is a comptime flag of
//! `compute`: one contiguous run of unmasked blocks then masked ones, the body's choice per
//! block, or (where the planner proved no block needs it) never. Control flow is uniform
//! across the cube.
use cubecl::prelude::*;

use super::chunk_io::buffer_row;

/// Where the masked pass runs.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Masking {
    /// Blocks `[start, first_masked)` unmasked, `[first_masked, end)` masked.
    Split,
    /// Whichever [`BlockBody::needs_masked`] says, block by block.
    PerBlock,
    /// Every block unmasked: the planner proved that no block of the problem needs the
    /// masked pass ([`super::block_range::never_masked`]), so it is not compiled at all (the
    /// unrolled body once instead of twice: half the source nvrtc compiles on a first call).
    Never,
}

/// How a kernel streams its blocks (see the module doc).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct StreamSchedule {
    /// Rows per streamed block.
    pub rows: u32,
    /// Shared-memory copies of the streamed block (1 or 2).
    pub buffers: u32,
    /// Whether the next block is started before the current one computes (two buffers, or
    /// one buffer streamed through registers). Otherwise (one buffer) each block is loaded and
    /// waited for before it computes.
    pub prefetch: bool,
    pub masking: Masking,
    /// With `prefetch`: the caller has already started the span's first block (before work of
    /// its own, so that the two overlap); [`stream_blocks`] only completes it.
    pub first_started: bool,
}

/// A kernel configuration that streams blocks.
pub trait Streams: Copy + core::fmt::Debug + core::hash::Hash + Eq + Send + Sync + 'static {
    fn schedule(&self) -> StreamSchedule;
}

/// The streamed blocks: `[start, end)`, the masked pass from `first_masked` on
/// ([`Masking::Split`]; with [`Masking::PerBlock`] [`BlockBody::needs_masked`] decides, reading
/// it where it applies).
#[derive(CubeType, Clone, Copy)]
pub struct BlockSpan {
    pub start: u32,
    pub first_masked: u32,
    pub end: u32,
}

/// What one kernel does with its stream: `Inputs` is what it only reads (tensors, views,
/// scalars of this cube), `State` what the blocks change (tiles, the stream's own state,
/// accumulators).
#[cube]
pub trait BlockBody: 'static + Send + Sync {
    type Inputs: CubeType;
    type State: CubeType;
    type Config: Streams;

    /// Starts loading block `block` into the tiles from row `tile_row` on.
    fn start(
        inputs: &Self::Inputs,
        state: &mut Self::State,
        block: u32,
        tile_row: u32,
        #[comptime] config: Self::Config,
    );

    /// Completes what `start` began at `tile_row` (if `started`), then waits for the cube:
    /// after it, the block is visible to every unit.
    fn finish(
        inputs: &Self::Inputs,
        state: &mut Self::State,
        tile_row: u32,
        started: bool,
        #[comptime] config: Self::Config,
    );

    /// [`Masking::PerBlock`]: whether `block` of `span` needs the masked pass (uniform across
    /// the cube).
    fn needs_masked(
        inputs: &Self::Inputs,
        span: &BlockSpan,
        block: u32,
        #[comptime] config: Self::Config,
    ) -> bool;

    /// Consumes block `block`, held from row `tile_row` of the tiles; `masked_pass` emits the
    /// tail / causal / mask checks.
    fn compute(
        inputs: &Self::Inputs,
        state: &mut Self::State,
        block: u32,
        tile_row: u32,
        #[comptime] config: Self::Config,
        #[comptime] masked_pass: bool,
    );
}

/// Streams the blocks of `span` through `B` (see the module doc).
// A comptime condition stays outside the run-time one it guards: collapsed into one `&&`,
// CubeCL writes the constant into the generated test.
#[allow(clippy::collapsible_if)]
#[cube]
pub fn stream_blocks<B: BlockBody>(
    inputs: &B::Inputs,
    state: &mut B::State,
    span: BlockSpan,
    #[comptime] config: B::Config,
) {
    let schedule = comptime!(config.schedule());
    if comptime!(schedule.prefetch) {
        let started = span.start < span.end;
        let row = buffer_row(span.start, schedule.buffers, schedule.rows);
        if comptime!(!schedule.first_started) {
            if started {
                B::start(inputs, state, span.start, row, config);
            }
        }
        B::finish(inputs, state, row, started, config);
    }
    if comptime!(schedule.masking == Masking::Split) {
        stream_run::<B>(inputs, state, &span, span.start, span.first_masked, config, comptime!(Pass::Unmasked));
        stream_run::<B>(inputs, state, &span, span.first_masked, span.end, config, comptime!(Pass::Masked));
    } else if comptime!(schedule.masking == Masking::PerBlock) {
        stream_run::<B>(inputs, state, &span, span.start, span.end, config, comptime!(Pass::PerBlock));
    } else {
        stream_run::<B>(inputs, state, &span, span.start, span.end, config, comptime!(Pass::Unmasked));
    }
}

/// The pass of a run of blocks.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum Pass {
    Unmasked,
    Masked,
    /// Whichever [`BlockBody::needs_masked`] says.
    PerBlock,
}

/// Blocks `[from, to)` of `span`, in `pass`.
#[cube]
fn stream_run<B: BlockBody>(
    inputs: &B::Inputs,
    state: &mut B::State,
    span: &BlockSpan,
    from: u32,
    to: u32,
    #[comptime] config: B::Config,
    #[comptime] pass: Pass,
) {
    let schedule = comptime!(config.schedule());
    let (buffers, rows) = comptime!((schedule.buffers, schedule.rows));
    for block in from..to {
        let next = block + 1;
        let has_next = next < span.end;
        let next_row = buffer_row(next, buffers, rows);
        if comptime!(schedule.prefetch) {
            // Lands while this block computes (two buffers: into the other one).
            if has_next {
                B::start(inputs, state, next, next_row, config);
            }
        } else {
            B::start(inputs, state, block, 0u32, config);
            B::finish(inputs, state, 0u32, true, config);
        }
        let row = buffer_row(block, buffers, rows);
        if comptime!(pass != Pass::PerBlock) {
            B::compute(inputs, state, block, row, config, comptime!(pass == Pass::Masked));
        } else if B::needs_masked(inputs, span, block, config) {
            B::compute(inputs, state, block, row, config, true);
        } else {
            B::compute(inputs, state, block, row, config, false);
        }
        if comptime!(schedule.prefetch) {
            if comptime!(buffers == 1) {
                // Every unit is done reading this block before the next one overwrites it.
                sync_cube();
            }
            B::finish(inputs, state, next_row, has_next, config);
        } else {
            // Every unit is done reading this block before the next one is loaded.
            sync_cube();
        }
    }
}
