//! The f32 tiles of a portable kernel as views of one shared allocation.
//!
//! CubeCL 0.10 gives each `SharedMemory` its place in the cube's shared memory in the iteration
//! order of a `std` hash set (`cubecl-opt`'s shared-memory liveness), which differs from process
//! to process: the same kernel is generated with its arrays in a different order in every run.
//! On gfx942 that order changes the machine code, not only the addresses: whichever array sits
//! at offset 0 can have its reads fused into `ds_read2_b32` pairs, and the schedule built around
//! them needs more registers. One portable dK/dV variant took 146 VGPRs in most orders and
//! 256 VGPRs + 98 AGPRs with 6 spilled in others, so an offline check of one generated source
//! said nothing certain about the next process. A kernel that carves its tiles out of a single
//! allocation ([`carve`]) at offsets fixed by its config ([`Carver`]) is generated the same in
//! every run (`kernels/tests/hip_codegen.rs` checks it), and what the offline compile reports is
//! what a device compiles.
use cubecl::prelude::*;

/// Lays tiles out one after another (comptime), in f32 elements: `take(len)` gives the next
/// `[start, end)`.
#[derive(Clone, Copy, Debug, Default, Hash, PartialEq, Eq)]
pub struct Carver {
    next: usize,
}

impl Carver {
    /// The next tile of `len` elements.
    pub fn take(&mut self, len: u32) -> (usize, usize) {
        let start = self.next;
        self.next += len as usize;
        (start, self.next)
    }

    /// End of the last tile taken: the size of the allocation.
    pub fn end(&self) -> usize {
        self.next
    }
}

/// The view `[range.0, range.1)` of `arena`.
#[cube]
pub fn carve(arena: &mut SharedMemory<f32>, #[comptime] range: (usize, usize)) -> Slice<f32, ReadWrite> {
    arena.slice_mut(comptime!(range.0), comptime!(range.1))
}
