//! The seed experiment of burn-flash-attn: a GPT-2-shaped byte-level model trained with
//! `Flash<Autodiff<X>>` and with `Autodiff<X>`, the same seed, data and model code; only the
//! cargo feature `flash` differs. See `examples/gpt/README.md`.
use std::path::PathBuf;

pub mod backend;
pub mod compare;
pub mod data;
pub mod kernel_cache;
pub mod learner;
pub mod memory;
pub mod model;
pub mod plot;
pub mod record;
pub mod train;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}:{line}: expected `{}`", record::HEADER)]
    Csv { path: PathBuf, line: usize },
    #[error("the corpus has {bytes} bytes; one training window needs {needed}")]
    CorpusTooSmall { bytes: usize, needed: usize },
    #[error("unknown preset `{0}` (tiny, mid, gpt2-small)")]
    UnknownPreset(String),
    #[error("the loss tensor read back empty")]
    EmptyLoss,
    #[error("{0} and {1} share no step to compare")]
    NothingToCompare(PathBuf, PathBuf),
    #[error(transparent)]
    CubeclConfig(#[from] burn_flash_attn::CubeclConfigError),
    #[error("no device to train on")]
    NoDevice,
    #[error("plot: {0}")]
    Plot(String),
}
