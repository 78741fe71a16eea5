//! The runtime description of one attention problem, and its validation.
//!
//! Shapes (Burn's convention, `true` in the mask = masked):
//! ```text
//! q    [batch, num_heads, seq_q,  head_dim]      k    [batch, num_kv_heads, seq_kv, head_dim]
//! v    [batch, num_kv_heads, seq_kv, val_dim]    o    [batch, num_heads, seq_q,  val_dim]
//! mask [batch, num_heads, seq_q,  seq_kv] bool   bias [batch, num_heads, seq_q,  seq_kv]
//! lse  [batch, num_heads, seq_q] f32             alibi slopes [num_heads] f32
//! ```
//! Grouped-query attention: `num_kv_heads` divides `num_heads`, and query head `h` reads key/value
//! head `h / (num_heads / num_kv_heads)` (multi-query: one key/value head).
//! Causal masking is aligned bottom-right (FlashAttention >= 2.1, Burn's fallback): row `i` may
//! attend to column `j` iff `j <= i + seq_kv - seq_q`. With seq_q = 3, seq_kv = 5:
//! ```text
//!     j: 0 1 2 3 4
//! i=0    x x x . .      x = attended, . = masked
//! i=1    x x x x .
//! i=2    x x x x x
//! ```
//! When seq_q > seq_kv the first `seq_q - seq_kv` rows attend to nothing: their output is 0.
use crate::error::FlashError;
use crate::primitives::score::{ScoreOptions, folds_scale};

/// Largest head_dim / val_dim the kernels accept (FlashAttention-2's limit).
pub const MAX_HEAD_DIM: usize = 256;

/// Element type of q, k, v, o (and of the bias): accumulation is always f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FloatKind {
    F16,
    BF16,
    F32,
}

impl FloatKind {
    pub fn size(self) -> usize {
        match self {
            FloatKind::F16 | FloatKind::BF16 => 2,
            FloatKind::F32 => 4,
        }
    }
}

/// Storage of a bool mask tensor (Burn stores bools as u8 or u32 on CubeCL backends).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MaskKind {
    U8,
    U32,
}

/// A sliding window around the (bottom-right aligned) diagonal: with `d = i + seq_kv - seq_q`,
/// row `i` sees column `j` iff `d - left <= j <= d + right`; `None` leaves that side unbounded.
/// With `left = 2, right = 1`, seq_q = seq_kv = 5 (`x` attended):
/// ```text
///     j: 0 1 2 3 4
/// i=0    x x . . .
/// i=1    x x x . .
/// i=2    x x x x .
/// i=3    . x x x x
/// i=4    . . x x x
/// ```
/// Combined with causal by AND (causal is `right = Some(0)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Window {
    pub left: Option<usize>,
    pub right: Option<usize>,
}

impl Window {
    pub fn new(left: Option<usize>, right: Option<usize>) -> Self {
        Self { left, right }
    }

    /// The bounds as the kernels take them: each side clamped to `seq_q + seq_kv` (a reach no
    /// row exceeds), so that the kernels' sums stay far from `u32::MAX`.
    pub fn clamped(&self, seq_q: usize, seq_kv: usize) -> (u32, u32) {
        let limit = seq_q + seq_kv;
        let side = |bound: Option<usize>| bound.map_or(limit, |b| b.min(limit)) as u32;
        (side(self.left), side(self.right))
    }

    /// Whether row `i` sees column `j` (bottom-right alignment).
    pub fn sees(&self, i: usize, j: usize, seq_q: usize, seq_kv: usize) -> bool {
        let (d, j) = ((i + seq_kv) as i64 - seq_q as i64, j as i64);
        self.left.is_none_or(|l| j >= d - l as i64) && self.right.is_none_or(|r| j <= d + r as i64)
    }
}

/// One attention problem, as the launchers see it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionProblem {
    pub batch: usize,
    pub num_heads: usize,
    /// Heads of k and v: `num_heads` (plain), a divisor of it (grouped-query), or 1
    /// (multi-query). K/V are read in place, never repeated.
    pub num_kv_heads: usize,
    pub seq_q: usize,
    pub seq_kv: usize,
    pub head_dim: usize,
    pub val_dim: usize,
    pub dtype: FloatKind,
    /// Multiplies q·k. Burn's default is `1/sqrt(head_dim)`: see [`AttentionProblem::default_scale`].
    pub scale: f64,
    /// `softcap * tanh(s / softcap)`, applied to the scaled logits before any masking.
    pub softcap: Option<f64>,
    pub causal: bool,
    /// An explicit bool mask is given (`true` = masked).
    pub mask: Option<MaskKind>,
    /// An additive bias is given; it is added after masking.
    pub has_bias: bool,
    /// Quiet softmax (burn's `quiet_softmax`, "softmax1"): `exp(s_j) / (1 + sum_k exp(s_k))`,
    /// as if every row had one more key of logit 0 and value 0. A fully masked row then has
    /// output 0 and log-sum-exp 0 (`ln 1`).
    pub quiet_softmax: bool,
    /// A sliding window (see [`Window`]); masked entries outside it, key/value blocks outside it
    /// skipped.
    pub window: Option<Window>,
    /// ALiBi: `-slope[head] * |i + seq_kv - seq_q - j|` added to the logit after masking (and
    /// after the bias), the slopes an f32 `[num_heads]` tensor.
    pub alibi: bool,
}

impl AttentionProblem {
    pub fn default_scale(head_dim: usize) -> f64 {
        1.0 / (head_dim as f64).sqrt()
    }

