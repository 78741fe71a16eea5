//! f32 `exp` and `ln` accurate to about 1 ulp, for devices whose built-ins are looser.
//!
//! WGSL only promises `exp` to `3 + 2|x|` ulp (lavapipe measured 8 ulp at x = -12), and an
//! f32 output cannot be better than its inputs' probabilities: with f32 inputs the kernels use
//! these (a handful of FMAs each); with f16/bf16 inputs the built-ins are far below the
//! output's rounding and the kernels use them. Both are chosen at comptime through `precise`.
use cubecl::ir::FastMath;
use cubecl::prelude::*;

/// 1/ln 2: exp(x) = 2^(x / ln 2).
pub const LOG2_E: f32 = core::f32::consts::LOG2_E;
/// ln 2 split in a high part exact in 8 bits of mantissa and the low remainder (Cody-Waite),
/// so that `x - n * ln 2` is exact for |n| <= 2^16.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// Below this exp(x) is not a normal f32 (ln of f32::MIN_POSITIVE is -87.34): the result is 0.
const EXP_UNDERFLOW: f32 = -87.0;
/// sqrt(2): ln's mantissa is brought into [sqrt(1/2), sqrt(2)) so that |f| <= 0.172.
const SQRT_2: f32 = core::f32::consts::SQRT_2;
/// Exponent bias of f32 and the position of its exponent field.
const F32_EXPONENT_BIAS: i32 = 127;
const F32_MANTISSA_BITS: u32 = 23;
/// Mantissa field of an f32, and the bits of 1.0 (exponent 0).
const F32_MANTISSA_MASK: u32 = 0x007f_ffff;
const F32_ONE_BITS: u32 = 0x3f80_0000;

/// `exp(x)`, to about 1 ulp with `precise`, the device's fast built-in otherwise (CUDA / HIP
/// `__expf`: `ex2.approx` of `x log2 e`, about 2 ulp, far below f16/bf16 rounding).
/// Meant for x <= 0 (softmax arguments); results below the normal range are 0.
#[cube]
pub fn exp_f32(x: f32, #[comptime] precise: bool) -> f32 {
    if comptime!(precise) {
        let clamped = max(x, f32::new(EXP_UNDERFLOW));
        let n = f32::round(clamped * LOG2_E);
        // r = x - n ln 2 in [-0.347, 0.347], exactly (Cody-Waite).
        let r = fma(-n, f32::new(LN2_LO), fma(-n, f32::new(LN2_HI), clamped));
        // Taylor to degree 7: the remainder r^8 / 8! < 6e-9 relative, below half an ulp.
        let mut poly = f32::new(1.0 / 5040.0);
        poly = fma(poly, r, f32::new(1.0 / 720.0));
        poly = fma(poly, r, f32::new(1.0 / 120.0));
        poly = fma(poly, r, f32::new(1.0 / 24.0));
        poly = fma(poly, r, f32::new(1.0 / 6.0));
        poly = fma(poly, r, f32::new(0.5));
        poly = fma(poly, r, f32::new(1.0));
        poly = fma(poly, r, f32::new(1.0));
        // 2^n built from its bits: n is in [-126, 0], a normal exponent.
        let biased = u32::cast_from(i32::cast_from(n) + F32_EXPONENT_BIAS);
        let scale = f32::reinterpret(biased << F32_MANTISSA_BITS);
        select(x < f32::new(EXP_UNDERFLOW), f32::new(0.0), poly * scale)
    } else {
        fast_exp(x)
    }
}

/// The built-in exp with fast math allowed: the C++ dialects emit `__expf` (two instructions)
/// instead of the ~10 of an accurate `expf`. Arguments are finite (masked logits are the
/// finite MASKED_LOGIT, never -inf).
#[cube(fast_math = FastMath::ReducedPrecision | FastMath::NotNaN | FastMath::NotInf)]
fn fast_exp(x: f32) -> f32 {
    f32::exp(x)
}

