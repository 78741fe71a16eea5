//! FlashAttention-2 forward and backward kernels in CubeCL, with no Burn dependency.
//!
//! - [`problem`]: the runtime problem and its validation; [`error`]: typed errors.
//! - [`forward`]: the forward launcher [`forward::flash_attention_forward`] and its planner
//!   [`forward::plan`] (call it first to know whether a problem runs on a client).
//! - [`config`]: the comptime kernel configuration; [`heuristics`]: how it is chosen.
//! - [`primitives`]: small `#[cube]` pieces shared by the kernels (the logit transform in
//!   [`primitives::score`] is the contract between forward and backward).
//! - [`reference`]: the f64 CPU oracle; [`tolerance`]: the FlashAttention tolerance rule.
pub mod backward;
pub mod config;
pub mod error;
pub mod forward;
pub mod heuristics;
pub mod primitives;
pub mod problem;
pub mod reference;
pub mod tolerance;

pub use config::{FlashConfig, ForwardPath};
pub use error::FlashError;
pub use forward::{flash_attention_forward, flash_attention_forward_on, plan, ForwardLaunch, ForwardTensors};
pub use heuristics::ForwardPlan;
pub use problem::{AttentionProblem, FloatKind, MaskKind, MAX_HEAD_DIM};
