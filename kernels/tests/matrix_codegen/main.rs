//! The matrix path cannot run without cmma (lavapipe has none). This test expands its kernel
//! for H200-like properties (plane size 32, 227 KiB of shared memory, f16/bf16 16x16x16 cmma)
//! and compiles it to CUDA C++ with cubecl's own CUDA compiler, no device needed: it proves
//! the kernel expands for every config the planner picks (tails, odd dims, all options) and
//! that the source has the wmma calls and fits the shared memory. It does not prove numerics:
//! `cargo test --no-default-features --features cuda --test forward` on a GPU does.
//! `FLASH_DUMP_DIR=dir` writes the sources there (e.g. to compile them with nvcc). The tuning
//! options' sources are checked in `options.rs`.
#[path = "../support/mod.rs"]
mod support;
mod options;

use burn_flash_attn_kernels::backward::config::{GradientConfig, MatrixGradientConfig};
use burn_flash_attn_kernels::backward::dq_sink::{AtomicDq, NoDq};
use burn_flash_attn_kernels::backward::matrix::matrix_dkdv_kernel::MatrixDkdvKernel;
use burn_flash_attn_kernels::backward::matrix::matrix_dq_kernel::MatrixDqKernel;
use burn_flash_attn_kernels::backward::{BackwardKernel, BackwardPath};
use burn_flash_attn_kernels::config::{ForwardConfig, ForwardPath, MatrixConfig};
use burn_flash_attn_kernels::plan::{self, DeviceCaps, DqAccumulation, Layout};
use burn_flash_attn_kernels::forward::matrix::flash_attention_forward_matrix_kernel::FlashAttentionForwardMatrixKernel;
use burn_flash_attn_kernels::{AttentionProblem, FloatKind, MaskKind};
use burn_flash_attn_kernels::primitives::tile_mma::Cmma;
use cubecl::prelude::*;
use burn_flash_attn_kernels::primitives::tile_io::LOAD_BYTES;
use support::cuda_codegen::{assert_fits_the_plan, cuda_source, dump, settings};
use support::kernel_args::{score_params, tensor};
use support::{TestRuntime, planning, problem};

/// The CUDA source of the matrix forward for `config`, reading q, k, v in vectors of `width`.
fn matrix_source<F: Float, M: Int>(
    client: &support::Client,
    config: MatrixConfig,
    width: usize,
) -> (String, usize) {
    let tensor = || TensorCompilationArg { inplace: None };
    cuda_source(FlashAttentionForwardMatrixKernel::<F, F, M, Cmma, support::TestRuntime>::new(
        settings(CubeDim::new_2d(config.plane_size, config.num_planes())),
        client.clone(),
        tensor(),
        tensor(),
        tensor(),
        tensor(),
        tensor(),
        tensor(),
        tensor(),
        tensor(),
        score_params(),
        width,
        config,
    ))
}

#[test]
fn matrix_path_expands_to_cuda_for_h200_configs() {
    let client = support::client();
    let props = support::h200(client.properties());
    let all_options = |p: AttentionProblem| AttentionProblem {
        softcap: Some(2.0),
        causal: true,
        mask: Some(MaskKind::U8),
        has_bias: true,
        quiet_softmax: true,
        ..p
    };
    let cases = [
        problem(FloatKind::F16, 64, 64, 113, 203),
        problem(FloatKind::BF16, 128, 128, 1024, 1024),
        problem(FloatKind::F16, 33, 80, 77, 90),
        problem(FloatKind::BF16, 256, 256, 113, 203),
        all_options(problem(FloatKind::F16, 96, 64, 203, 113)),
        all_options(problem(FloatKind::BF16, 128, 128, 4096, 4096)),
    ];
    for case in cases {
        // The H200 picks the mma path for most of these; the matrix path is forced here.
        let plan = planning::forward_plan(&props, &case, Some(ForwardPath::Matrix)).expect("planned");
        let ForwardConfig::Matrix(config) = plan.config else {
            panic!("{case:?}: {plan}, not the matrix path");
        };
        // Rows of whole 16-byte vectors (Burn's contiguous tensors, where the dims allow) and
        // element-wise reads.
        let whole = |w: &usize| case.head_dim.is_multiple_of(*w) && case.val_dim.is_multiple_of(*w);
        for width in [LOAD_BYTES / case.dtype.size(), 1].into_iter().filter(whole) {
            let (source, shared) = match (case.dtype, case.mask) {
                (FloatKind::F16, Some(MaskKind::U8)) => {
                    matrix_source::<half::f16, u8>(&client, config, width)
                }
                (FloatKind::F16, _) => matrix_source::<half::f16, u32>(&client, config, width),
                (FloatKind::BF16, Some(MaskKind::U8)) => {
                    matrix_source::<half::bf16, u8>(&client, config, width)
                }
                (FloatKind::BF16, _) => matrix_source::<half::bf16, u32>(&client, config, width),
                (FloatKind::F32, _) => unreachable!("f32 takes the portable path"),
            };
            let (dtype, hd, dv) = (case.dtype, case.head_dim, case.val_dim);
            dump(&format!("matrix_{dtype:?}_hd{hd}_dv{dv}_w{width}.cu"), &source);
            println!(
                "{case:?}: {} ({} bytes of CUDA, {shared} bytes of shared memory)",
                plan,
                source.len()
            );
            assert!(
                source.contains("mma_sync"),
                "{case:?}: no wmma::mma_sync in the source"
            );
            let what = format!("{case:?}");
            assert_fits_the_plan(&what, &source, shared, config.shared_memory_bytes());
        }
    }
}