/// `2^x` from the device's fast built-in, for softmax terms whose logits were scaled by
/// [`LOG2_E`] ahead (folded into the softmax scale: one fma per entry, as FA-2 does). The C++
/// dialects emit `__powf(2.0f, x)`, which nvcc lowers to `ex2.approx` alone: one multiply
/// per entry fewer than [`exp_f32`]'s `__expf` (`ex2.approx` of `x log2 e`). Only the mma
/// kernels use it (CUDA; on HIP `__powf` is the accurate `pow`, slower but as correct).
/// Arguments are finite or -inf (2^-inf = 0).
#[cube(fast_math = FastMath::ReducedPrecision | FastMath::NotNaN | FastMath::NotInf)]
pub fn exp2_fast(x: f32) -> f32 {
    f32::powf(f32::new(2.0), x)
}

/// `ln(x)` for a positive normal x, to about 1 ulp with `precise`, the built-in otherwise.
#[cube]
pub fn ln_f32(x: f32, #[comptime] precise: bool) -> f32 {
    if comptime!(precise) {
        let bits = u32::reinterpret(x);
        let mut exponent = i32::cast_from(bits >> F32_MANTISSA_BITS) - F32_EXPONENT_BIAS;
        let mut mantissa = f32::reinterpret((bits & F32_MANTISSA_MASK) | F32_ONE_BITS);
        if mantissa > f32::new(SQRT_2) {
            mantissa *= 0.5f32;
            exponent += 1;
        }
        // ln(m) = 2 atanh(f) = 2 (f + f^3/3 + f^5/5 + ...), f = (m - 1) / (m + 1), |f| <= 0.172.
        let f = (mantissa - 1.0f32) / (mantissa + 1.0f32);
        let f2 = f * f;
        let mut series = f32::new(1.0 / 11.0);
        series = fma(series, f2, f32::new(1.0 / 9.0));
        series = fma(series, f2, f32::new(1.0 / 7.0));
        series = fma(series, f2, f32::new(1.0 / 5.0));
        series = fma(series, f2, f32::new(1.0 / 3.0));
        let ln_mantissa = 2.0f32 * f * fma(series, f2, f32::new(1.0));
        let e = f32::cast_from(exponent);
        fma(e, f32::new(LN2_HI), fma(e, f32::new(LN2_LO), ln_mantissa))
    } else {
        f32::ln(x)
    }
}

/// Below this |x|, tanh comes from its Taylor series (to x^17: the next term is < 1e-9
/// relative at 0.55); above, from exp(-2|x|) with no cancellation in `1 - e`.
const TANH_SERIES_LIMIT: f32 = 0.55;
/// Taylor coefficients of tanh(x) / x in powers of x^2, highest first: x^16 ... x^0.
const TANH_SERIES: [f32; 9] = [
    6_404_582.0 / 10_854_718_875.0,
    -929_569.0 / 638_512_875.0,
    21_844.0 / 6_081_075.0,
    -1_382.0 / 155_925.0,
    62.0 / 2_835.0,
    -17.0 / 315.0,
    2.0 / 15.0,
    -1.0 / 3.0,
    1.0,
];

/// `tanh(x)`, to about 1 ulp with `precise`, the device's built-in otherwise (WGSL derives it
/// from sinh / cosh with no ulp bound).
#[cube]
#[allow(clippy::needless_range_loop)]
pub fn tanh_f32(x: f32, #[comptime] precise: bool) -> f32 {
    if comptime!(precise) {
        let magnitude = f32::abs(x);
        let x2 = x * x;
        let mut series = f32::new(TANH_SERIES[0]);
        #[unroll]
        for coefficient in 1..TANH_SERIES.len() {
            series = fma(series, x2, f32::new(comptime!(TANH_SERIES[coefficient])));
        }
        let small = x * series;
        // tanh|x| = (1 - e) / (1 + e), e = exp(-2|x|) <= 0.33; one Newton step corrects the
        // quotient's rounding.
        let e = exp_f32(-2.0f32 * magnitude, true);
        let numerator = 1.0f32 - e;
        let denominator = 1.0f32 + e;
        let quotient = numerator / denominator;
        let large = quotient + fma(-quotient, denominator, numerator) / denominator;
        let signed_large = select(x < 0.0f32, -large, large);
        select(magnitude < f32::new(TANH_SERIES_LIMIT), small, signed_large)
    } else {
        f32::tanh(x)
    }
}
