//! The parser of `attention profile` (`benches/profile/tables.rs`, included here: the bench has
//! no test harness) on tables in CubeCL 0.10's format: WGPU's kernel names, and CUDA's, which
//! list the kernel's types after ` | ` (the per-launch lines beside the tables are skipped).
#[path = "../../benches/profile/tables.rs"]
mod tables;

use tables::{parse_duration, totals};

#[test]
fn cubecl_profiling_tables_are_summed_per_kernel() {
    let table = "\
|⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺| 
| Name            | Duration  | Num Computed | Ratio |
|⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼| 
| flash_forward   | 1.5ms     | 1            | 75 %  |
| preprocess      | 500µs     | 2            | 25 %  |
|⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼| 
| Total           | 2ms       | 3            | 100 % |
|⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯| 
";
    let twice = format!("{table}{table}");
    let kernels = totals(&twice);
    assert_eq!(kernels.len(), 2);
    assert_eq!(kernels["flash_forward"].launches, 2);
    assert!((kernels["flash_forward"].seconds - 3e-3).abs() < 1e-12);
    assert_eq!(kernels["preprocess"].launches, 4);
    assert!((kernels["preprocess"].seconds - 1e-3).abs() < 1e-12);
    assert_eq!(parse_duration("40ns"), Some(40e-9));

    let cuda = "\
| 3.980092852s | FlashAttentionForwardMmaKernel | bf16 | u32 | AsyncCopy | CudaRuntime
| Name                                                                  | Duration     | Num Computed | Ratio |
| FlashAttentionForwardMmaKernel | bf16 | u32 | AsyncCopy | CudaRuntime | 3.980092852s | 1            | 93 %  |
| PrngKernel | NormalFamily | CudaRuntime                               | 280.082043ms | 8            | 7 %   |
| Total                                                                 | 4.26s        | 9            | 100 % |
";
    let kernels = totals(cuda);
    assert_eq!(kernels.len(), 2, "{kernels:?}");
    let forward = kernels["FlashAttentionForwardMmaKernel | bf16 | u32 | AsyncCopy | CudaRuntime"];
    assert_eq!(forward.launches, 1);
    assert!((forward.seconds - 3.980092852).abs() < 1e-12);
    assert_eq!(kernels["PrngKernel | NormalFamily | CudaRuntime"].launches, 8);
    assert_eq!(parse_duration("1.25s"), Some(1.25));
}
