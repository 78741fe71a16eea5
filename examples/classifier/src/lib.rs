//! An encoder classifier on padded batches, trained with burn-train's `Learner`: the example
//! of a Burn model built from burn-nn's `TransformerEncoder` that switches to burn-flash-attn's
//! with the `flash` feature, which changes one `use` line (`model.rs`) and the backend type
//! (`flash_gpt::backend`). See `examples/classifier/README.md`.
use std::path::PathBuf;

pub mod data;
pub mod model;
pub mod output;
pub mod training;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("learning-rate schedule: {0}")]
    Schedule(String),
    #[error(transparent)]
    Experiment(#[from] flash_gpt::Error),
}
