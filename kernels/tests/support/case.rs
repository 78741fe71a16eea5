//! The attention case (shape, dtype, options, layout) the suites run (the backward run of one:
//! [`super::backward_run`]).
use burn_flash_attn_kernels::problem::{AttentionProblem, Dropout, FloatKind, MaskKind, Window};

use super::device::Layout;
use super::inputs::seed;
use super::runtime::Client;

/// Written into every output before a launch: an element the kernel forgets stays NaN, which
/// the comparison counts as infinitely wrong.
pub const POISON: f64 = f64::NAN;
/// Fraction of entries an explicit random mask hides in the backward's inputs.
pub(super) const MASKED_FRACTION: f64 = 0.25;

/// A one-head problem with no options and the default scale.
pub fn problem(
    dtype: FloatKind,
    head_dim: usize,
    val_dim: usize,
    seq_q: usize,
    seq_kv: usize,
) -> AttentionProblem {
    AttentionProblem {
        batch: 1,
        num_heads: 1,
        num_kv_heads: 1,
        seq_q,
        seq_kv,
        head_dim,
        val_dim,
        dtype,
        scale: AttentionProblem::default_scale(head_dim),
        softcap: None,
        causal: false,
        mask: None,
        has_bias: false,
        quiet_softmax: false,
        window: None,
        alibi: false,
        dropout: None,
    }
}

/// How a case lays its tensors out in memory (the logical shapes never change).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaseLayout {
    Contiguous,
    /// q, k, v, o, d_out and the gradients stored `[batch, seq, heads, dim]` (Burn's transposed
    /// views); mask and bias stored `[batch, heads, seq_kv, seq_q]`.
    Transposed,
    /// Every `[b, h, s, d]` tensor (mask and bias included) stored `[b, s, h, d]` with padded
    /// rows ([`Layout::transposed_padded`]).
    TransposedPadded,
}

/// What a tensor of a case holds, which decides its layout.
#[derive(Clone, Copy, Debug)]
pub enum Role {
    /// `[b, h, seq, dim]` tensors.
    Rows,
    /// `[b, h, seq_q, seq_kv]` tensors.
    Scores,
    /// `[b, h, seq_q]` statistics: always contiguous.
    Stats,
}

impl CaseLayout {
    /// The layout of a tensor with `role`.
    pub fn of(self, role: Role) -> Layout {
        match (self, role) {
            (_, Role::Stats) | (CaseLayout::Contiguous, _) => Layout::Contiguous,
            (CaseLayout::Transposed, Role::Rows) => Layout::permuted(&[0, 2, 1, 3]),
            (CaseLayout::Transposed, Role::Scores) => Layout::permuted(&[0, 1, 3, 2]),
            (CaseLayout::TransposedPadded, _) => Layout::transposed_padded(),
        }
    }
}

/// An explicit mask pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaskPattern {
    /// Each entry masked with probability [`MASKED_FRACTION`].
    Random,
    /// Random, and every third query row fully masked.
    RandomWithMaskedRows,
}

#[derive(Clone, Debug)]
pub struct Case {
    pub batch: usize,
    pub heads: usize,
    pub seq_q: usize,
    pub seq_kv: usize,
    pub head_dim: usize,
    pub val_dim: usize,
    pub dtype: FloatKind,
    pub causal: bool,
    pub mask: Option<(MaskPattern, MaskKind)>,
    pub bias: bool,
    pub softcap: Option<f64>,
    /// `None`: the default 1/sqrt(head_dim).
    pub scale: Option<f64>,
    /// Quiet softmax (`exp(s) / (1 + sum exp(s))`).
    pub quiet: bool,
    /// Key/value heads (grouped-query attention); `None`: `heads`.
    pub kv_heads: Option<usize>,
    pub window: Option<Window>,
    /// ALiBi with seeded slopes.
    pub alibi: bool,
    pub dropout: Option<Dropout>,
    pub layout: CaseLayout,
}

impl Case {
    pub fn new(dtype: FloatKind, seq_q: usize, seq_kv: usize, head_dim: usize) -> Self {
        Case {
            batch: 1,
            heads: 1,
            seq_q,
            seq_kv,
            head_dim,
            val_dim: head_dim,
            dtype,
            causal: false,
            mask: None,
            bias: false,
            softcap: None,
            scale: None,
            quiet: false,
            kv_heads: None,
            window: None,
            alibi: false,
            dropout: None,
            layout: CaseLayout::Contiguous,
        }
    }

