//! The kernel side of [`flash_attention`](super::flash_attention): on a `Flash<..>` backend the
//! prepared call goes to the kernels through `B::attention` with the extended options offered
//! beside it (`crate::extension`: a per-thread slot that `Flash<I>::attention` takes), so the
//! caller needs nothing beyond `B: Backend`. Elsewhere, and where the kernels refuse a call whose
//! options allow it, the Burn-ops path computes the same semantics.
use burn::tensor::{DType, Tensor, TensorPrimitive, backend::Backend, ops::AttentionModuleOptions};
use burn_backend::tensor::FloatTensor;

use super::error::AttentionError;
use super::ops::attention_with_ops;
use super::prepare::Prepared;
use crate::attention::Extension;
use crate::extension::{Outcome, offer, outcome};
use crate::routing::log_once;

/// Whether `B` is a `Flash<..>` decorator: what `Flash<I>::name` answers.
pub fn is_flash<B: Backend>(device: &B::Device) -> bool {
    B::name(device).starts_with("flash<")
}

/// Runs a prepared call on the kernels when `B` is `Flash`, else with Burn ops.
pub(super) fn run<B: Backend>(
    query: Tensor<B, 4>,
    key: Tensor<B, 4>,
    value: Tensor<B, 4>,
    prepared: &Prepared<B>,
) -> Result<Tensor<B, 4>, AttentionError> {
    if !is_flash::<B>(&query.device()) {
        return Ok(attention_with_ops(query, key, value, prepared));
    }
    let inputs = prepared.allow_fallback.then(|| (query.clone(), key.clone(), value.clone()));
    match kernels(query, key, value, prepared) {
        Ok(out) => Ok(out),
        Err(reason) => match inputs {
            Some((query, key, value)) => {
                log_once(&format!(
                    "burn-flash-attn: flash_attention computes with Burn ops (allow_fallback): {reason}"
                ));
                Ok(attention_with_ops(query, key, value, prepared))
            }
            None => Err(AttentionError::Unsupported { reason }),
        },
    }
}

/// The kernels' result, or why they refused the call.
fn kernels<B: Backend>(
    query: Tensor<B, 4>,
    key: Tensor<B, 4>,
    value: Tensor<B, 4>,
    prepared: &Prepared<B>,
) -> Result<Tensor<B, 4>, String> {
    let extension: Extension<FloatTensor<B>> = Extension {
        quiet_softmax: prepared.quiet_softmax,
        window: prepared.window,
        // The kernels read f32 slopes (an O(num_heads) cast).
        alibi_slopes: prepared.alibi_slopes.clone().map(|s| s.cast(DType::F32).into_primitive().tensor()),
        dropout: prepared.dropout,
    };
    let options = AttentionModuleOptions {
        scale: Some(prepared.scale),
        softcap: prepared.softcap,
        is_causal: prepared.causal,
    };
    let device = query.device();
    offer(extension);
    let out = B::attention(
        query.into_primitive().tensor(),
        key.into_primitive().tensor(),
        value.into_primitive().tensor(),
        prepared.mask.clone().map(|m| m.into_primitive()),
        prepared.bias.clone().map(|b| b.into_primitive().tensor()),
        options,
    );
    match outcome() {
        Outcome::Done => Ok(Tensor::from_primitive(TensorPrimitive::Float(out))),
        Outcome::Refused(reason) => Err(reason),
        Outcome::NotTaken => Err(format!(
            "{} answers as Flash but its attention did not take the extended options (a layer \
             between does not forward attention)",
            B::name(&device)
        )),
    }
}