/// The CUDA source of a matrix gradient kernel for `config` (dQ of the dK/dV kernel to atomic
/// adds where the config says so, u32 mask), reading q, k, v, d_out in vectors of `width`.
fn gradient_source<F: Float>(
    client: &support::Client,
    config: MatrixGradientConfig,
    width: usize,
) -> String {
    gradient_source_and_shared::<F>(client, config, width).0
}

/// [`gradient_source`] and the shared memory the kernel declares, in bytes.
fn gradient_source_and_shared<F: Float>(
    client: &support::Client,
    config: MatrixGradientConfig,
    width: usize,
) -> (String, usize) {
    let settings = settings(CubeDim::new_2d(config.plane_size, config.planes()));
    match (config.kernel, config.atomic_dq, config.f32_tiles) {
        (BackwardKernel::KeyValue, atomic, f32_tiles) => {
            macro_rules! dkdv {
                ($tile:ty, $sink:ty) => {
                    cuda_source(MatrixDkdvKernel::<F, $tile, u32, Cmma, $sink, TestRuntime>::new(
                        settings, client.clone(), tensor(), tensor(), tensor(), tensor(), tensor(),
                        tensor(), tensor(), tensor(), tensor(), tensor(), tensor(), tensor(),
                        score_params(), width, config,
                    ))
                };
            }
            match (atomic, f32_tiles) {
                (false, false) => dkdv!(F, NoDq),
                (true, false) => dkdv!(F, AtomicDq),
                (false, true) => dkdv!(f32, NoDq),
                (true, true) => dkdv!(f32, AtomicDq),
            }
        }
        (BackwardKernel::Query, _, false) => {
            cuda_source(MatrixDqKernel::<F, F, u32, Cmma, TestRuntime>::new(
                settings, client.clone(), tensor(), tensor(), tensor(), tensor(), tensor(),
                tensor(), tensor(), tensor(), tensor(), tensor(), score_params(), width, config,
            ))
        }
        (BackwardKernel::Query, _, true) => {
            cuda_source(MatrixDqKernel::<F, f32, u32, Cmma, TestRuntime>::new(
                settings, client.clone(), tensor(), tensor(), tensor(), tensor(), tensor(),
                tensor(), tensor(), tensor(), tensor(), tensor(), score_params(), width, config,
            ))
        }
    }
}

