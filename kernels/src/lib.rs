pub mod error;
pub mod problem;
pub mod reference;
pub mod tolerance;
pub use error::FlashError;
pub use problem::{AttentionProblem, FloatKind, MaskKind, MAX_HEAD_DIM};
