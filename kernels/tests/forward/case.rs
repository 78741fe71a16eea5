//! The test case: its problem, its options and how its inputs are drawn, with builders.

use burn_flash_attn_kernels::{AttentionProblem, FloatKind, ForwardPath, MaskKind};

use crate::common::Layout;

/// Amplitude of q and k: with head_dim >= 32 and the default scale, logits spread over a few
/// units, so the softmax is far from uniform.
const QK_AMPLITUDE: f64 = 2.0;
/// Amplitude of v and of the bias.
pub(crate) const V_AMPLITUDE: f64 = 1.0;
/// Probability that a random mask entry is masked.
pub(crate) const MASKED_FRACTION: f64 = 0.3;

#[derive(Debug, Clone)]
pub(crate) enum MaskFill {
    /// Each entry masked with probability MASKED_FRACTION.
    Random,
    /// Random, plus every third query row fully masked.
    FullyMaskedRows,
}

#[derive(Debug, Clone)]
pub(crate) struct Case {
    pub(crate) dtype: FloatKind,
    pub(crate) batch: usize,
    pub(crate) num_heads: usize,
    pub(crate) seq_q: usize,
    pub(crate) seq_kv: usize,
    pub(crate) head_dim: usize,
    pub(crate) val_dim: usize,
    pub(crate) scale: Option<f64>,
    pub(crate) softcap: Option<f64>,
    pub(crate) causal: bool,
    pub(crate) mask: Option<(MaskFill, MaskKind)>,
    pub(crate) bias: bool,
    pub(crate) layout: Layout,
    /// Mask and bias given for one (batch, head) and bound with stride 0 over batch and heads
    /// (what `expand` produces).
    pub(crate) broadcast: bool,
    pub(crate) qk_amplitude: f64,
    pub(crate) path: Option<ForwardPath>,
}

pub(crate) fn case(dtype: FloatKind, head_dim: usize, seq_q: usize, seq_kv: usize) -> Case {
    Case {
        dtype,
        batch: 1,
        num_heads: 1,
        seq_q,
        seq_kv,
        head_dim,
        val_dim: head_dim,
        scale: None,
        softcap: None,
        causal: false,
        mask: None,
        bias: false,
        layout: Layout::Contiguous,
        broadcast: false,
        qk_amplitude: QK_AMPLITUDE,
        path: None,
    }
}

impl Case {
    pub(crate) fn heads(self, batch: usize, num_heads: usize) -> Self {
        Case {
            batch,
            num_heads,
            ..self
        }
    }
    pub(crate) fn val_dim(self, val_dim: usize) -> Self {
        Case { val_dim, ..self }
    }
    pub(crate) fn scale(self, scale: f64) -> Self {
        Case {
            scale: Some(scale),
            ..self
        }
    }
    /// Softcap with larger q, k so that tanh saturates for part of the logits.
    pub(crate) fn softcap(self, cap: f64) -> Self {
        Case {
            softcap: Some(cap),
            qk_amplitude: 2.0 * QK_AMPLITUDE,
            ..self
        }
    }
    pub(crate) fn causal(self) -> Self {
        Case {
            causal: true,
            ..self
        }
    }
    pub(crate) fn mask(self) -> Self {
        Case {
            mask: Some((MaskFill::Random, MaskKind::U32)),
            ..self
        }
    }
    pub(crate) fn mask_u8(self) -> Self {
        Case {
            mask: Some((MaskFill::Random, MaskKind::U8)),
            ..self
        }
    }
    pub(crate) fn masked_rows(self) -> Self {
        Case {
            mask: Some((MaskFill::FullyMaskedRows, MaskKind::U32)),
            ..self
        }
    }
    pub(crate) fn bias(self) -> Self {
        Case { bias: true, ..self }
    }
    pub(crate) fn strided(self) -> Self {
        Case {
            layout: Layout::transposed_padded(),
            ..self
        }
    }
    pub(crate) fn broadcast(self) -> Self {
        Case {
            broadcast: true,
            ..self
        }
    }
    pub(crate) fn matrix(self) -> Self {
        Case {
            path: Some(ForwardPath::Matrix),
            ..self
        }
    }
    pub(crate) fn mma(self) -> Self {
        Case {
            path: Some(ForwardPath::Mma),
            ..self
        }
    }

    pub(crate) fn problem(&self) -> AttentionProblem {
        AttentionProblem {
            batch: self.batch,
            num_heads: self.num_heads,
            seq_q: self.seq_q,
            seq_kv: self.seq_kv,
            head_dim: self.head_dim,
            val_dim: self.val_dim,
            dtype: self.dtype,
            scale: self
                .scale
                .unwrap_or_else(|| AttentionProblem::default_scale(self.head_dim)),
            softcap: self.softcap,
            causal: self.causal,
            mask: self.mask.as_ref().map(|(_, kind)| *kind),
            has_bias: self.bias,
        }
    }
}
