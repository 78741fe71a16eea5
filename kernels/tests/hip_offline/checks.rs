//! What the generated HIP text must show, read from the text itself (never compared with a
//! golden copy: cubecl's shared-array declaration order changes between runs).
use super::{GFX942_LOAD_BYTES, HipSource};
use super::variants::{KernelConfig, Variant};

/// Work-items of one wave on gfx942.
pub const WAVE: u32 = 64;
/// The dynamic shared array every cubecl HIP kernel carves its tiles from.
const DYNAMIC_SHARED: &str = "dynamic_shared_mem[";
/// What cubecl writes above each carved shared array: `// Shared array size: N, B bytes`.
const SHARED_ARRAY_COMMENT: &str = "// Shared array size: ";

/// Text that only a matrix-core kernel contains: rocWMMA calls, or the MFMA / WMMA builtins of
/// cubecl's intrinsic compiler.
pub fn uses_matrix_cores(source: &str) -> bool {
    source.contains("rocwmma::mma_sync")
        || source.contains("__builtin_amdgcn_mfma")
        || source.contains("__builtin_amdgcn_wmma")
}

/// Whether the source needs rocWMMA headers (the offline toolchain has none).
pub fn needs_rocwmma(source: &str) -> bool {
    source.contains("#include <rocwmma/")
}

/// The shared arrays as `(offset, bytes)`, in declaration order.
pub fn shared_arrays(source: &str) -> Vec<(usize, usize)> {
    let mut arrays = Vec::new();
    let mut lines = source.lines();
    while let Some(line) = lines.next() {
        let Some(sizes) = line.trim().strip_prefix(SHARED_ARRAY_COMMENT) else {
            continue;
        };
        let bytes = sizes
            .split(", ")
            .nth(1)
            .and_then(|b| b.strip_suffix(" bytes"))
            .and_then(|b| b.parse().ok())
            .unwrap_or_else(|| panic!("unexpected shared array comment: {line}"));
        let declaration = lines.next().unwrap_or_default();
        let offset = declaration
            .split(DYNAMIC_SHARED)
            .nth(1)
            .and_then(|rest| rest.split(']').next())
            .and_then(|o| o.parse().ok())
            .unwrap_or_else(|| panic!("unexpected shared array declaration: {declaration}"));
        arrays.push((offset, bytes));
    }
    arrays
}

/// The work-items per workgroup the source declares (`__launch_bounds__(N)`).
pub fn launch_bounds(source: &str) -> Option<u32> {
    let rest = source.split("__launch_bounds__(").nth(1)?;
    rest.split(')').next()?.trim().parse().ok()
}

/// Everything wrong with one variant's source; empty when it passes.
///
/// - no `#error` (cubecl's marker for what the dialect cannot express, e.g. `sync_plane`);
/// - shared memory: the only `__shared__` is cubecl's dynamic array; the carved arrays do not
///   overlap and end within `lds_bytes`; the launch size cubecl passes is within it too, and
///   within the planner's estimate (so the planner's "fits" is a safe bound);
/// - `__launch_bounds__` is the cube size, a whole number of waves;
/// - matrix-core calls appear exactly where the routing claims the matrix path.
pub fn violations(
    variant: &Variant,
    hip: &HipSource,
    lds_bytes: usize,
) -> Vec<String> {
    let source = &hip.source;
    let mut wrong = Vec::new();
    if let Some(line) = source.lines().find(|l| l.contains("#error")) {
        wrong.push(format!("#error in the source: {}", line.trim()));
    }
    let static_shared = source
        .lines()
        .filter(|l| l.contains("__shared__") && !l.contains("dynamic_shared_mem[]"))
        .count();
    if static_shared > 0 {
        wrong.push(format!(
            "{static_shared} __shared__ declarations besides cubecl's dynamic array"
        ));
    }
    let mut arrays = shared_arrays(source);
    arrays.sort();
    let end = arrays
        .iter()
        .map(|&(offset, bytes)| offset + bytes)
        .max()
        .unwrap_or(0);
    if let Some(pair) = arrays.windows(2).find(|w| w[0].0 + w[0].1 > w[1].0) {
        wrong.push(format!("shared arrays overlap: {pair:?}"));
    }
    if end > hip.shared_memory_bytes || hip.shared_memory_bytes > lds_bytes {
        wrong.push(format!(
            "shared memory: arrays end at {end}, launch passes {}, the LDS has {lds_bytes}",
            hip.shared_memory_bytes
        ));
    }
    let estimate = match variant.kernel {
        KernelConfig::Forward(config) => config.shared_memory_bytes(),
        KernelConfig::Backward(config) => config.shared_memory_bytes(),
        KernelConfig::Preprocess(shape) => shape.shared_memory_bytes(GFX942_LOAD_BYTES),
    };
    if hip.shared_memory_bytes > estimate {
        wrong.push(format!(
            "shared memory {} above the planner's estimate {estimate}",
            hip.shared_memory_bytes
        ));
    }
    if !hip.cube_size.is_multiple_of(WAVE) {
        wrong.push(format!(
            "cube of {} work-items: not a whole number of waves",
            hip.cube_size
        ));
    }
    if launch_bounds(source) != Some(hip.cube_size) {
        wrong.push(format!(
            "__launch_bounds__ {:?} differs from the cube size {}",
            launch_bounds(source),
            hip.cube_size
        ));
    }
    match (variant.claims_matrix(), uses_matrix_cores(source)) {
        (true, false) => wrong.push("matrix path claimed, but no MFMA / rocWMMA call".to_string()),
        (false, true) => wrong.push("MFMA / rocWMMA calls outside the matrix path".to_string()),
        _ => {}
    }
    wrong
}