    /// What the logit transform of every kernel reads and applies (comptime in the configs).
    pub fn score_options(&self) -> ScoreOptions {
        ScoreOptions {
            causal: self.causal,
            has_mask: self.mask.is_some(),
            has_bias: self.has_bias,
            has_softcap: self.softcap.is_some(),
            window: self.window.is_some(),
            alibi: self.alibi,
            fold_scale: folds_scale(
                self.softcap.is_some(),
                self.has_bias || self.alibi,
                self.scale,
            ),
        }
    }

    /// Query heads per key/value head.
    pub fn kv_group(&self) -> usize {
        self.num_heads / self.num_kv_heads
    }

    /// Number of (batch, head) pairs.
    pub fn heads_total(&self) -> usize {
        self.batch * self.num_heads
    }

    /// Columns `[0, end)` row `row` may attend to when causal (bottom-right alignment).
    /// Returns 0 for rows that see nothing.
    pub fn causal_end(&self, row: usize) -> usize {
        (row + 1 + self.seq_kv)
            .saturating_sub(self.seq_q)
            .min(self.seq_kv)
    }

    /// Whether row `i` sees column `j` by the causal mask and the window (not the bool mask).
    pub fn sees(&self, i: usize, j: usize) -> bool {
        (!self.causal || j < self.causal_end(i))
            && self
                .window
                .is_none_or(|w| w.sees(i, j, self.seq_q, self.seq_kv))
    }

    /// FLOPs of the forward pass, the convention of the FlashAttention benchmarks:
    /// `4 * batch * heads * seq_q * seq_kv * head_dim`, halved when causal.
    pub fn forward_flops(&self) -> f64 {
        let full = 4.0
            * self.heads_total() as f64
            * self.seq_q as f64
            * self.seq_kv as f64
            * self.head_dim as f64;
        if self.causal { full / 2.0 } else { full }
    }

    /// Checks what the kernels support. Shape agreement between tensors is checked by
    /// [`AttentionProblem::from_shapes`].
    pub fn validate(&self) -> Result<(), FlashError> {
        let dims = [
            ("batch", self.batch),
            ("num_heads", self.num_heads),
            ("num_kv_heads", self.num_kv_heads),
            ("seq_q", self.seq_q),
            ("seq_kv", self.seq_kv),
            ("head_dim", self.head_dim),
            ("val_dim", self.val_dim),
        ];
        for (dim, value) in dims {
            if value == 0 {
                return Err(FlashError::EmptyDimension { dim });
            }
        }
        for (dim, value) in [("head_dim", self.head_dim), ("val_dim", self.val_dim)] {
            if value > MAX_HEAD_DIM {
                return Err(FlashError::DimTooLarge {
                    dim,
                    value,
                    max: MAX_HEAD_DIM,
                });
            }
        }
        if !self.num_heads.is_multiple_of(self.num_kv_heads) {
            return Err(FlashError::HeadGroups {
                num_heads: self.num_heads,
                num_kv_heads: self.num_kv_heads,
            });
        }
        if !self.scale.is_finite() {
            return Err(FlashError::InvalidScale(self.scale));
        }
        if let Some(cap) = self.softcap
            && !(cap > 0.0 && cap.is_finite())
        {
            return Err(FlashError::InvalidSoftcap(cap));
        }
        Ok(())
    }

    /// Builds a problem from tensor shapes, checking that they agree. Key and value may have
    /// fewer heads than the query (grouped-query attention: a divisor of `num_heads`).
    #[allow(clippy::too_many_arguments)]
    pub fn from_shapes(
        query: &[usize],
        key: &[usize],
        value: &[usize],
        mask: Option<&[usize]>,
        bias: Option<&[usize]>,
        dtype: FloatKind,
        scale: Option<f64>,
        softcap: Option<f64>,
        causal: bool,
        mask_kind: MaskKind,
    ) -> Result<Self, FlashError> {
        let rank4 = |tensor: &'static str, shape: &[usize]| -> Result<[usize; 4], FlashError> {
            shape.try_into().map_err(|_| FlashError::Rank {
                tensor,
                shape: shape.to_vec(),
            })
        };
        let [batch, num_heads, seq_q, head_dim] = rank4("query", query)?;
        let [kb, kh, seq_kv, kd] = rank4("key", key)?;
        let [vb, vh, vs, val_dim] = rank4("value", value)?;
        if [kb, kd] != [batch, head_dim] || kh == 0 || !num_heads.is_multiple_of(kh) {
            return Err(FlashError::ShapeMismatch {
                what: "key",
                detail: format!(
                    "query is {query:?} so key must be [{batch}, kv_heads, seq_kv, {head_dim}] with \
                     kv_heads dividing {num_heads}, got {key:?}"
                ),
            });
        }
        if [vb, vh, vs] != [batch, kh, seq_kv] {
            return Err(FlashError::ShapeMismatch {
                what: "value",
                detail: format!(
                    "key is {key:?} so value must be [{batch}, {kh}, {seq_kv}, val_dim], got {value:?}"
                ),
            });
        }
        let scores = [batch, num_heads, seq_q, seq_kv];
        for (what, shape) in [("mask", mask), ("attn_bias", bias)] {
            if let Some(shape) = shape
                && shape != scores
            {
                return Err(FlashError::ShapeMismatch {
                    what,
                    detail: format!(
                        "expected {scores:?} (batch, heads, seq_q, seq_kv), got {shape:?}"
                    ),
                });
            }
        }
        let problem = Self {
            batch,
            num_heads,
            num_kv_heads: kh,
            seq_q,
            seq_kv,
            head_dim,
            val_dim,
            dtype,
            scale: scale.unwrap_or_else(|| Self::default_scale(head_dim)),
            softcap,
            causal,
            mask: mask.map(|_| mask_kind),
            has_bias: bias.is_some(),
            quiet_softmax: false,
            window: None,
            alibi: false,
        };
        problem.validate()?;
        Ok(problem)
    }
}
