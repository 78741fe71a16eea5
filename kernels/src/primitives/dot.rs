//! Dot products of rows held in shared memory, in f32.
use cubecl::prelude::*;

/// Independent partial sums of a dot product. A sequential f32 sum of n products carries about
/// sqrt(n) ulps of its partial sums; four interleaved sums, added pairwise at the end, cut that
/// 2-4x (measured for head_dim 64..256: enough to stay within the FlashAttention rule for f32
/// outputs, which one sequential sum is not) and give the FMA pipeline independent chains.
const DOT_PARTIALS: u32 = 4;

/// How a dot product is summed.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum DotSum {
    /// Four interleaved f32 sums (f16/bf16 outputs round far above their error).
    Plain,
    /// f64: the product of two f32 is exact in f64 and the sum loses nothing an f32 result
    /// could show (f32 outputs on devices with f64).
    Wide,
    /// f32 with error-free transformations (Ogita-Rump-Oishi Dot2): as accurate as a sum in
    /// twice the working precision (f32 outputs on devices without f64 arithmetic).
    Compensated,
}

/// Accumulators [`row_dots`] may keep per unit for its partial sums (f32 registers).
const MAX_PARTIAL_SUMS: u32 = 32;
/// Rows of `b` from which the portable forward fuses its dots ([`row_dots`]). Two fused rows
/// save a quarter of the reads, and there the fused loop made LLVM's AMDGPU backend unroll it
/// into 156 spilled VGPRs (bf16, u8 mask, head_dim 127 on gfx942;
/// `scripts/hip_offline_check.sh`); from four rows on the saving is 3/8 or more and no
/// compiled variant spills.
const FUSED_DOTS_FROM: u32 = 4;

/// Whether `count` dots summed as `how` go through [`row_dots`] (else one [`row_dot`] each,
/// each followed by its own use: computing them all first made the same backend interleave
/// their unrolled loops and spill).
pub fn fuses_dots(how: DotSum, count: u32) -> bool {
    how == DotSum::Plain && count >= FUSED_DOTS_FROM
}

/// [`DotSum::Plain`] dots of row `a_start` of `a` with the `count` rows
/// `b_start + t * b_stride` of `b` (`t < count`), into `dots[..count]`: every element of the `a` row is read from
/// shared memory once for all `count` rows, `1 + count` reads per `count` FMAs instead of
/// `2 count` (the portable forward is bound by shared-memory reads). Each dot keeps
/// [`DOT_PARTIALS`] interleaved partial sums while `count * DOT_PARTIALS` fits in
/// [`MAX_PARTIAL_SUMS`] registers (then bit-identical to [`row_dot`]), fewer beyond. Worth it
/// from [`FUSED_DOTS_FROM`] rows: see [`fuses_dots`].
#[cube]
pub fn row_dots(
    a: &Slice<f32, ReadWrite>,
    a_start: usize,
    b: &Slice<f32, ReadWrite>,
    b_start: usize,
    #[comptime] b_stride: u32,
    #[comptime] len: u32,
    #[comptime] count: u32,
    dots: &mut Array<f32>,
) {
    let partials = comptime!(partial_sums_per_dot(count));
    let groups = comptime!(len / partials);
    let mut sums = Array::<f32>::new(comptime!((count * partials) as usize));
    #[unroll]
    for i in 0..comptime!(count * partials) {
        sums[i as usize] = 0.0f32;
    }
    for group in 0..groups {
        let d = (group * partials) as usize;
        #[unroll]
        for p in 0..partials {
            let x = a[a_start + d + p as usize];
            #[unroll]
            for t in 0..count {
                let at = (t * partials + p) as usize;
                let row = b_start + (t * b_stride) as usize;
                sums[at] = fma(x, b[row + d + p as usize], sums[at]);
            }
        }
    }
    // The last len % partials products go to the first partial sum.
    for d in comptime!(groups * partials)..len {
        let x = a[a_start + d as usize];
        #[unroll]
        for t in 0..count {
            let at = (t * partials) as usize;
            let row = b_start + (t * b_stride) as usize;
            sums[at] = fma(x, b[row + d as usize], sums[at]);
        }
    }
    #[unroll]
    for t in 0..count {
        dots[t as usize] = pairwise_sum(&sums, comptime!(t * partials), partials);
    }
}

/// Interleaved partial sums per dot of [`row_dots`]: [`DOT_PARTIALS`], halved until all of
/// them fit in [`MAX_PARTIAL_SUMS`] (at least 1).
fn partial_sums_per_dot(count: u32) -> u32 {
    let mut partials = DOT_PARTIALS;
    while partials > 1 && count * partials > MAX_PARTIAL_SUMS {
        partials /= 2;
    }
    partials
}

/// `sums[first..first + n]` added pairwise, `n` 1, 2 or 4: `(s0 + s1) + (s2 + s3)`.
#[cube]
fn pairwise_sum(sums: &Array<f32>, #[comptime] first: u32, #[comptime] n: u32) -> f32 {
    let at = first as usize;
    if comptime!(n == 4) {
        (sums[at] + sums[at + 1]) + (sums[at + 2] + sums[at + 3])
    } else if comptime!(n == 2) {
        sums[at] + sums[at + 1]
    } else {
        sums[at]
    }
}

/// `sum_d a[a_start + d] * b[b_start + d]` for `d < len`, summed as `how` says.
#[cube]
pub fn row_dot(
    a: &Slice<f32, ReadWrite>,
    a_start: usize,
    b: &Slice<f32, ReadWrite>,
    b_start: usize,
    #[comptime] len: u32,
    #[comptime] how: DotSum,
) -> f32 {
    match how {
        DotSum::Plain => row_dot_f32(a, a_start, b, b_start, len),
        DotSum::Wide => row_dot_f64(a, a_start, b, b_start, len),
        DotSum::Compensated => row_dot_compensated(a, a_start, b, b_start, len),
    }
}

/// Dot2: every product split exactly into `p + e` (`e = fma(x, y, -p)`), every addition into
/// `s + c` (TwoSum); the errors are summed aside and added once at the end.
#[cube]
fn row_dot_compensated(
    a: &Slice<f32, ReadWrite>,
    a_start: usize,
    b: &Slice<f32, ReadWrite>,
    b_start: usize,
    #[comptime] len: u32,
) -> f32 {
    let mut sum = f32::new(0.0);
    let mut error = f32::new(0.0);
    for d in 0..len {
        let (x, y) = (a[a_start + d as usize], b[b_start + d as usize]);
        let product = x * y;
        let product_error = fma(x, y, -product);
        let next = sum + product;
        let back = next - sum;
        let sum_error = (sum - (next - back)) + (product - back);
        sum = next;
        error += product_error + sum_error;
    }
    sum + error
}

#[cube]
fn row_dot_f64(
    a: &Slice<f32, ReadWrite>,
    a_start: usize,
    b: &Slice<f32, ReadWrite>,
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

/// The [`DotSum::Plain`] sum: [`row_dots`] of one row.
#[cube]
fn row_dot_f32(
    a: &Slice<f32, ReadWrite>,
    a_start: usize,
    b: &Slice<f32, ReadWrite>,
    b_start: usize,
    #[comptime] len: u32,
) -> f32 {
    let mut dot = Array::<f32>::new(1usize);
    row_dots(a, a_start, b, b_start, 0u32, len, 1u32, &mut dot);
    dot[0]
}
