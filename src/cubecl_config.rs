//! CubeCL's configuration set from code: [`configure_cubecl`], and on it the persistent kernel
//! cache, [`enable_kernel_cache`]. CubeCL reads its configuration once, at the first kernel or
//! client, from `cubecl.toml` / `burn.toml` in the working directory and then its environment
//! variables; a configuration set before that replaces the reading.
//!
//! Every kernel configuration compiles on its first launch (nvrtc on CUDA, hiprtc on ROCm,
//! naga and the driver on WGPU), in every new process: the first training step of GPT-2-small
//! in bf16 on an H200 took 177 s, nearly all of it compiling (benches/RESULTS.md). CubeCL can
//! keep what it compiled in files and load it in the next process; it reads that setting once,
//! from `cubecl.toml` in the working directory (`[compilation] cache = { file = "DIR" }`) or
//! from a configuration set in code before the first kernel. [`enable_kernel_cache`] is the
//! latter, keeping everything else of `cubecl.toml` and CubeCL's environment variables.
//!
//! ```no_run
//! // First thing in `main`, before any tensor is created.
//! burn_flash_attn::enable_kernel_cache("target/kernel-cache").expect("CubeCL not configured yet");
//! // ... build the model and train: kernels compiled by an earlier run are loaded, not compiled.
//! ```
use std::path::PathBuf;
use std::sync::Arc;

use cubecl::config::{CubeClRuntimeConfig, RuntimeConfig, cache::CacheConfig};

/// Why CubeCL's configuration could not be set.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CubeclConfigError {
    /// CubeCL had already read (or been given) its configuration, which it does once, at the
    /// first kernel or client: configure it at the start of the program.
    #[error(
        "CubeCL's configuration is already in use (it is read once, at the first kernel or \
         client): configure it at the start of the program, before any tensor"
    )]
    AlreadyConfigured,
}

/// Sets CubeCL's configuration to what CubeCL would read itself (`cubecl.toml` / `burn.toml` in
/// the working directory, then its environment variables) changed by `edit`. Must come before
/// any kernel or CubeCL client: afterwards the configuration is fixed and this returns
/// [`CubeclConfigError::AlreadyConfigured`], changing nothing.
pub fn configure_cubecl(edit: impl FnOnce(&mut CubeClRuntimeConfig)) -> Result<(), CubeclConfigError> {
    let mut state = CubeClRuntimeConfig::storage().lock();
    if state.is_some() {
        return Err(CubeclConfigError::AlreadyConfigured);
    }
    let mut config = CubeClRuntimeConfig::from_current_dir().override_from_env();
    edit(&mut config);
    *state = Some(Arc::new(config));
    Ok(())
}

/// Stores CubeCL's compiled kernels under `dir` (created when needed) and loads them from there
/// in later runs, on every runtime, with the autotune results beside them (`dir/autotune`: which
/// matmul, reduce or fused kernel won for each shape, so a later run compiles only the winners;
/// CubeCL's default keeps them in the cargo `target` directory above the working directory, or
/// in the user's cache directory outside a cargo project). The rest of the configuration as
/// [`configure_cubecl`] reads it, and its error when CubeCL's configuration is already in use.
pub fn enable_kernel_cache(dir: impl Into<PathBuf>) -> Result<(), CubeclConfigError> {
    let dir = dir.into();
    configure_cubecl(|config| {
        config.autotune.cache = CacheConfig::File(dir.join("autotune"));
        config.compilation.cache = Some(CacheConfig::File(dir));
    })
}
