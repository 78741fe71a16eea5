//! The backward kernels on the wgpu runtime (lavapipe here) against the f64 oracle, with the
//! FlashAttention tolerance rule for gradients (factor 3, `plain` = the same naive
//! implementation at the test dtype's precision). Inputs are drawn from a seeded RNG (the seed
//! derives from the case's name and is printed and in every failure message;
//! `FLASH_TEST_SEED=n` overrides it) and outputs are poisoned with NaN first.
//!
//! - [`kernels`]: each kernel alone (preprocess, dK/dV, dQ) against the oracle's intermediates;
//! - [`shapes`]: end to end (preprocess, dK/dV, dQ) at the shapes that break kernels;
//! - [`sweeps`]: end to end over lengths, tails, head dims, options, layouts, batch and heads;
//! - [`half`]: f16 / bf16, the mma path's shapes where the device has it;
//! - [`features`]: grouped-query attention, sliding windows, ALiBi, forward and backward;
//! - [`one_pass`]: the one-pass backward (dQ by f32 atomic adds in the dK/dV kernel) and the
//!   two-kernel one on the same cases (`BURN_FLASH_DQ=atomic` runs every case on the one pass);
//! - [`matrix`]: the matrix backward (cmma, or its scalar stand-in without cmma), asked for;
//! - [`determinism`]: reruns bit-identical (dQ by its kernel), and typed errors.
//!
//! `cargo test -p burn-flash-attn-kernels --test backward`
#[path = "../support/mod.rs"]
mod support;

mod determinism;
mod features;
mod half;
mod kernels;
mod matrix;
mod one_pass;
mod shapes;
mod sweeps;
