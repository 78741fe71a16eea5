//! The examples' `--kernel-cache DIR` / `--no-kernel-cache` options: CubeCL's persistent kernel
//! cache through `burn_flash_attn::enable_kernel_cache`, on by default.
use std::path::PathBuf;

use burn_flash_attn::{CubeclConfigError, enable_kernel_cache};

/// Where compiled kernels are kept between runs unless `--kernel-cache` says otherwise.
pub const DEFAULT_DIR: &str = "target/kernel-cache";

#[derive(clap::Args, Debug, Clone)]
pub struct KernelCacheArgs {
    /// CubeCL's persistent kernel cache: kernels compiled by an earlier run load from here.
    #[arg(long, default_value = DEFAULT_DIR)]
    pub kernel_cache: PathBuf,
    /// Compile every kernel afresh (no persistent cache).
    #[arg(long)]
    pub no_kernel_cache: bool,
}

impl KernelCacheArgs {
    /// Turns the cache on (unless `--no-kernel-cache`); call before any tensor exists.
    pub fn enable(&self) -> Result<(), CubeclConfigError> {
        if self.no_kernel_cache { Ok(()) } else { enable_kernel_cache(&self.kernel_cache) }
    }
}
