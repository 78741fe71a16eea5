//! Row reductions across the units that share a query row: through shared memory (every unit
//! of the cube must call [`row_max`] / [`row_sum`]: they synchronize the cube; lavapipe has no
//! plane operations), or, where a row's units are adjacent units of one plane, by plane
//! shuffles ([`plane_row_max`] / [`plane_row_sum`]: no shared memory, no sync; every unit of
//! the plane must call them).
//!
//! Either way every unit of a row gets the bit-identical result: through shared memory all read
//! the partials in the same order; by shuffles, each step combines two equal partial results
//! (`a + b` on one unit is `b + a` on the other, bit for bit).
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

/// Synchronizes the plane (`plane`: its units and fragments only; CUDA's `__syncwarp`, which
/// HIP lacks in CubeCL 0.10) or the whole cube (every unit of it must call it then).
#[cube]
pub fn sync_units(#[comptime] plane: bool) {
    if comptime!(plane) {
        sync_plane();
    } else {
        sync_cube();
    }
}

/// Maximum of `value` over the `lanes` units of its row, where a row's units are `lanes`
/// adjacent units of one plane starting at a multiple of `lanes` (a power of two): a butterfly
/// of `log2(lanes)` shuffles.
#[cube]
pub fn plane_row_max(value: f32, #[comptime] lanes: u32) -> f32 {
    let mut out = value;
    #[unroll]
    for step in 0..comptime!(lanes.trailing_zeros()) {
        out = max(out, plane_shuffle_xor(out, comptime!(1u32 << step)));
    }
    out
}

/// Sum of `value` over the `lanes` units of its row, as [`plane_row_max`].
#[cube]
pub fn plane_row_sum(value: f32, #[comptime] lanes: u32) -> f32 {
    let mut out = value;
    #[unroll]
    for step in 0..comptime!(lanes.trailing_zeros()) {
        out += plane_shuffle_xor(out, comptime!(1u32 << step));
    }
    out
}
