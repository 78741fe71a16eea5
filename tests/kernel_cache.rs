//! `enable_kernel_cache` in a process of its own (CubeCL reads its configuration once per
//! process): it takes effect before any kernel (compiled kernels and autotune results), keeps
//! CubeCL's other settings, and is refused, changing nothing, once the configuration is in use.
use burn_flash_attn::{CubeclConfigError, enable_kernel_cache};
use cubecl::config::{CubeClRuntimeConfig, RuntimeConfig, cache::CacheConfig};

#[test]
fn the_kernel_cache_is_set_once_before_any_kernel() {
    let dir = std::env::temp_dir().join(format!("flash-kernel-cache-{}", std::process::id()));
    assert_eq!(enable_kernel_cache(&dir), Ok(()));
    let config = CubeClRuntimeConfig::get();
    match &config.compilation.cache {
        Some(CacheConfig::File(path)) => assert_eq!(path, &dir),
        other => panic!("the cache is {other:?}, not {}", dir.display()),
    }
    match &config.autotune.cache {
        CacheConfig::File(path) => assert_eq!(path, &dir.join("autotune"), "the autotune results beside the kernels"),
        other => panic!("the autotune cache is {other:?}"),
    }
    assert_eq!(enable_kernel_cache("elsewhere"), Err(CubeclConfigError::AlreadyConfigured));
    match &CubeClRuntimeConfig::get().compilation.cache {
        Some(CacheConfig::File(path)) => assert_eq!(path, &dir, "a refused call changes nothing"),
        other => panic!("the cache is {other:?}"),
    }
}