    pub fn heads(self, batch: usize, heads: usize) -> Self {
        Case {
            batch,
            heads,
            ..self
        }
    }
    pub fn val_dim(self, val_dim: usize) -> Self {
        Case { val_dim, ..self }
    }
    pub fn causal(self) -> Self {
        Case {
            causal: true,
            ..self
        }
    }
    pub fn mask(self, pattern: MaskPattern) -> Self {
        Case {
            mask: Some((pattern, MaskKind::U32)),
            ..self
        }
    }
    pub fn mask_u8(self, pattern: MaskPattern) -> Self {
        Case {
            mask: Some((pattern, MaskKind::U8)),
            ..self
        }
    }
    pub fn bias(self) -> Self {
        Case { bias: true, ..self }
    }
    pub fn quiet(self) -> Self {
        Case {
            quiet: true,
            ..self
        }
    }
    /// Grouped-query attention with `kv_heads` key/value heads.
    pub fn gqa(self, kv_heads: usize) -> Self {
        Case {
            kv_heads: Some(kv_heads),
            ..self
        }
    }
    pub fn window(self, left: Option<usize>, right: Option<usize>) -> Self {
        Case {
            window: Some(Window { left, right }),
            ..self
        }
    }
    pub fn alibi(self) -> Self {
        Case {
            alibi: true,
            ..self
        }
    }
    pub fn dropout(self, prob: f64, seed: u64) -> Self {
        Case {
            dropout: Some(Dropout::new(prob, seed)),
            ..self
        }
    }
    pub fn softcap(self, cap: f64) -> Self {
        Case {
            softcap: Some(cap),
            ..self
        }
    }
    pub fn scale(self, scale: f64) -> Self {
        Case {
            scale: Some(scale),
            ..self
        }
    }
    pub fn transposed(self) -> Self {
        Case {
            layout: CaseLayout::Transposed,
            ..self
        }
    }
    pub fn transposed_padded(self) -> Self {
        Case {
            layout: CaseLayout::TransposedPadded,
            ..self
        }
    }

    pub fn name(&self) -> String {
        let mut name = format!(
            "{:?}_b{}h{}_q{}_kv{}_hd{}_vd{}",
            self.dtype,
            self.batch,
            self.heads,
            self.seq_q,
            self.seq_kv,
            self.head_dim,
            self.val_dim
        );
        for (on, tag) in [
            (self.causal, "_causal"),
            (self.bias, "_bias"),
            (self.quiet, "_quiet"),
            (self.alibi, "_alibi"),
            (self.layout == CaseLayout::Transposed, "_strided"),
            (self.layout == CaseLayout::TransposedPadded, "_padded"),
        ] {
            if on {
                name.push_str(tag);
            }
        }
        if let Some((pattern, kind)) = self.mask {
            name.push_str(&format!("_mask{pattern:?}{kind:?}"));
        }
        if let Some(kv_heads) = self.kv_heads {
            name.push_str(&format!("_kvh{kv_heads}"));
        }
        if let Some(w) = self.window {
            let side = |b: Option<usize>| b.map_or("inf".to_string(), |b| b.to_string());
            name.push_str(&format!("_window{}-{}", side(w.left), side(w.right)));
        }
        if let Some(d) = self.dropout {
            name.push_str(&format!("_dropout{}-seed{}", d.prob, d.seed));
        }
        if let Some(cap) = self.softcap {
            name.push_str(&format!("_softcap{cap}"));
        }
        if let Some(scale) = self.scale {
            name.push_str(&format!("_scale{scale}"));
        }
        name.to_lowercase()
    }

    pub fn problem(&self) -> AttentionProblem {
        let one_head = problem(
            self.dtype,
            self.head_dim,
            self.val_dim,
            self.seq_q,
            self.seq_kv,
        );
        AttentionProblem {
            batch: self.batch,
            num_heads: self.heads,
            num_kv_heads: self.kv_heads.unwrap_or(self.heads),
            scale: self.scale.unwrap_or(one_head.scale),
            softcap: self.softcap,
            causal: self.causal,
            mask: self.mask.map(|(_, kind)| kind),
            has_bias: self.bias,
            quiet_softmax: self.quiet,
            window: self.window,
            alibi: self.alibi,
            dropout: self.dropout,
            ..one_head
        }
    }

    /// The seed of the case's inputs ([`seed`] of its name).
    pub fn seed(&self) -> u64 {
        seed(&self.name())
    }

    /// The case's name and seed, for messages.
    pub fn label(&self) -> String {
        format!("{} (seed {})", self.name(), self.seed())
    }
}

/// Whether the test device can run the case's element types; prints why not.
pub fn supported(client: &Client, case: &Case) -> bool {
    use burn_flash_attn_kernels::plan::{elem_type, mask_elem_type};
    let props = client.properties();
    let ok = props.supports_type(elem_type(case.dtype))
        && case
            .mask
            .is_none_or(|(_, kind)| props.supports_type(mask_elem_type(kind)));
    if !ok {
        println!(
            "SKIPPED {}: the test device does not support its element types",
            case.name()
        );
    }
    ok
}
