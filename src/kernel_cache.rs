//! CubeCL's persistent kernel cache, turned on from code.
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
//! fn main() {
//!     // First thing, before any tensor is created.
//!     burn_flash_attn::enable_kernel_cache("target/kernel-cache").expect("CubeCL not configured yet");
//!     // ... build the model and train: kernels compiled by an earlier run are loaded, not compiled.
//! }
//! ```
use std::path::PathBuf;
use std::sync::Arc;

use cubecl::config::{CubeClRuntimeConfig, RuntimeConfig, cache::CacheConfig};

/// Why the kernel cache could not be turned on.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KernelCacheError {
    /// CubeCL had already read (or been given) its configuration, which it does once, at the
    /// first kernel or client: call [`enable_kernel_cache`] at the start of the program.
    #[error(
        "CubeCL's configuration is already in use (it is read once, at the first kernel or \
         client): enable the kernel cache at the start of the program, before any tensor"
    )]
    AlreadyConfigured,
}

/// Stores CubeCL's compiled kernels under `dir` (created when needed) and loads them from there
/// in later runs, on every runtime. The rest of the configuration is what CubeCL would read
/// itself: `cubecl.toml` / `burn.toml` in the working directory, then its environment
/// variables. Must come before any kernel or CubeCL client: afterwards CubeCL's configuration
/// is fixed and this returns [`KernelCacheError::AlreadyConfigured`], changing nothing.
pub fn enable_kernel_cache(dir: impl Into<PathBuf>) -> Result<(), KernelCacheError> {
    let mut state = CubeClRuntimeConfig::storage().lock();
    if state.is_some() {
        return Err(KernelCacheError::AlreadyConfigured);
    }
    let mut config = CubeClRuntimeConfig::from_current_dir().override_from_env();
    config.compilation.cache = Some(CacheConfig::File(dir.into()));
    *state = Some(Arc::new(config));
    Ok(())
}
