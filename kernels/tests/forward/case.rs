//! The forward's test case: the support tree's [`Attention`] case (shape, dtype, options,
//! layout) and what only the forward suite varies (broadcast mask and bias, the amplitude of q
//! and k, a forced path), with the builders the case lists use.

use std::ops::Deref;

use burn_flash_attn_kernels::plan::Tuning;
use burn_flash_attn_kernels::{FloatKind, ForwardPath};

use crate::support::{Case as Attention, MaskPattern, planning};

/// Amplitude of q and k: with head_dim >= 32 and the default scale, logits spread over a few
/// units, so the softmax is far from uniform.
const QK_AMPLITUDE: f64 = 2.0;
/// Amplitude of v and of the bias.
pub(crate) const V_AMPLITUDE: f64 = 1.0;
/// Probability that a random mask entry is masked.
pub(crate) const MASKED_FRACTION: f64 = 0.3;

#[derive(Debug, Clone)]
pub(crate) struct Case {
    pub(crate) attention: Attention,
    /// Mask and bias given for one (batch, head) and bound with stride 0 over batch and heads
    /// (what `expand` produces).
    pub(crate) broadcast: bool,
    pub(crate) qk_amplitude: f64,
    pub(crate) path: Option<ForwardPath>,
    /// The matrix path on its scalar stand-in for the fragments, `Some(f32_tiles)`: runs on
    /// devices without cmma (lavapipe).
    pub(crate) stand_in: Option<bool>,
    /// The matrix forward's query rows per plane, over the test run's (`Tuning::matrix_plane_rows`).
    pub(crate) plane_rows: Option<u32>,
    /// The matrix forward's S and O staging in one tile (`Tuning::matrix_shared_stage`), over
    /// the test run's.
    pub(crate) shared_stage: Option<bool>,
}

/// The shape, dtype, options and layout of the case.
impl Deref for Case {
    type Target = Attention;
    fn deref(&self) -> &Attention {
        &self.attention
    }
}

pub(crate) fn case(dtype: FloatKind, head_dim: usize, seq_q: usize, seq_kv: usize) -> Case {
    Case {
        attention: Attention::new(dtype, seq_q, seq_kv, head_dim),
        broadcast: false,
        qk_amplitude: QK_AMPLITUDE,
        path: None,
        stand_in: None,
        plane_rows: None,
        shared_stage: None,
    }
}

impl Case {
    fn with(self, change: impl FnOnce(Attention) -> Attention) -> Self {
        Case {
            attention: change(self.attention),
            ..self
        }
    }
    pub(crate) fn heads(self, batch: usize, num_heads: usize) -> Self {
        self.with(|a| a.heads(batch, num_heads))
    }
    pub(crate) fn val_dim(self, val_dim: usize) -> Self {
        self.with(|a| a.val_dim(val_dim))
    }
    pub(crate) fn scale(self, scale: f64) -> Self {
        self.with(|a| a.scale(scale))
    }
    /// Softcap with larger q, k so that tanh saturates for part of the logits.
    pub(crate) fn softcap(self, cap: f64) -> Self {
        Case {
            qk_amplitude: 2.0 * QK_AMPLITUDE,
            ..self.with(|a| a.softcap(cap))
        }
    }
    /// Dropout with probability `prob`, the mask drawn from `seed` (the host's mask in the
    /// reference).
    pub(crate) fn dropout(self, prob: f64, seed: u64) -> Self {
        self.with(|a| a.dropout(prob, seed))
    }
    pub(crate) fn causal(self) -> Self {
        self.with(Attention::causal)
    }
    /// Each entry masked with probability MASKED_FRACTION (u32 mask).
    pub(crate) fn mask(self) -> Self {
        self.with(|a| a.mask(MaskPattern::Random))
    }
    pub(crate) fn mask_u8(self) -> Self {
        self.with(|a| a.mask_u8(MaskPattern::Random))
    }
    /// Random, plus every third query row fully masked (u32 mask).
    pub(crate) fn masked_rows(self) -> Self {
        self.with(|a| a.mask(MaskPattern::RandomWithMaskedRows))
    }
    pub(crate) fn bias(self) -> Self {
        self.with(Attention::bias)
    }
    /// Quiet softmax: `exp(s) / (1 + sum exp(s))`.
    pub(crate) fn quiet(self) -> Self {
        self.with(Attention::quiet)
    }
    /// `[b, s, h, d]` storage viewed as `[b, h, s, d]`, rows padded (mask and bias too).
    pub(crate) fn strided(self) -> Self {
        self.with(Attention::transposed_padded)
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
    /// The matrix path on its scalar stand-in (`f32_tiles`: tiles in f32, as bf16 on gfx942).
    pub(crate) fn matrix_stand_in(self, f32_tiles: bool) -> Self {
        Case {
            path: Some(ForwardPath::Matrix),
            stand_in: Some(f32_tiles),
            ..self
        }
    }
    /// 32 query rows a plane on the matrix path (two row tiles: `Tuning::matrix_plane_rows`).
    pub(crate) fn plane_rows_32(self) -> Self {
        Case {
            plane_rows: Some(32),
            ..self
        }
    }
    /// S and O's staging in one tile on the matrix path (`Tuning::matrix_shared_stage`).
    pub(crate) fn shared_stage(self) -> Self {
        Case {
            shared_stage: Some(true),
            ..self
        }
    }
    /// The planner's tuning for the case: the test run's (`support::planning::tuning`), its
    /// forced path, plane rows and shared stage over the run's, its stand-in.
    pub(crate) fn tuning(&self) -> Tuning {
        let run = planning::tuning();
        let tuning = run
            .with_forward_path(self.path.or(run.forward_path))
            .with_matrix_plane_rows(self.plane_rows.or(run.matrix_plane_rows))
            .with_matrix_shared_stage(self.shared_stage.or(run.matrix_shared_stage));
        match self.stand_in {
            Some(f32_tiles) => tuning.with_matrix_stand_in(true).with_matrix_f32_tiles(f32_tiles),
            None => tuning,
        }
    }
    pub(crate) fn mma(self) -> Self {
        Case {
            path: Some(ForwardPath::Mma),
            ..self
        }
    }
}
