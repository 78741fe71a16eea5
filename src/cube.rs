//! `FlashKernels` for `CubeBackend`: plans on the device's properties and launches the CubeCL
//! kernels on the backend's own buffers.
use burn_backend::{DType, Shape, TensorMetadata, tensor::{Device, FloatTensor}};
use burn_cubecl::{
    BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement,
    kernel::into_contiguous,
    ops::numeric::empty_device_dtype,
    tensor::CubeTensor,
};
use burn_flash_attn_kernels::{
    AttentionProblem, DeviceCaps, FlashError, FloatKind, Layout, Passes, Plan,
    backward::{self, BackwardTensors},
    forward::{self, ForwardTensors},
    plan::{BackwardPlan, ForwardPlan},
};

use crate::attention::{AttentionGrads, AttentionInputs, FlashKernels, SavedForward};

/// A new contiguous tensor on the device of `like`.
fn empty_like<R: CubeRuntime>(like: &CubeTensor<R>, shape: Shape, dtype: DType) -> CubeTensor<R> {
    empty_device_dtype(like.client.clone(), like.device.clone(), shape, dtype)
}

/// `tensor` as the plan's kernels read it: views whose rows are not contiguous 16-byte chunks
/// (a transposed last dimension, an odd offset) are copied to contiguous where the kernels load
/// chunks, an O(N) copy like the one FlashAttention-2 makes of such inputs; others as they are
/// (a stride-0 `expand` broadcast stays in place).
fn as_planned<R: CubeRuntime>(tensor: CubeTensor<R>, dtype: FloatKind, chunks: bool) -> CubeTensor<R> {
    if chunks && !Layout::of(dtype, &[&tensor.clone().binding()]).rows_chunked {
        into_contiguous(tensor)
    } else {
        tensor
    }
}

impl<R, F, I, BT> FlashKernels for CubeBackend<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    fn flash_plan(device: &Device<Self>, problem: &AttentionProblem, passes: Passes) -> Result<Plan, FlashError> {
        let client = R::client(device);
        burn_flash_attn_kernels::plan(problem, &DeviceCaps::of(&client), Layout::CHUNKED, &crate::tuning(), passes)
    }

    fn flash_forward(inputs: AttentionInputs<Self>, problem: AttentionProblem, plan: &ForwardPlan) -> SavedForward<Self> {
        let chunks = plan.needs_chunked_rows();
        let [q, k, v] = [inputs.query, inputs.key, inputs.value].map(|t| as_planned(t, problem.dtype, chunks));
        let [batch, heads, seq_q] = [problem.batch, problem.num_heads, problem.seq_q];
        let out = empty_like(&q, Shape::new([batch, heads, seq_q, problem.val_dim]), q.dtype());
        let lse = empty_like(&q, Shape::new([batch, heads, seq_q]), DType::F32);
        let client = q.client.clone();
        let tensors = ForwardTensors {
            q: q.binding(),
            k: k.binding(),
            v: v.binding(),
            mask: inputs.mask.map(CubeTensor::binding),
            bias: inputs.attn_bias.map(CubeTensor::binding),
            slopes: inputs.alibi_slopes.map(CubeTensor::binding),
            o: out.clone().binding(),
            lse: lse.clone().binding(),
        };
        // The router planned this problem on this device and the inputs were laid out for the
        // plan: an error here is a bug of this crate.
        forward::flash_attention_forward(&client, &problem, plan, tensors)
            .unwrap_or_else(|err| panic!("flash forward refused its own plan ({plan}): {err}"));
        SavedForward { out, lse }
    }

    fn flash_backward(
        inputs: AttentionInputs<Self>,
        saved: SavedForward<Self>,
        grad_out: FloatTensor<Self>,
        problem: AttentionProblem,
        plan: &BackwardPlan,
    ) -> AttentionGrads<Self> {
        let chunks = plan.needs_chunked_rows();
        let [dq, dk, dv] = [&inputs.query, &inputs.key, &inputs.value].map(|t| empty_like(t, t.shape(), t.dtype()));
        let [q, k, v, d_out] =
            [inputs.query, inputs.key, inputs.value, grad_out].map(|t| as_planned(t, problem.dtype, chunks));
        let client = q.client.clone();
        let tensors = BackwardTensors {
            q: q.binding(),
            k: k.binding(),
            v: v.binding(),
            o: saved.out.binding(),
            d_out: d_out.binding(),
            lse: saved.lse.binding(),
            mask: inputs.mask.map(CubeTensor::binding),
            bias: inputs.attn_bias.map(CubeTensor::binding),
            slopes: inputs.alibi_slopes.map(CubeTensor::binding),
            dq: dq.clone().binding(),
            dk: dk.clone().binding(),
            dv: dv.clone().binding(),
        };
        backward::flash_attention_backward(&client, &problem, plan, tensors)
            .unwrap_or_else(|err| panic!("flash backward refused its own plan ({plan}): {err}"));
        AttentionGrads { query: dq, key: dk, value: dv }
    }
}
