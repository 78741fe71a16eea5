//! Grouped-query attention's dK and dV: the dK/dV kernels write one gradient per query head
//! into `[batch, num_heads, seq_kv, dim]` scratch, and [`sum_head_groups`] adds each group of
//! `num_heads / num_kv_heads` heads into the `[batch, num_kv_heads, seq_kv, dim]` gradient, in
//! f32, in head order: deterministic, no atomics (FlashAttention-2 does the same for its MQA /
//! GQA backward). The scratch costs `num_heads * seq_kv * dim` elements: O(N).
use cubecl::prelude::*;

/// Threads per cube of the sum.
const UNITS: u32 = 256;

/// Allocates the per-query-head scratch for a `[batch, num_kv_heads, seq_kv, dim]` gradient
/// `like`: contiguous `[batch, num_heads, seq_kv, dim]`, elements of `elem_size` bytes.
pub(crate) fn expanded_gradient<R: Runtime>(
    client: &ComputeClient<R>,
    like: &TensorBinding<R>,
    num_heads: usize,
    elem_size: usize,
) -> TensorBinding<R> {
    let [batch, _, seq, dim]: [usize; 4] = like.shape.as_ref().try_into().expect("rank 4, checked");
    let shape = [batch, num_heads, seq, dim];
    let strides = [num_heads * seq * dim, seq * dim, dim, 1];
    // SAFETY: a contiguous buffer of exactly the shape's element count.
    unsafe {
        TensorBinding::<R>::from_raw_parts(
            client.empty(shape.iter().product::<usize>() * elem_size),
            strides.into(),
            shape.into(),
        )
    }
}

/// `out[b, g, s, d] = sum over h in group g of expanded[b, h, s, d]`.
pub(crate) fn launch_sum_head_groups<R: Runtime, F: Float>(
    client: &ComputeClient<R>,
    expanded: TensorBinding<R>,
    out: TensorBinding<R>,
) {
    let total: usize = out.shape.iter().product();
    let cubes = total.div_ceil(UNITS as usize) as u32;
    // SAFETY: `out` has the shape of `expanded` with num_heads divided by the group (checked by
    // the backward launcher); every access is bounds-checked against `total`.
    unsafe {
        sum_head_groups::launch_unchecked::<F, R>(
            client,
            CubeCount::Static(cubes, 1, 1),
            CubeDim::new_1d(UNITS),
            expanded.into_tensor_arg(),
            out.into_tensor_arg(),
        )
    }
}

#[cube(launch_unchecked)]
fn sum_head_groups<F: Float>(expanded: &Tensor<F>, out: &mut Tensor<F>) {
    let index = (CUBE_POS_X * UNITS + UNIT_POS) as usize;
    let (heads, seq, dim) = (out.shape(1), out.shape(2), out.shape(3));
    if index < heads * seq * dim * out.shape(0) {
        let d = index % dim;
        let s = (index / dim) % seq;
        let g = (index / (dim * seq)) % heads;
        let b = index / (dim * seq * heads);
        let group = expanded.shape(1) / heads;
        let mut sum = 0.0f32;
        for h in g * group..(g + 1) * group {
            let at = b * expanded.stride(0)
                + h * expanded.stride(1)
                + s * expanded.stride(2)
                + d * expanded.stride(3);
            sum += f32::cast_from(expanded[at]);
        }
        out[b * out.stride(0) + g * out.stride(1) + s * out.stride(2) + d * out.stride(3)] =
            F::cast_from(sum);
    }
}
