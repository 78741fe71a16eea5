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
use burn_flash_attn_kernels::{AttentionProblem, FlashError};

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
    /// Whether the device can run `problem` on the kernels, and on which path (with why).
    /// Decided from metadata before anything is scheduled: a fusion custom op cannot fall back
    /// once it is in the stream.
    fn flash_support(device: &Device<Self>, problem: &AttentionProblem) -> Result<String, FlashError>;

    /// Forward pass, for a problem `flash_support` accepted.
    fn flash_forward(inputs: AttentionInputs<Self>, problem: AttentionProblem) -> SavedForward<Self>;

    /// Backward pass: gradients of `sum(out * grad_out)` for a problem `flash_support` accepted.
    fn flash_backward(
        inputs: AttentionInputs<Self>,
        saved: SavedForward<Self>,
        grad_out: FloatTensor<Self>,
        problem: AttentionProblem,
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
        match route(&call, |problem| B::flash_support(&device, problem)) {
            Route::Kernel { problem, .. } => {
                let inputs = AttentionInputs { query, key, value, mask, attn_bias };
                B::flash_forward(inputs, problem).out
            }
            Route::Fallback { .. } => {
                attention_fallback::<B>(query, key, value, mask, attn_bias, options)
            }
        }
    }
}
