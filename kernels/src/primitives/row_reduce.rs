//! Row reductions across the units that share a query row, through shared memory (no plane
//! operations: lavapipe does not advertise them and HIP's are wave64-specific).
//!
//! Every unit of the cube must call these (they synchronize the cube). All units of a row read
//! the partials in the same order, so they all get bit-identical results.
use cubecl::prelude::*;

/// Maximum of `value` over the `lanes` units of row `row`; `partials` holds one f32 per unit.
#[cube]
pub fn row_max(
    partials: &mut Slice<f32, ReadWrite>,
    value: f32,
    row: u32,
    lane: u32,
    #[comptime] lanes: u32,
) -> f32 {
    let first = (row * lanes) as usize;
    partials[first + lane as usize] = value;
    sync_cube();
    let mut out = partials[first];
    for other in 1..lanes {
        out = max(out, partials[first + other as usize]);
    }
    out
}

/// Sum of `value` over the `lanes` units of row `row`; `partials` holds one f32 per unit.
#[cube]
pub fn row_sum(
    partials: &mut Slice<f32, ReadWrite>,
    value: f32,
    row: u32,
    lane: u32,
    #[comptime] lanes: u32,
) -> f32 {
    let first = (row * lanes) as usize;
    partials[first + lane as usize] = value;
    sync_cube();
    let mut out = partials[first];
    for other in 1..lanes {
        out += partials[first + other as usize];
    }
    out
}
