//! The residual sub-layers shared by the encoder and decoder layers.
use burn::nn::transformer::PositionWiseFeedForward;
use burn::nn::{Dropout, LayerNorm};
use burn::tensor::{Tensor, backend::Backend};

/// Where a residual sub-layer normalizes: burn-nn's layers normalize with one norm before the
/// sub-layer when `norm_first` (pre-norm) and with another after the sum otherwise (post-norm).
pub(crate) struct Norms<'a, B: Backend> {
    pub(crate) norm_first: bool,
    pub(crate) pre: &'a LayerNorm<B>,
    pub(crate) post: &'a LayerNorm<B>,
}

/// One residual sub-layer `f` on the rows `x` `[batch, seq, d_model]`:
///
/// ```text
/// pre-norm:   x + dropout(f(pre(x)))
/// post-norm:  post(x + dropout(f(x)))
/// ```
pub(crate) fn residual<B: Backend>(
    x: Tensor<B, 3>,
    norms: Norms<'_, B>,
    dropout: &Dropout,
    f: impl FnOnce(Tensor<B, 3>) -> Tensor<B, 3>,
) -> Tensor<B, 3> {
    if norms.norm_first {
        x.clone() + dropout.forward(f(norms.pre.forward(x)))
    } else {
        norms.post.forward(x.clone() + dropout.forward(f(x)))
    }
}

/// The position-wise feed-forward network on the rows of `x` `[batch, seq, d_model]`, as one
/// `[1, batch · seq, d_model]` sequence (it acts row by row, so this is exact). Burn 0.21's
/// Fusion computes it wrong on `[batch > 1, 1, d_model]`, the shape of one decoding step (the
/// fused linear → activation → linear chain: errors of 0.25 on lavapipe, the family of
/// tracel-ai/burn#5122), which burn-nn's own encoder and decoder meet as well.
pub(crate) fn feed_forward<B: Backend>(pwff: &PositionWiseFeedForward<B>, x: Tensor<B, 3>) -> Tensor<B, 3> {
    let [batch, seq, d_model] = x.dims();
    pwff.forward(x.reshape([1, batch * seq, d_model])).reshape([batch, seq, d_model])
}
