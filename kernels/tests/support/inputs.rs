//! The seed policy and seeded random inputs.
//!
//! One policy for every suite: the seed of a test (or of a backward case) is a hash of its name,
//! so a run is reproducible and each test draws its own inputs; `FLASH_TEST_SEED=n` overrides
//! it for every test of the run. The seed is part of every failure message. Inputs are random
//! (never all zeros) and rounded to the storage type, so that the f64 oracle sees exactly what
//! the device sees.
use burn_flash_attn_kernels::problem::FloatKind;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::compare::precision;

/// The variable that overrides every seed of a run.
pub const SEED_VAR: &str = "FLASH_TEST_SEED";

/// The seed of the test or case `name`: `FLASH_TEST_SEED` if set, else the FNV-1a hash of the
/// name.
pub fn seed(name: &str) -> u64 {
    if let Ok(seed) = std::env::var(SEED_VAR) {
        return seed
            .parse()
            .unwrap_or_else(|_| panic!("{SEED_VAR} must be a u64, not {seed:?}"));
    }
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// The generator of `name` and its seed, printed so that a failure can be replayed.
pub fn rng(name: &str) -> (StdRng, u64) {
    let seed = seed(name);
    println!("{name}: seed {seed} (replay with {SEED_VAR}={seed})");
    (StdRng::seed_from_u64(seed), seed)
}

/// `len` values uniform in `[-amplitude, amplitude]`, never exactly 0 (magnitudes at least
/// `0.05 * amplitude`), rounded to `kind`.
pub fn random_values(rng: &mut StdRng, len: usize, amplitude: f64, kind: FloatKind) -> Vec<f64> {
    (0..len)
        .map(|_| {
            let magnitude = rng.random_range(0.05..=1.0) * amplitude;
            let value = if rng.random_bool(0.5) {
                magnitude
            } else {
                -magnitude
            };
            precision(kind).round(value)
        })
        .collect()
}

/// `len` values uniform in `[-1, 1)`, rounded to `kind`.
pub fn uniform_values(rng: &mut StdRng, len: usize, kind: FloatKind) -> Vec<f64> {
    let rounding = precision(kind);
    (0..len)
        .map(|_| rounding.round(rng.random_range(-1.0..1.0)))
        .collect()
}

/// A mask of `rows` query rows of `row_len` keys (`true` = masked): the rows `blind_row` names
/// fully masked, every other entry masked with probability `masked`.
pub fn random_mask(
    rng: &mut StdRng,
    rows: usize,
    row_len: usize,
    masked: f64,
    blind_row: impl Fn(usize) -> bool,
) -> Vec<bool> {
    (0..rows * row_len)
        .map(|idx| blind_row(idx / row_len) || rng.random_bool(masked))
        .collect()
}
