//! The FlashAttention tolerance rule, used by every numeric test of this workspace:
//!
//! `max|out - ref| <= factor * max|plain - ref| + atol`
//!
//! `ref` is the f64 oracle, `plain` the naive implementation in the test dtype, `factor` 2 for
//! outputs and 3 for gradients, `atol` a rounding floor of the test dtype.
use crate::reference::Precision;

/// Factor for forward outputs (FlashAttention's test suite).
pub const OUTPUT_FACTOR: f64 = 2.0;
/// Factor for gradients (FlashAttention's test suite).
pub const GRADIENT_FACTOR: f64 = 3.0;

/// A rounding floor: a few units in the last place of a value of magnitude about 1.
pub fn rounding_floor(precision: Precision) -> f64 {
    // 4 ulps at 1.0: the kernel and the plain implementation may round the same value apart.
    const ULPS: f64 = 4.0;
    let eps = match precision {
        Precision::F64 => f64::EPSILON,
        Precision::F32 => f32::EPSILON as f64,
        Precision::F16 => half::f16::EPSILON.to_f64(),
        Precision::BF16 => half::bf16::EPSILON.to_f64(),
    };
    ULPS * eps
}

/// The worst coordinate of `|a - b|`: (index, a, b). NaN counts as infinitely wrong.
pub fn worst(a: &[f64], b: &[f64]) -> (usize, f64, f64, f64) {
    assert_eq!(a.len(), b.len(), "compared tensors differ in length");
    let mut out = (0, 0.0, a.first().copied().unwrap_or(0.0), b.first().copied().unwrap_or(0.0));
    for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
        let err = if x.is_nan() || y.is_nan() { f64::INFINITY } else { (x - y).abs() };
        if err > out.1 {
            out = (i, err, x, y);
        }
    }
    (out.0, out.1, out.2, out.3)
}

/// Checks `out` against `reference` with the rule; on failure the message gives both errors and
/// the worst coordinate.
pub fn check(
    name: &str,
    out: &[f64],
    plain: &[f64],
    reference: &[f64],
    factor: f64,
    precision: Precision,
) -> Result<(), String> {
    let (at, err, got, want) = worst(out, reference);
    let (_, plain_err, _, _) = worst(plain, reference);
    let bound = factor * plain_err + rounding_floor(precision);
    if err <= bound {
        Ok(())
    } else {
        Err(format!(
            "{name}: max|out-ref| = {err:.3e} > {factor} * max|plain-ref| ({plain_err:.3e}) + atol = {bound:.3e}; \
             worst at flat index {at}: got {got}, want {want}"
        ))
    }
}
