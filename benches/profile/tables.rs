//! CubeCL's profiling tables, summed per kernel (`attention profile`; tested by
//! `tests/conformance/profile_tables.rs`, which includes this file: the bench has no harness).
use std::collections::BTreeMap;

/// One kernel's totals over the tables read.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct KernelTime {
    pub launches: usize,
    pub seconds: f64,
}

/// Sums the rows `| name | duration | launches | share |` of CubeCL's profiling tables in
/// `text` per kernel name (the header and `Total` rows skipped). The name may itself hold
/// ` | ` (on CUDA it lists the kernel's types: `FlashAttentionForwardMmaKernel | bf16 | u32 |
/// AsyncCopy | CudaRuntime`): the last three cells are the numbers, the rest is the name.
pub fn totals(text: &str) -> BTreeMap<String, KernelTime> {
    let mut kernels: BTreeMap<String, KernelTime> = BTreeMap::new();
    for line in text.lines() {
        let cells: Vec<&str> = line.trim().trim_matches('|').split(" | ").map(str::trim).collect();
        let [name @ .., duration, launches, _share] = cells.as_slice() else { continue };
        let (Some(seconds), Ok(launches)) = (parse_duration(duration), launches.parse::<usize>()) else {
            continue;
        };
        let name = name.join(" | ");
        if name.is_empty() || name == "Total" {
            continue;
        }
        let entry = kernels.entry(name).or_default();
        entry.launches += launches;
        entry.seconds += seconds;
    }
    kernels
}

/// A `Duration`'s `Debug` text (`1.5s`, `12.3ms`, `850.2µs`, `40ns`) in seconds.
pub fn parse_duration(text: &str) -> Option<f64> {
    // `Duration`'s Debug writes the micro sign U+00B5; the Greek mu and `us` are accepted too.
    let units = [("ns", 1e-9), ("\u{b5}s", 1e-6), ("\u{3bc}s", 1e-6), ("us", 1e-6), ("ms", 1e-3), ("s", 1.0)];
    units.iter().find_map(|(unit, scale)| text.strip_suffix(unit)?.parse::<f64>().ok().map(|v| v * scale))
}
