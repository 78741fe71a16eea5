//! The two helper traits behind `Flash<I>::attention`.
//!
//! - [`FlashKernels`]: backends that own device buffers (`CubeBackend`) or can schedule a custom
//!   op over them (`Fusion`) implement the forward (with LSE) and the backward.
//! - [`FlashAttention`]: what the decorator calls. Blanket for every `FlashKernels` backend
//!   (inference: forward only), and implemented for `Autodiff<B, C>` in `autodiff.rs` (training:
//!   a backward node that calls the backward kernels).
use burn_backend::{
    Backend,
    ops::{AttentionModuleOptions, attention::attention_fallback},
    tensor::{BoolTensor, Device, FloatTensor},
};
use burn_flash_attn_kernels::plan::{BackwardPlan, ForwardPlan};
use burn_flash_attn_kernels::{AttentionProblem, FlashError, Passes, Plan};

use crate::routing::{AttentionCall, Route, route};

/// The tensors of one attention call on backend `B` (Burn's names).
#[derive(Debug, Clone)]
pub struct AttentionInputs<B: Backend> {
    pub query: FloatTensor<B>,
    pub key: FloatTensor<B>,
    pub value: FloatTensor<B>,
    pub mask: Option<BoolTensor<B>>,
    pub attn_bias: Option<FloatTensor<B>>,
}

/// What the backward kernels need besides the forward inputs.
#[derive(Debug, Clone)]
pub struct SavedForward<B: Backend> {
    /// The attention output `[batch, heads, seq_q, val_dim]`.
    pub out: FloatTensor<B>,
    /// Row log-sum-exp of the scores, f32 `[batch, heads, seq_q]`.
    pub lse: FloatTensor<B>,
}

/// Gradients with respect to query, key and value.
#[derive(Debug, Clone)]
pub struct AttentionGrads<B: Backend> {
    pub query: FloatTensor<B>,
    pub key: FloatTensor<B>,
    pub value: FloatTensor<B>,
}

/// Kernel entry points of a backend.
pub trait FlashKernels: Backend {
    /// The plan of `passes` of `problem` on `device` (paths, blocks and why), with the
    /// process's [`crate::tuning`]. Made from metadata before anything is scheduled: a fusion
    /// custom op cannot fall back once it is in the stream. The plan assumes inputs whose rows
    /// are contiguous 16-byte chunks; the launches copy a view that is not (a transposed last
    /// dimension, an odd offset) to contiguous first where the plan's kernels need it.
    fn flash_plan(device: &Device<Self>, problem: &AttentionProblem, passes: Passes) -> Result<Plan, FlashError>;

    /// Forward pass, as `plan` (from [`FlashKernels::flash_plan`] for `problem`) says.
    fn flash_forward(inputs: AttentionInputs<Self>, problem: AttentionProblem, plan: &ForwardPlan) -> SavedForward<Self>;

    /// Backward pass: gradients of `sum(out * grad_out)`, as `plan` says.
    fn flash_backward(
        inputs: AttentionInputs<Self>,
        saved: SavedForward<Self>,
        grad_out: FloatTensor<Self>,
        problem: AttentionProblem,
        plan: &BackwardPlan,
    ) -> AttentionGrads<Self>;
}

/// What `Flash<I>::attention` calls.
pub trait FlashAttention: Backend {
    fn flash_attention(
        query: FloatTensor<Self>,
        key: FloatTensor<Self>,
        value: FloatTensor<Self>,
        mask: Option<BoolTensor<Self>>,
        attn_bias: Option<FloatTensor<Self>>,
        options: AttentionModuleOptions,
    ) -> FloatTensor<Self>;
}

impl<B: FlashKernels> FlashAttention for B {
    fn flash_attention(
        query: FloatTensor<Self>,
        key: FloatTensor<Self>,
        value: FloatTensor<Self>,
        mask: Option<BoolTensor<Self>>,
        attn_bias: Option<FloatTensor<Self>>,
        options: AttentionModuleOptions,
    ) -> FloatTensor<Self> {
        let device = B::float_device(&query);
        let call = AttentionCall {
            query: &query,
            key: &key,
            value: &value,
            mask: mask.as_ref(),
            attn_bias: attn_bias.as_ref(),
            options: &options,
            bias_requires_grad: false,
        };
        match route(&call, Passes::Forward, |problem, passes| B::flash_plan(&device, problem, passes)) {
            Route::Kernel { problem, plan } => {
                let inputs = AttentionInputs { query, key, value, mask, attn_bias };
                B::flash_forward(inputs, problem, &plan.forward).out
            }
            Route::Fallback { .. } => {
                attention_fallback::<B>(query, key, value, mask, attn_bias, options)
            }
        }
    }
}
