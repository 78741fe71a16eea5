//! # burn-flash-attn
//!
//! FlashAttention-2 for [Burn](https://burn.dev), forward AND backward, as a backend decorator.
//! Change one type and `burn::tensor::module::attention` runs fused CubeCL kernels with O(N)
//! memory (no `[batch, heads, seq_q, seq_kv]` scores), in inference and in training:
//!
//! ```text
//! type B = Autodiff<Wgpu>;            // before
//! type B = Flash<Autodiff<Wgpu>>;     // after: same model code, same loss curve
//! ```
//!
//! Every other op is forwarded unchanged to the inner backend. `Flash` must be the outermost
//! type (`Autodiff<Flash<..>>` would never see `attention`). Semantics are Burn's: `true` in the
//! mask = masked, default scale `1/sqrt(head_dim)`, softcap before masking, bias after masking,
//! causal aligned bottom-right:
//!
//! ```text
//! seq_q = 3, seq_kv = 5, causal     row i attends to col j iff j <= i + seq_kv - seq_q
//!     j: 0 1 2 3 4
//! i=0    x x x . .
//! i=1    x x x x .
//! i=2    x x x x x
//! ```
//!
//! What the kernels cannot run (see [`routing`]) goes to Burn's `attention_fallback`, with the
//! reason logged once through `log` (in training, its semantics written in Burn ops with a
//! detached row maximum: Burn 0.21's own reads out of bounds on a fully masked row there).
//!
//! Beyond Burn's options, [`flash_attention`] takes [`FlashAttentionOptions`]: grouped-query
//! attention, sliding windows, key and query padding, ALiBi, quiet softmax and dropout, with
//! typed errors ([`AttentionError`]) for bad input. On any backend it computes with Burn ops;
//! on `Flash<..>` it reaches the kernels (see the `api` module for how, with `B: Backend` alone).
//!
//! Models built from burn-nn's attention modules switch their `use` line to [`nn`]: the same
//! configs, records and inputs, the attention through [`flash_attention`].
pub mod api;
pub mod attention;
pub mod nn;
mod autodiff;
mod backend;
mod cube;
mod extension;
mod fusion;
mod cubecl_config;
mod ops;
pub mod routing;
pub mod tuning;

pub use api::{AttentionError, Dropout, FlashAttentionOptions, KeyPadding, SlidingWindow, flash_attention};
pub use attention::{Extension, FlashAttention, FlashKernels, Refused};
pub use backend::{Flash, from_flash, into_flash};
pub use cubecl_config::{CubeclConfigError, configure_cubecl, enable_kernel_cache};
pub use burn_flash_attn_kernels as kernels;
pub use routing::{Route, RouteCounts, last_route, route_counts};
pub use tuning::{Tuning, set_tuning, tuning};
