//! `FlashKernels` for `CubeBackend`: launches the CubeCL kernels on the backend's own buffers.
use burn_backend::{DType, Shape, TensorMetadata, tensor::{Device, FloatTensor}};
use burn_cubecl::{
    BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement, ops::numeric::empty_device_dtype,
    tensor::CubeTensor,
};
use burn_flash_attn_kernels::{
    AttentionProblem, FlashError,
    backward::{self, BackwardKernel, BackwardTensors},
    forward::{self, ForwardTensors},
};

use crate::attention::{AttentionGrads, AttentionInputs, FlashKernels, SavedForward};

/// A new contiguous tensor on the device of `like`.
fn empty_like<R: CubeRuntime>(like: &CubeTensor<R>, shape: Shape, dtype: DType) -> CubeTensor<R> {
    empty_device_dtype(like.client.clone(), like.device.clone(), shape, dtype)
}

impl<R, F, I, BT> FlashKernels for CubeBackend<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    fn flash_support(device: &Device<Self>, problem: &AttentionProblem) -> Result<String, FlashError> {
        let client = R::client(device);
        let forward = forward::plan(&client, problem)?;
        let props = client.properties();
        let dkdv = backward::plan_backward(props, problem, BackwardKernel::KeyValue)?;
        let dq = backward::plan_backward(props, problem, BackwardKernel::Query)?;
        Ok(format!("forward: {}; dk/dv: {}; dq: {}", forward.reason, dkdv.reason, dq.reason))
    }

    fn flash_forward(inputs: AttentionInputs<Self>, problem: AttentionProblem) -> SavedForward<Self> {
        let q = &inputs.query;
        let [batch, heads, seq_q] = [problem.batch, problem.num_heads, problem.seq_q];
        let out = empty_like(q, Shape::new([batch, heads, seq_q, problem.val_dim]), q.dtype());
        let lse = empty_like(q, Shape::new([batch, heads, seq_q]), DType::F32);
        let client = q.client.clone();
        let tensors = ForwardTensors {
            q: inputs.query.binding(),
            k: inputs.key.binding(),
            v: inputs.value.binding(),
            mask: inputs.mask.map(CubeTensor::binding),
            bias: inputs.attn_bias.map(CubeTensor::binding),
            o: out.clone().binding(),
            lse: lse.clone().binding(),
        };
        // `flash_support` ran the same planning: an error here is a bug of this crate.
        forward::flash_attention_forward(&client, &problem, tensors)
            .unwrap_or_else(|err| panic!("flash forward failed after planning succeeded: {err}"));
        SavedForward { out, lse }
    }

    fn flash_backward(
        inputs: AttentionInputs<Self>,
        saved: SavedForward<Self>,
        grad_out: FloatTensor<Self>,
        problem: AttentionProblem,
    ) -> AttentionGrads<Self> {
        let [dq, dk, dv] = [&inputs.query, &inputs.key, &inputs.value].map(|t| empty_like(t, t.shape(), t.dtype()));
        let client = inputs.query.client.clone();
        let tensors = BackwardTensors {
            q: inputs.query.binding(),
            k: inputs.key.binding(),
            v: inputs.value.binding(),
            o: saved.out.binding(),
            d_out: grad_out.binding(),
            lse: saved.lse.binding(),
            mask: inputs.mask.map(CubeTensor::binding),
            bias: inputs.attn_bias.map(CubeTensor::binding),
            dq: dq.clone().binding(),
            dk: dk.clone().binding(),
            dv: dv.clone().binding(),
        };
        backward::flash_attention_backward(&client, &problem, tensors)
            .unwrap_or_else(|err| panic!("flash backward failed after planning succeeded: {err}"));
        AttentionGrads { query: dq, key: dk, value: dv }
    }
}
