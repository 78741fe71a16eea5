//! The options of [`flash_attention`](super::flash_attention) and their builders.
use burn::tensor::{Bool, Int, Tensor, backend::Backend};

/// Everything [`flash_attention`](super::flash_attention) can do besides plain
/// `softmax(q·kᵀ·scale)·v`. Shapes use `batch, num_heads, num_kv_heads, seq_q, seq_kv,
/// head_dim`; the scores are `[batch, num_heads, seq_q, seq_kv]`.
///
/// The logit of row `i`, column `j` goes through, in this order:
///
/// 1. `s = q·kᵀ · scale` (`scale` default `1/sqrt(head_dim)`);
/// 2. `s = softcap · tanh(s / softcap)` if `softcap` is set;
/// 3. masking: `mask`, `causal`, `window` and `key_padding` together (a position masked by any
///    of them is masked);
/// 4. `+ bias`, `− slope_h · |i' − j|` (ALiBi) on the positions left (a masked one stays masked);
/// 5. softmax over `j` (or the quiet softmax); a row with every column masked gives
///    probabilities 0, hence output 0;
/// 6. dropout on the probabilities, then `· v`; rows past the query lengths are set to 0.
///
/// Causal masking and the window are aligned bottom-right, as FlashAttention ≥ 2.1 and Burn
/// do: row `i` sits at `i' = i + seq_kv − seq_q`, so the last query row meets the last key.
///
/// ```text
/// seq_q = 3, seq_kv = 5           causal            window left 1, right 0   key lengths [3]
///                                 j <= i'           i'-1 <= j <= i'          j < 3
///     j: 0 1 2 3 4                0 1 2 3 4         0 1 2 3 4                0 1 2 3 4
/// i=0 (i'=2)                      x x x . .         . x x . .                x x x . .
/// i=1 (i'=3)                      x x x x .         . . x x .                x x x . .
/// i=2 (i'=4)                      x x x x x         . . . x x                x x x . .
///                                               x = attended, . = masked
/// ```
///
/// All defaults give Burn's `attention(q, k, v, None, None, Default::default())`.
#[derive(Clone, Debug)]
pub struct FlashAttentionOptions<B: Backend> {
    /// Multiplies `q·kᵀ`. Default (`None`): `1/sqrt(head_dim)`. Must be finite.
    pub scale: Option<f64>,
    /// `softcap · tanh(s / softcap)` on the scaled logits, before masking. Finite, `> 0`.
    /// Default: none.
    pub softcap: Option<f64>,
    /// Row `i` sees column `j` iff `j <= i + seq_kv − seq_q`. Default: false.
    pub causal: bool,
    /// Bool mask, `true` = masked, of a shape that broadcasts to the scores (each dimension
    /// equal to the scores' or 1: `[batch, 1, 1, seq_kv]` masks keys per sequence). It is
    /// broadcast as a view, not copied; only combining it with `key_padding` makes a new,
    /// full-size mask. Default: none.
    pub mask: Option<Tensor<B, 4, Bool>>,
    /// Additive bias on the logits, added after masking (a masked position stays masked),
    /// broadcastable like `mask` and broadcast as a view. Default: none.
    pub bias: Option<Tensor<B, 4>>,
    /// Quiet softmax (burn-nn's `quiet_softmax`): `p_j = exp(s_j) / (1 + Σ_k exp(s_k))`, as if
    /// every row had one more key of logit 0 and value 0. Default: false.
    pub quiet_softmax: bool,
    /// Sliding-window (local) attention, see [`SlidingWindow`]; combined with `causal` by AND.
    /// Default: none.
    pub window: Option<SlidingWindow>,
    /// Padded keys and queries per batch entry, see [`KeyPadding`]. Default: none.
    pub key_padding: Option<KeyPadding<B>>,
    /// ALiBi slopes `[num_heads]`: query head `h` adds `−slope_h · |i' − j|` to its logits
    /// after masking (`i'` as in the picture above). Default: none.
    pub alibi_slopes: Option<Tensor<B, 1>>,
    /// Dropout on the attention probabilities, see [`Dropout`]. Default: none.
    pub dropout: Option<Dropout>,
    /// Read by the `Flash` dispatch when the kernels cannot run a combination of these
    /// options: `false` (the default) returns [`AttentionError::Unsupported`], `true` computes
    /// the attention with Burn tensor ops instead (materializing the scores) and logs why.
    ///
    /// [`AttentionError::Unsupported`]: super::AttentionError::Unsupported
    pub allow_fallback: bool,
}

