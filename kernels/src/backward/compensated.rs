//! Kahan-compensated f32 sums for the gradient accumulators.
//!
//! dK, dV and dQ are sums over a whole sequence (thousands of terms). A plain f32 running sum
//! rounds once per term; the tests hold the kernels to three times the error of a naive
//! implementation whose sums are exact before the final rounding, which plain f32 sums of a few
//! hundred terms already miss. The compensation keeps the error at about one rounding whatever
//! the length, for one extra register per element.
use cubecl::prelude::*;

/// This unit's accumulated elements `t`: `sum[t]` and the rounding error `compensation[t]` it
/// still owes (subtracted from the next term).
#[derive(CubeType)]
pub struct CompensatedSums {
    pub sum: Array<f32>,
    pub compensation: Array<f32>,
    /// 1.0, as a kernel argument. Shader compilers that may reassociate floats (Mesa does for
    /// SPIR-V without `NoContraction`) simplify `(next - sum) - y` to 0 and silently drop the
    /// compensation; `(next - sum * opaque_one) - y` cannot be simplified without knowing the
    /// value. Measured on lavapipe: Kahan without it returns the plain f32 sum.
    pub opaque_one: f32,
}

#[cube]
impl CompensatedSums {
    /// `len` zeroed sums (`len` comptime and every index unrolled: they stay in registers).
    pub fn new(opaque_one: f32, #[comptime] len: u32) -> CompensatedSums {
        let mut sum = Array::<f32>::new(comptime!(len as usize));
        let mut compensation = Array::<f32>::new(comptime!(len as usize));
        #[unroll]
        for t in 0..len {
            sum[t as usize] = 0.0f32;
            compensation[t as usize] = 0.0f32;
        }
        CompensatedSums { sum, compensation, opaque_one }
    }

    /// `sum[t] += value`, carrying the rounding error to the next addition.
    pub fn add(&mut self, t: u32, value: f32) {
        let index = t as usize;
        let corrected = value - self.compensation[index];
        let next = self.sum[index] + corrected;
        // (next - sum) is what the addition really added; minus `corrected`, its error.
        self.compensation[index] = (next - self.sum[index] * self.opaque_one) - corrected;
        self.sum[index] = next;
    }
}
