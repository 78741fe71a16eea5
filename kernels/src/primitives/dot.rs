//! Dot products of rows held in shared memory, in f32.
use cubecl::prelude::*;

/// Independent partial sums of a dot product. A sequential f32 sum of n products carries about
/// sqrt(n) ulps of its partial sums; four interleaved sums, added pairwise at the end, cut that
/// 2-4x (measured for head_dim 64..256: enough to stay within the FlashAttention rule for f32
/// outputs, which one sequential sum is not) and give the FMA pipeline independent chains.
const DOT_PARTIALS: u32 = 4;

/// `sum_d a[a_start + d] * b[b_start + d]` for `d < len`. With `wide`, in f64: the product
/// of two f32 is exact in f64 and the sum loses nothing an f32 result could show (for f32
/// outputs, whose rounding the f32 sum's error would otherwise approach).
#[cube]
pub fn row_dot(
    a: &SharedMemory<f32>,
    a_start: usize,
    b: &SharedMemory<f32>,
    b_start: usize,
    #[comptime] len: u32,
    #[comptime] wide: bool,
) -> f32 {
    if comptime!(wide) {
        row_dot_f64(a, a_start, b, b_start, len)
    } else {
        row_dot_f32(a, a_start, b, b_start, len)
    }
}

#[cube]
fn row_dot_f64(
    a: &SharedMemory<f32>,
    a_start: usize,
    b: &SharedMemory<f32>,
    b_start: usize,
    #[comptime] len: u32,
) -> f32 {
    let mut sum = f64::new(0.0);
    for d in 0..len {
        let at = d as usize;
        sum = fma(
            f64::cast_from(a[a_start + at]),
            f64::cast_from(b[b_start + at]),
            sum,
        );
    }
    f32::cast_from(sum)
}

#[cube]
fn row_dot_f32(
    a: &SharedMemory<f32>,
    a_start: usize,
    b: &SharedMemory<f32>,
    b_start: usize,
    #[comptime] len: u32,
) -> f32 {
    let groups = comptime!(len / DOT_PARTIALS);
    let mut sum0 = f32::new(0.0);
    let mut sum1 = f32::new(0.0);
    let mut sum2 = f32::new(0.0);
    let mut sum3 = f32::new(0.0);
    for group in 0..groups {
        let d = (group * DOT_PARTIALS) as usize;
        sum0 = fma(a[a_start + d], b[b_start + d], sum0);
        sum1 = fma(a[a_start + d + 1], b[b_start + d + 1], sum1);
        sum2 = fma(a[a_start + d + 2], b[b_start + d + 2], sum2);
        sum3 = fma(a[a_start + d + 3], b[b_start + d + 3], sum3);
    }
    // The last len % DOT_PARTIALS products.
    for d in comptime!(groups * DOT_PARTIALS)..len {
        sum0 = fma(a[a_start + d as usize], b[b_start + d as usize], sum0);
    }
    (sum0 + sum1) + (sum2 + sum3)
}