impl<B: Backend> Default for FlashAttentionOptions<B> {
    fn default() -> Self {
        Self {
            scale: None,
            softcap: None,
            causal: false,
            mask: None,
            bias: None,
            quiet_softmax: false,
            window: None,
            key_padding: None,
            alibi_slopes: None,
            dropout: None,
            allow_fallback: false,
        }
    }
}

impl<B: Backend> FlashAttentionOptions<B> {
    /// The defaults: plain softmax attention with scale `1/sqrt(head_dim)`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`scale`](Self::scale).
    pub fn with_scale(mut self, scale: Option<f64>) -> Self {
        self.scale = scale;
        self
    }

    /// Sets [`softcap`](Self::softcap).
    pub fn with_softcap(mut self, softcap: Option<f64>) -> Self {
        self.softcap = softcap;
        self
    }

    /// Sets [`causal`](Self::causal).
    pub fn with_causal(mut self, causal: bool) -> Self {
        self.causal = causal;
        self
    }

    /// Sets [`mask`](Self::mask).
    pub fn with_mask(mut self, mask: Option<Tensor<B, 4, Bool>>) -> Self {
        self.mask = mask;
        self
    }

    /// Sets [`bias`](Self::bias).
    pub fn with_bias(mut self, bias: Option<Tensor<B, 4>>) -> Self {
        self.bias = bias;
        self
    }

    /// Sets [`quiet_softmax`](Self::quiet_softmax).
    pub fn with_quiet_softmax(mut self, quiet_softmax: bool) -> Self {
        self.quiet_softmax = quiet_softmax;
        self
    }

    /// Sets [`window`](Self::window).
    pub fn with_window(mut self, window: Option<SlidingWindow>) -> Self {
        self.window = window;
        self
    }

    /// Sets [`key_padding`](Self::key_padding).
    pub fn with_key_padding(mut self, key_padding: Option<KeyPadding<B>>) -> Self {
        self.key_padding = key_padding;
        self
    }

    /// Sets [`alibi_slopes`](Self::alibi_slopes).
    pub fn with_alibi_slopes(mut self, alibi_slopes: Option<Tensor<B, 1>>) -> Self {
        self.alibi_slopes = alibi_slopes;
        self
    }

    /// Sets [`dropout`](Self::dropout).
    pub fn with_dropout(mut self, dropout: Option<Dropout>) -> Self {
        self.dropout = dropout;
        self
    }

    /// Sets [`allow_fallback`](Self::allow_fallback).
    pub fn with_allow_fallback(mut self, allow_fallback: bool) -> Self {
        self.allow_fallback = allow_fallback;
        self
    }
}

/// A band of visible columns around each row's diagonal: the kernels' own type (its doc has
/// the picture). `SlidingWindow::new(Some(w), Some(0))` is the causal local window of `w + 1`
/// keys (FlashAttention's `window_size = (w, 0)`); every width is valid, a side at least as wide
/// as the sequences masks nothing.
pub use burn_flash_attn_kernels::Window as SlidingWindow;

/// Padding of variable-length sequences in a batch. Combines with `mask`, `causal` and `window`.
#[derive(Clone, Debug)]
pub enum KeyPadding<B: Backend> {
    /// Valid lengths per batch entry. `keys [batch]`: column `j` is masked iff `j >= keys[b]`.
    /// `queries [batch]` (optional): rows `i >= queries[b]` are padding, their output is
    /// exactly 0 and no gradient flows through them. Lengths beyond the sequence mask nothing.
    Lengths { keys: Tensor<B, 1, Int>, queries: Option<Tensor<B, 1, Int>> },
    /// `[batch, seq_kv]`, `true` = padded key = masked (burn-nn's `mask_pad` convention).
    Mask(Tensor<B, 2, Bool>),
}

/// Dropout on the attention probabilities (after the softmax, quiet included): each is kept
/// with probability `1 − prob` and scaled by `1 / (1 − prob)`, so that the expected output is
/// the output without dropout. `prob` must be finite and in `[0, 1)`; 0 means no dropout. The
/// kernels' own type: the mask is a stateless function of `seed` and the entry's
/// `(batch * heads + head, row, column)` (`kernels::primitives::dropout`), the same on the
/// kernels, whatever their blocks, and on the Burn-ops path, which generates it on the host.
pub use burn_flash_attn_kernels::Dropout;
