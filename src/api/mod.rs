//! The extended attention API: [`flash_attention`] with [`FlashAttentionOptions`] adds to
//! Burn's `attention` grouped-query attention (GQA/MQA), sliding windows, key and query
//! padding, ALiBi, quiet softmax and dropout, and returns a typed [`AttentionError`] for bad
//! input instead of panicking.
//!
//! ```text
//! let options = FlashAttentionOptions::new()
//!     .with_causal(true)
//!     .with_window(Some(SlidingWindow::new(Some(256), Some(0))))
//!     .with_key_padding(Some(KeyPadding::Lengths { keys: lengths, queries: None }));
//! let out = flash_attention(query, key, value, options)?;
//! ```
//!
//! On a `Flash<..>` backend the call runs the FlashAttention kernels (forward, and under
//! `Flash<Autodiff<..>>` the backward) with no `[batch, heads, seq_q, seq_kv]` tensor beyond
//! what the caller passes in; a combination they cannot run is an
//! [`AttentionError::Unsupported`] naming it, or, with `allow_fallback`, the Burn-ops path with
//! the reason logged. On any other backend it computes the same semantics with Burn tensor ops
//! (differentiable under `Autodiff`, scores materialized), so model code written against it
//! builds and runs everywhere with `B: Backend` alone.
//!
//! How a generic caller reaches the kernels: `Flash<I>` answers `Backend::name` with
//! `flash<..>` ([`is_flash`]); the call then offers the options `module::attention` cannot
//! carry (quiet softmax, window, ALiBi, dropout) in a per-thread slot and calls `B::attention`,
//! whose `Flash` implementation takes them (grouped-query attention is in the shapes; key
//! padding becomes a broadcast mask view; padded query rows are zeroed afterwards).
mod dispatch;
mod error;
pub(crate) mod ops;
mod options;
mod prepare;

use burn::tensor::{Tensor, backend::Backend};

pub use error::AttentionError;
pub use options::{Dropout, FlashAttentionOptions, KeyPadding, SlidingWindow};

pub use dispatch::is_flash;

use dispatch::run;
use prepare::prepare;

/// Attention with the extended options, see [`FlashAttentionOptions`] for the order in which
/// they apply and for the causal / window / padding alignment.
///
/// ```text
/// query [batch, num_heads,    seq_q,  head_dim]
/// key   [batch, num_kv_heads, seq_kv, head_dim]     num_kv_heads divides num_heads:
/// value [batch, num_kv_heads, seq_kv, val_dim]      query head h reads kv head
/// out   [batch, num_heads,    seq_q,  val_dim]      h / (num_heads / num_kv_heads)
/// ```
///
/// # Errors
///
/// An [`AttentionError`] naming the offending value when shapes disagree, a mask, bias or
/// padding does not fit the scores, or an option is out of range. Validation reads metadata
/// only: nothing waits on the device.
pub fn flash_attention<B: Backend>(
    query: Tensor<B, 4>,
    key: Tensor<B, 4>,
    value: Tensor<B, 4>,
    options: FlashAttentionOptions<B>,
) -> Result<Tensor<B, 4>, AttentionError> {
    let prepared = prepare(&query, &key, &value, options)?;
    let out = run(query, key, value, &prepared)?;
    Ok(match &prepared.padded_rows {
        // After the attention, whatever ran it: the rows are exactly 0 and, by mask_fill's
        // backward, pass no gradient to q, k or v.
        Some(padded_rows) => {
            let rows = padded_rows.clone().expand(out.dims());
            out.mask_fill(rows, 0.0)
        }
        None => out,
    })
}

