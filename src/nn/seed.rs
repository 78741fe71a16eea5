//! Seeds of the attention dropout: one fresh seed per attention call, drawn on the host.
//!
//! The seeds are the outputs of one process-wide SplitMix64 stream: call `n` (counted by an
//! atomic, across all modules and threads) gets `mix(base + (n + 1) · γ)`. Drawing a seed is
//! two atomic operations: nothing is read back from the device, so a forward pass never waits
//! on it. The `base` is random per process (the standard library's hasher keys, which come
//! from the operating system) unless [`seed_dropout`] sets it.
//!
//! Reproducible runs: on a `Flash<..>` backend, Burn's `B::seed(device, seed)` (which seeds
//! burn-nn's own `Dropout` modules) also calls [`seed_dropout`]`(seed)`; on any other backend
//! call [`seed_dropout`] once before training, next to `B::seed`. The stream then
//! repeats from its start, and so do the dropout masks, as long as the attention calls come in
//! the same order (one training thread; with several threads the order of their calls decides
//! which seed each gets).
use std::hash::{BuildHasher, RandomState};
use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};

/// SplitMix64's increment, the golden ratio times 2^64 (odd: the stream visits every state).
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

static BASE: AtomicU64 = AtomicU64::new(0);
static CALLS: AtomicU64 = AtomicU64::new(0);
static RANDOM_BASE: Once = Once::new();

/// Restarts the seed stream of the attention dropout of [`crate::nn`] from `seed`: the dropout
/// masks of the following calls are a function of `seed` and the calls' order.
pub fn seed_dropout(seed: u64) {
    // Consume the random initialization first, so that it can never overwrite `seed` later.
    RANDOM_BASE.call_once(|| {});
    BASE.store(seed, Ordering::Relaxed);
    CALLS.store(0, Ordering::Relaxed);
}

/// The seed of the next dropout call.
pub(crate) fn next_seed() -> u64 {
    RANDOM_BASE.call_once(|| BASE.store(RandomState::new().hash_one(0u64), Ordering::Relaxed));
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    let base = BASE.load(Ordering::Relaxed);
    mix(base.wrapping_add(call.wrapping_add(1).wrapping_mul(GAMMA)))
}

/// SplitMix64's output function (Steele, Lea and Flood, 2014): a bijection of `u64` whose
/// outputs for consecutive states look independent.
fn mix(state: u64) -> u64 {
    let z = (state ^ (state >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_streams_repeat_and_differ() {
        seed_dropout(7);
        let first: Vec<u64> = (0..4).map(|_| next_seed()).collect();
        seed_dropout(7);
        let again: Vec<u64> = (0..4).map(|_| next_seed()).collect();
        assert_eq!(first, again);
        assert!(first.windows(2).all(|pair| pair[0] != pair[1]), "{first:?}");
        seed_dropout(8);
        assert_ne!(next_seed(), first[0]);
    }
}