/// Where q, k, v (and d_out) rows are whole 16-byte vectors, the matrix kernels take them as
/// vectors (`__nv_bfloat16_8` arguments, one load per vector) and store them into tiles of
/// their own type as vectors; into f32 tiles they go element by element, converted. With a
/// width of 1 (WGPU, strided views) no vector type appears at all.
#[test]
fn matrix_kernels_read_rows_in_vectors_where_they_are_whole() {
    let client = support::client();
    let props = support::h200(client.properties());
    let caps = DeviceCaps::new(&props, planning::SIMULATED);
    let vector = "__nv_bfloat16_8";
    let vector_store = format!("reinterpret_cast< {vector}*>(shared_memory");
    for head_dim in [64, 128] {
        let case = problem(FloatKind::BF16, head_dim, head_dim, 203, 203);
        let plan = planning::forward_plan(&props, &case, Some(ForwardPath::Matrix));
        let ForwardConfig::Matrix(config) = plan.expect("planned").config else { panic!() };
        for width in [8, 1] {
            let (source, _) = matrix_source::<half::bf16, u32>(&client, config, width);
            assert_eq!(source.contains(&format!("const {vector}* __restrict__")), width == 8);
            assert_eq!(source.contains(&vector_store), width == 8, "forward, width {width}");
        }
        let (atomic, kernel) = (DqAccumulation::Atomic, DqAccumulation::Kernel);
        let runs = [(false, atomic), (false, kernel), (true, kernel)];
        for (f32_tiles, dq) in runs {
            let tuning = planning::tuning()
                .with_backward_path(Some(BackwardPath::Matrix))
                .with_backward_dq(Some(dq));
            for kernel in [BackwardKernel::KeyValue, BackwardKernel::Query] {
                let plan = plan::backward::gradient(&caps, &case, Layout::CHUNKED, &tuning, kernel);
                let GradientConfig::Matrix(planned) = plan.expect("planned").config else {
                    panic!("{case:?} {kernel:?}: not the matrix path")
                };
                // The f32 tiles of gfx942 (the CUDA planner keeps bf16 tiles): the same blocks
                // fit an H200 with room to spare.
                let config = if f32_tiles {
                    MatrixGradientConfig { f32_tiles, elem_bytes: 4, ..planned }
                } else {
                    planned
                };
                for width in [8, 1] {
                    let source = gradient_source::<half::bf16>(&client, config, width);
                    let name = format!("matrix_{kernel:?}_{f32_tiles}_{dq:?}_{head_dim}_w{width}");
                    dump(&format!("{name}.cu"), &source);
                    let what = format!("{kernel:?}, f32 tiles {f32_tiles}, {dq:?}, width {width}");
                    assert!(source.contains("mma_sync"), "{what}: no wmma");
                    let args = source.matches(&format!("const {vector}* __restrict__")).count();
                    assert_eq!(args, if width == 8 { 4 } else { 0 }, "{what}: vector arguments");
                    let stores = source.contains(&vector_store);
                    assert_eq!(stores, width == 8 && !f32_tiles, "{what}: vector stores");
                }
            }
        }
    }
}

/// Where the config fetches ahead (`prefetch`, asked for here at head dim 64), the matrix
/// kernels load each streamed block in two places: for the first block before its stores, and
/// for the next one right after the block's sync (`row_stream`); without it, in one. Counted as
/// the reads of the streamed tensors' buffers (kernel arguments in order: q, k, v, d_out).
#[test]
fn matrix_kernels_fetch_the_next_block_ahead_where_asked() {
    let client = support::client();
    let props = support::h200(client.properties());
    let caps = DeviceCaps::new(&props, planning::SIMULATED);
    let reads = |source: &str, buffer: usize| source.matches(&format!("= buffer_{buffer}[")).count();
    let case = problem(FloatKind::BF16, 64, 64, 203, 203);
    let plan = planning::forward_plan(&props, &case, Some(ForwardPath::Matrix));
    let ForwardConfig::Matrix(planned) = plan.expect("planned").config else { panic!() };
    let config = MatrixConfig { prefetch: true, ..planned };
    let without = MatrixConfig { prefetch: false, ..planned };
    let (ahead, _) = matrix_source::<half::bf16, u32>(&client, config, 8);
    let (in_place, _) = matrix_source::<half::bf16, u32>(&client, without, 8);
    for buffer in [1, 2] {
        assert!(reads(&in_place, buffer) > 0, "forward reads buffer {buffer}");
        assert_eq!(reads(&ahead, buffer), 2 * reads(&in_place, buffer), "forward, {buffer}");
    }
    let tuning = planning::tuning()
        .with_backward_path(Some(BackwardPath::Matrix))
        .with_matrix_prefetch(Some(true));
    for (kernel, streamed) in [(BackwardKernel::KeyValue, [0, 3]), (BackwardKernel::Query, [1, 2])] {
        let plan = plan::backward::gradient(&caps, &case, Layout::CHUNKED, &tuning, kernel);
        let GradientConfig::Matrix(config) = plan.expect("planned").config else { panic!() };
        assert!(config.prefetch, "{kernel:?}: head dim 64 fetches ahead");
        let ahead = gradient_source::<half::bf16>(&client, config, 8);
        let without = MatrixGradientConfig { prefetch: false, ..config };
        let in_place = gradient_source::<half::bf16>(&client, without, 8);
        for buffer in streamed {
            assert!(reads(&in_place, buffer) > 0, "{kernel:?} reads buffer {buffer}");
            assert_eq!(reads(&ahead, buffer), 2 * reads(&in_place, buffer), "{kernel:?}, {buffer}");
        }
    }
}
