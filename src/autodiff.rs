//! Training: `FlashAttention` for `Autodiff<B, C>` registers ONE backward node through
//! burn-autodiff's public API. The node keeps the output and the row log-sum-exp (O(N) memory),
//! checkpoints query, key and value (a checkpointing strategy may recompute them), and calls the
//! backward kernels. Inside the node every tensor is `B`'s (never `Flash<..>`'s): the gradient
//! container is keyed by backend type.
use burn_autodiff::{
    Autodiff, NodeId,
    checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
    grads::Gradients,
    ops::{Backward, Ops, OpsKind},
};
use burn::tensor::{Tensor, TensorPrimitive};
use burn_backend::{
    ops::AttentionModuleOptions,
    tensor::{BoolTensor, FloatTensor},
};
use burn_flash_attn_kernels::plan::BackwardPlan;
use burn_flash_attn_kernels::{AttentionProblem, Passes};

use crate::api::ops::module_attention_with_ops;
use crate::attention::{AttentionInputs, Extension, FlashAttention, FlashKernels, Refused, SavedForward};
use crate::routing::{AttentionCall, Route, route};

#[derive(Debug)]
struct FlashAttentionBackward;

/// What the backward needs: node ids of q, k, v (retrieved through the checkpointer), the
/// constants (mask, bias) and the forward's O and LSE.
#[derive(Debug, Clone)]
struct FlashAttentionState<B: FlashKernels> {
    query: NodeId,
    key: NodeId,
    value: NodeId,
    mask: Option<BoolTensor<B>>,
    attn_bias: Option<FloatTensor<B>>,
    alibi_slopes: Option<FloatTensor<B>>,
    saved: SavedForward<B>,
    problem: AttentionProblem,
    /// The backward half of the plan the router made before the forward ran.
    plan: BackwardPlan,
}

impl<B: FlashKernels> Backward<B, 3> for FlashAttentionBackward {
    type State = FlashAttentionState<B>;

    fn backward(
        self,
        ops: Ops<Self::State, 3>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        let [node_query, node_key, node_value] = ops.parents;
        let grad_out = grads.consume::<B>(&ops.node);
        let state = ops.state;
        let inputs = AttentionInputs {
            query: checkpointer.retrieve_node_output(state.query),
            key: checkpointer.retrieve_node_output(state.key),
            value: checkpointer.retrieve_node_output(state.value),
            mask: state.mask,
            attn_bias: state.attn_bias,
            alibi_slopes: state.alibi_slopes,
        };
        let d = B::flash_backward(inputs, state.saved, grad_out, state.problem, &state.plan);
        for (node, grad) in [(node_query, d.query), (node_key, d.key), (node_value, d.value)] {
            if let Some(node) = node {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}

impl<B: FlashKernels, C: CheckpointStrategy> FlashAttention for Autodiff<B, C> {
    fn flash_attention(
        query: FloatTensor<Self>,
        key: FloatTensor<Self>,
        value: FloatTensor<Self>,
        mask: Option<BoolTensor<Self>>,
        attn_bias: Option<FloatTensor<Self>>,
        options: AttentionModuleOptions,
        extension: Option<Extension<FloatTensor<Self>>>,
    ) -> Result<FloatTensor<Self>, Refused> {
        let device = B::float_device(&query.primitive);
        // The slopes are constants: the inner backend's tensor, no node.
        let extension = extension.map(|e| e.map(|slopes| slopes.primitive));
        let call = AttentionCall {
            query: &query.primitive,
            key: &key.primitive,
            value: &value.primitive,
            mask: mask.as_ref(),
            attn_bias: attn_bias.as_ref().map(|b| &b.primitive),
            options: &options,
            extension: extension.as_ref(),
            bias_requires_grad: attn_bias.as_ref().is_some_and(|b| !b.node.requirement.is_none()),
        };
        // Training plans the backward before the forward runs; a call no gradient flows
        // through (all of q, k, v constants) plans the forward alone.
        let tracked = [&query, &key, &value].iter().any(|t| !t.node.requirement.is_none());
        let passes = if tracked { Passes::ForwardBackward } else { Passes::Forward };
        let (problem, plan) = match route(&call, passes, |p, passes| B::flash_plan(&device, p, passes)) {
            Route::Kernel { problem, plan } => (problem, plan),
            Route::Fallback { reason } if extension.is_some() => return Err(Refused(reason)),
            Route::Fallback { .. } => {
                // Burn's `attention_fallback` semantics, without its argmax on fully masked rows.
                let float = |x| Tensor::<Self, 4>::from_primitive(TensorPrimitive::Float(x));
                let out = module_attention_with_ops(
                    float(query),
                    float(key),
                    float(value),
                    mask.map(Tensor::from_primitive),
                    attn_bias.map(float),
                    options,
                );
                return Ok(out.into_primitive().tensor());
            }
        };
        let bias = attn_bias.map(|b| b.primitive);
        let slopes = extension.and_then(|e| e.alibi_slopes);

        match FlashAttentionBackward
            .prepare::<C>([query.node.clone(), key.node.clone(), value.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let ids = [prep.checkpoint(&query), prep.checkpoint(&key), prep.checkpoint(&value)];
                let inputs = AttentionInputs {
                    query: query.primitive,
                    key: key.primitive,
                    value: value.primitive,
                    mask: mask.clone(),
                    attn_bias: bias.clone(),
                    alibi_slopes: slopes.clone(),
                };
                let saved = B::flash_forward(inputs, problem, &plan.forward);
                let out = saved.out.clone();
                let [query, key, value] = ids;
                let plan = plan.backward.expect("a tracked call is planned with its backward");
                let state = FlashAttentionState {
                    query,
                    key,
                    value,
                    mask,
                    attn_bias: bias,
                    alibi_slopes: slopes,
                    saved,
                    problem,
                    plan,
                };
                Ok(prep.finish(state, out))
            }
            OpsKind::UnTracked(prep) => {
                let inputs = AttentionInputs {
                    query: query.primitive,
                    key: key.primitive,
                    value: value.primitive,
                    mask,
                    attn_bias: bias,
                    alibi_slopes: slopes,
                };
                Ok(prep.finish(B::flash_forward(inputs, problem, &plan.forward).out))
            }
        }
    }
}
