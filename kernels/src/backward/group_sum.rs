//! Grouped-query attention's dK and dV: the dK/dV kernels write one gradient per query head
//! into `[batch, num_heads, seq_kv, dim]` scratch, and [`sum_head_groups`] adds each group of
//! `num_heads / num_kv_heads` heads into the `[batch, num_kv_heads, seq_kv, dim]` gradient, in
//! f32, in head order: deterministic, no atomics (FlashAttention-2 does the same for its MQA /
//! GQA backward). The scratch costs `num_heads * seq_kv * dim` elements: O(N).
use cubecl::prelude::*;

use super::contiguous_scratch;
use super::elementwise::{UNITS, cube_count, element_index, offset, split_index};

/// Allocates the per-query-head scratch for a `[batch, num_kv_heads, seq_kv, dim]` gradient
/// `like`: contiguous `[batch, num_heads, seq_kv, dim]`, elements of `elem_size` bytes.
pub(crate) fn expanded_gradient<R: Runtime>(
    client: &ComputeClient<R>,
    like: &TensorBinding<R>,
    num_heads: usize,
    elem_size: usize,
) -> TensorBinding<R> {
    let [batch, _, seq, dim]: [usize; 4] = like.shape.as_ref().try_into().expect("rank 4, checked");
    contiguous_scratch(client, &[batch, num_heads, seq, dim], elem_size)
}

/// `out[b, g, s, d] = sum over h in group g of expanded[b, h, s, d]`.
pub(crate) fn launch_sum_head_groups<R: Runtime, F: Float>(
    client: &ComputeClient<R>,
    expanded: TensorBinding<R>,
    out: TensorBinding<R>,
) {
    let total: usize = out.shape.iter().product();
    // SAFETY: `out` has the shape of `expanded` with num_heads divided by the group (checked by
    // the backward launcher); every access is bounds-checked against `total`.
    unsafe {
        sum_head_groups::launch_unchecked::<F, R>(
            client,
            cube_count(total),
            CubeDim::new_1d(UNITS),
            expanded.into_tensor_arg(),
            out.into_tensor_arg(),
        )
    }
}

#[cube(launch_unchecked)]
fn sum_head_groups<F: Float>(expanded: &Tensor<F>, out: &mut Tensor<F>) {
    let index = element_index();
    if index < out.shape(0) * out.shape(1) * out.shape(2) * out.shape(3) {
        let (b, g, s, d) = split_index(index, out);
        let group = expanded.shape(1) / out.shape(1);
        let mut sum = 0.0f32;
        for h in g * group..(g + 1) * group {
            sum += f32::cast_from(expanded[offset(expanded, b, h, s, d)]);
        }
        out[offset(out, b, g, s, d)] = F::cast_from(sum);
    }
}
