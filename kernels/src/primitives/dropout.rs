//! Dropout on the attention probabilities, regenerated identically wherever it is needed: the
//! keep decision of entry `(row, col)` of query head `batch_head = batch * num_heads + head` is a
//! stateless hash of `(seed, batch_head, row, col)` (a counter-based generator, like
//! FlashAttention's Philox stream), so the forward, the dK/dV and the dQ kernels, any block
//! size, any path and the host ([`keep_host`]) draw the same mask bit for bit, and nothing is
//! stored.
//!
//! ```text
//! row key  = mix(row ^ mix(batch_head ^ mix(seed_lo ^ mix(seed_hi))))   once per row
//! bits     = mix(col ^ row key)                                          once per entry
//! kept     = bits >= threshold,  threshold = floor(p * 2^32)             P(kept) = 1 - p
//! factor   = kept ? 1 / (1 - p) : 0                                      multiplies P
//! ```
//! `mix` is a 32-bit integer hash with three multiply-xorshift rounds (Wellons' `triple32`
//! constants): a bijection whose output bits each depend on every input bit, with
//! near-ideal avalanche. Every operation is u32 (wrapping multiply, shifts, xor): exact on
//! every runtime, WGSL included.
use cubecl::prelude::*;

use super::score::ScoreParams;

/// The mixing hash on the host (the kernels' [`mix`] bit for bit).
pub const fn mix_host(mut x: u32) -> u32 {
    x ^= x >> 17;
    x = x.wrapping_mul(0xed5a_d4bb);
    x ^= x >> 11;
    x = x.wrapping_mul(0xac4c_1b51);
    x ^= x >> 15;
    x = x.wrapping_mul(0x3184_8bab);
    x ^= x >> 14;
    x
}

/// The key of one query row (see the module doc).
pub const fn row_key_host(seed: u64, batch_head: u32, row: u32) -> u32 {
    mix_host(row ^ mix_host(batch_head ^ seed_key(seed)))
}

/// `floor(p * 2^32)`, saturated: entries whose bits are below it are dropped.
pub fn threshold(prob: f64) -> u32 {
    (prob * 4_294_967_296.0).floor().min(u32::MAX as f64) as u32
}

/// The seed's part of every key, as the kernels take it ([`ScoreParams::dropout_seed`]).
pub const fn seed_key(seed: u64) -> u32 {
    mix_host((seed as u32) ^ mix_host((seed >> 32) as u32))
}

/// Whether entry `(row, col)` of query head `batch_head` is kept (the kernels' decision).
pub fn keep_host(seed: u64, prob: f64, batch_head: u32, row: u32, col: u32) -> bool {
    mix_host(col ^ row_key_host(seed, batch_head, row)) >= threshold(prob)
}

#[cube]
pub fn mix(x: u32) -> u32 {
    let mut x = x;
    x ^= x >> 17;
    x *= 0xed5a_d4bbu32;
    x ^= x >> 11;
    x *= 0xac4c_1b51u32;
    x ^= x >> 15;
    x *= 0x3184_8babu32;
    x ^= x >> 14;
    x
}

/// The dropout factor of entry `(row, col)` of this cube's (batch, head): `1 / (1 - p)` if kept,
/// 0 if dropped. Every kernel's grid has one cube row per (batch, head) along y, so
/// `CUBE_POS_Y = batch * num_heads + head` is the entry's `batch_head`.
#[cube]
pub fn dropout_factor(row: u32, col: u32, params: &ScoreParams) -> f32 {
    let row_key = mix(row ^ mix(CUBE_POS_Y ^ params.dropout_seed));
    select(
        mix(col ^ row_key) >= params.dropout_threshold,
        params.dropout_scale,
        0.0f32,
    )
}
