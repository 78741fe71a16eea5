//! The two helper traits behind `Flash<I>::attention`.
//!
//! - [`FlashKernels`]: backends that own device buffers (`CubeBackend`) or can schedule a custom
//!   op over them (`Fusion`) implement the forward (with LSE) and the backward.
//! - [`FlashAttention`]: what the decorator calls. Blanket for every `FlashKernels` backend
//!   (inference: forward only), and implemented for `Autodiff<B, C>` in `autodiff.rs` (training:
//!   a backward node that calls the backward kernels).
//!
//! A call comes either from Burn's `module::attention` (no [`Extension`]: a problem the kernels
//! refuse runs Burn's `attention_fallback`) or from [`crate::flash_attention`] (an `Extension`
//! with the options `module::attention` cannot carry: a refusal is returned, nothing runs).
use burn_backend::{
    Backend,
    ops::{AttentionModuleOptions, attention::attention_fallback},
    tensor::{BoolTensor, Device, FloatTensor},
};
use burn_flash_attn_kernels::plan::{BackwardPlan, ForwardPlan};
use burn_flash_attn_kernels::{AttentionProblem, Dropout, FlashError, Passes, Plan, Window};

use crate::routing::{AttentionCall, Route, route};

/// The tensors of one attention call on backend `B` (Burn's names).
#[derive(Debug, Clone)]
pub struct AttentionInputs<B: Backend> {
    pub query: FloatTensor<B>,
    pub key: FloatTensor<B>,
    pub value: FloatTensor<B>,
    pub mask: Option<BoolTensor<B>>,
    pub attn_bias: Option<FloatTensor<B>>,
    /// ALiBi slopes, f32 `[num_heads]` (a constant).
    pub alibi_slopes: Option<FloatTensor<B>>,
}

/// What [`crate::flash_attention`] asks of the kernels beyond `module::attention`'s options
/// (`T` is a float tensor primitive). Grouped-query attention needs nothing here: it is in the
/// shapes of key and value.
#[derive(Debug, Clone)]
pub struct Extension<T> {
    /// `exp(s_j) / (1 + sum_k exp(s_k))`.
    pub quiet_softmax: bool,
    pub window: Option<Window>,
    /// f32 `[num_heads]`.
    pub alibi_slopes: Option<T>,
    /// Dropout on the probabilities (the kernels regenerate its mask from the seed).
    pub dropout: Option<Dropout>,
}

impl<T> Extension<T> {
    /// The same extension with its slopes converted (for example to the inner backend's).
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Extension<U> {
        Extension {
            quiet_softmax: self.quiet_softmax,
            window: self.window,
            alibi_slopes: self.alibi_slopes.map(f),
            dropout: self.dropout,
        }
    }
}

/// Why the kernels cannot run a call of [`crate::flash_attention`] (the router's reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

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
    /// The attention of `module::attention` (`extension: None`: never refused, Burn's
    /// `attention_fallback` where the kernels cannot run it) or of [`crate::flash_attention`]
    /// (`Some`: refused with the router's reason where the kernels cannot run it).
    #[allow(clippy::too_many_arguments)]
    fn flash_attention(
        query: FloatTensor<Self>,
        key: FloatTensor<Self>,
        value: FloatTensor<Self>,
        mask: Option<BoolTensor<Self>>,
        attn_bias: Option<FloatTensor<Self>>,
        options: AttentionModuleOptions,
        extension: Option<Extension<FloatTensor<Self>>>,
    ) -> Result<FloatTensor<Self>, Refused>;
}

impl<B: FlashKernels> FlashAttention for B {
    fn flash_attention(
        query: FloatTensor<Self>,
        key: FloatTensor<Self>,
        value: FloatTensor<Self>,
        mask: Option<BoolTensor<Self>>,
        attn_bias: Option<FloatTensor<Self>>,
        options: AttentionModuleOptions,
        extension: Option<Extension<FloatTensor<Self>>>,
    ) -> Result<FloatTensor<Self>, Refused> {
        let device = B::float_device(&query);
        let call = AttentionCall {
            query: &query,
            key: &key,
            value: &value,
            mask: mask.as_ref(),
            attn_bias: attn_bias.as_ref(),
            options: &options,
            extension: extension.as_ref(),
            bias_requires_grad: false,
        };
        match route(&call, Passes::Forward, |problem, passes| B::flash_plan(&device, problem, passes)) {
            Route::Kernel { problem, plan } => {
                let alibi_slopes = extension.and_then(|e| e.alibi_slopes);
                let inputs = AttentionInputs { query, key, value, mask, attn_bias, alibi_slopes };
                Ok(B::flash_forward(inputs, problem, &plan.forward).out)
            }
            Route::Fallback { reason } if extension.is_some() => Err(Refused(reason)),
            Route::Fallback { .. } => Ok(attention_fallback::<B>(query, key, value, mask, attn_bias, options)),
        }
    }
}
