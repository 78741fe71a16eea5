//! FlashAttention-2 forward and backward kernels in CubeCL, with no Burn dependency.
//!
//! - [`problem`]: the runtime problem and its validation; [`error`]: typed errors.
//! - [`plan`]: THE planner: which kernels run a problem on a device, with which
//!   configurations, and why ([`plan::plan`]). Call it first; the launchers take its plan.
//! - [`forward`]: the forward launcher [`forward::flash_attention_forward`];
//!   [`backward`]: the backward launcher [`backward::flash_attention_backward`].
//! - [`config`]: the forward kernels' comptime configurations, one per kernel family
//!   ([`backward::config`]: the gradient kernels').
//! - [`primitives`]: small `#[cube]` pieces shared by the kernels (the logit transform in
//!   [`primitives::score`] is the contract between forward and backward).
//! - [`reference`]: the f64 CPU oracle; [`tolerance`]: the FlashAttention tolerance rule.
pub mod backward;
mod checks;
pub mod config;
pub mod error;
pub mod forward;
pub mod plan;
pub mod primitives;
pub mod problem;
pub mod reference;
pub mod tolerance;

pub use config::{ForwardConfig, ForwardPath, MatrixConfig, MmaConfig, PortableConfig};
pub use error::FlashError;
pub use forward::{ForwardTensors, flash_attention_forward};
pub use plan::{DeviceCaps, Layout, Passes, Plan, Tuning, plan};
pub use problem::{AttentionProblem, Dropout, FloatKind, MaskKind, MAX_HEAD_DIM, Window};
