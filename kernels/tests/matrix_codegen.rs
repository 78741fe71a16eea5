//! The matrix path cannot run without cmma (lavapipe has none). This test expands its kernel
//! for H200-like properties (plane size 32, 227 KiB of shared memory, f16/bf16 16x16x16 cmma)
//! and compiles it to CUDA C++ with cubecl's own CUDA compiler, no device needed: it proves
//! the kernel expands for every config the planner picks (tails, odd dims, all options) and
//! that the source has the wmma calls and fits the shared memory. It does not prove numerics:
//! `cargo test --no-default-features --features cuda --test forward` on a GPU does.
//! `FLASH_DUMP_DIR=dir` writes the sources there (e.g. to compile them with nvcc).
mod support;

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

/// Where the matrix forward keeps its softmax in the plane (`Tuning::matrix_plane_softmax`, on
/// CUDA: plane shuffles and `__syncwarp`), the rows' maxima and sums are warp shuffles and the
/// rescale of O a warp vote, and each key/value block synchronizes the cube twice instead of
/// five times (K / V stored, S stored, the maxima, the sums, the block done), and its rare
/// rescale of O the plane alone (two syncs): the kernel has five `__syncthreads` fewer in each
/// of its two block passes (the unmasked and the masked one).
#[test]
fn matrix_forward_keeps_its_softmax_in_the_plane_where_asked() {
    let client = support::client();
    let props = support::h200(client.properties());
    let case = problem(FloatKind::BF16, 64, 64, 203, 203);
    let tuned = |on| {
        let tuning = planning::tuning()
            .with_forward_path(Some(ForwardPath::Matrix))
            .with_matrix_plane_softmax(Some(on));
        let caps = DeviceCaps::new(&props, planning::SIMULATED);
        let plan = planning::forward_plan_tuned(&caps, &case, Layout::CHUNKED, &tuning);
        let plan = plan.expect("planned");
        let ForwardConfig::Matrix(config) = plan.config else { panic!("{plan}") };
        config
    };
    let (plane, cube) = (tuned(true), tuned(false));
    assert!(plane.plane_shuffles && plane.plane_sync, "CUDA has plane shuffles and syncs");
    assert!(!cube.plane_shuffles && !cube.plane_sync);
    assert!(plane.shared_memory_bytes() < cube.shared_memory_bytes(), "no partials");
    let (in_plane, plane_shared) = matrix_source::<half::bf16, u32>(&client, plane, 8);
    let (through_shared, cube_shared) = matrix_source::<half::bf16, u32>(&client, cube, 8);
    assert_fits_the_plan("plane softmax", &in_plane, plane_shared, plane.shared_memory_bytes());
    assert_fits_the_plan("cube softmax", &through_shared, cube_shared, cube.shared_memory_bytes());
    dump("matrix_BF16_hd64_plane_softmax.cu", &in_plane);
    dump("matrix_BF16_hd64_shared_softmax.cu", &through_shared);
    for call in ["__shfl_xor_sync", "__any_sync", "__syncwarp"] {
        assert!(in_plane.contains(call), "plane softmax: no {call}");
        assert!(!through_shared.contains(call), "through shared memory: {call}");
    }
    let syncs = |source: &str| source.matches("__syncthreads").count();
    println!("__syncthreads: {} in the plane, {} through shared memory", syncs(&in_plane), syncs(&through_shared));
    assert_eq!(syncs(&through_shared) - syncs(&in_plane), 2 * 5, "five cube syncs fewer a pass");
}

/// The gradient kernels with `Tuning::matrix_plane_softmax` on CUDA: each plane hands its
/// strips of S / dP and P / dS over with `__syncwarp`, two cube syncs fewer per inner block
/// (one in the one pass, whose dQ share reads every plane's dS).
#[test]
fn matrix_gradients_hand_their_strips_over_within_the_plane_where_asked() {
    let client = support::client();
    let props = support::h200(client.properties());
    let caps = DeviceCaps::new(&props, planning::SIMULATED);
    let case = problem(FloatKind::BF16, 64, 64, 203, 203);
    let syncs = |source: &str| source.matches("__syncthreads").count();
    for (kernel, dq, fewer) in [
        (BackwardKernel::KeyValue, DqAccumulation::Kernel, 2),
        (BackwardKernel::KeyValue, DqAccumulation::Atomic, 1),
        (BackwardKernel::Query, DqAccumulation::Kernel, 2),
    ] {
        let tuning = planning::tuning()
            .with_backward_path(Some(BackwardPath::Matrix))
            .with_matrix_plane_softmax(Some(true));
        let plan = plan::backward::gradient(&caps, &case, Layout::CHUNKED, &tuning, kernel);
        let GradientConfig::Matrix(config) = plan.expect("planned").config else { panic!() };
        // The one pass is chosen after the blocks (`plan::backward::backward`).
        let config = MatrixGradientConfig { atomic_dq: dq == DqAccumulation::Atomic, ..config };
        assert!(config.plane_sync, "{kernel:?}: CUDA has plane syncs");
        let in_plane = gradient_source::<half::bf16>(&client, config, 8);
        let cube = gradient_source::<half::bf16>(&client, MatrixGradientConfig { plane_sync: false, ..config }, 8);
        assert!(in_plane.contains("__syncwarp") && !cube.contains("__syncwarp"), "{kernel:?}");
        dump(&format!("matrix_{kernel:?}_{dq:?}_plane_sync.cu"), &in_plane);
        dump(&format!("matrix_{kernel:?}_{dq:?}_cube_sync.cu"), &cube);
        assert_eq!(syncs(&cube) - syncs(&in_plane), fewer, "{kernel:?}, {dq:?}");
    }
}

/// With `Tuning::matrix_wide_scores` the matrix forward's S rows are 32 bytes longer and the
/// kernel declares the shared memory the planner counts for them.
#[test]
fn matrix_forward_widens_its_score_rows_where_asked() {
    let client = support::client();
    let props = support::h200(client.properties());
    let case = problem(FloatKind::BF16, 64, 64, 203, 203);
    let tuning = planning::tuning()
        .with_forward_path(Some(ForwardPath::Matrix))
        .with_matrix_wide_scores(Some(true));
    let caps = DeviceCaps::new(&props, planning::SIMULATED);
    let plan = planning::forward_plan_tuned(&caps, &case, Layout::CHUNKED, &tuning);
    let plan = plan.expect("planned");
    let ForwardConfig::Matrix(config) = plan.config else { panic!("{plan}") };
    assert!(config.wide_scores && config.staggered, "{config:?}");
    let (source, shared) = matrix_source::<half::bf16, u32>(&client, config, 8);
    dump("matrix_BF16_hd64_wide_scores.cu", &source);
    assert_fits_the_plan("wide scores", &source, shared, config.shared_memory_bytes());
}

/// With `Tuning::matrix_shared_stage` the matrix forward declares S's tile once for S and O's
/// staging: the shared memory the planner counts, less than the same blocks apart, at 16 and 32
/// rows a plane (dumped for the offline sm_90a report).
#[test]
fn matrix_forward_stages_s_and_o_in_one_tile_where_asked() {
    let client = support::client();
    let props = support::h200(client.properties());
    let caps = DeviceCaps::new(&props, planning::SIMULATED);
    for (dtype, head_dim, rows) in [(FloatKind::F16, 64, 16), (FloatKind::F16, 64, 32)] {
        let case = problem(dtype, head_dim, head_dim, 203, 203);
        let tuning = planning::tuning()
            .with_forward_path(Some(ForwardPath::Matrix))
            .with_matrix_plane_rows(Some(rows))
            .with_matrix_shared_stage(Some(true));
        let plan = planning::forward_plan_tuned(&caps, &case, Layout::CHUNKED, &tuning);
        let plan = plan.expect("planned");
        let ForwardConfig::Matrix(config) = plan.config else { panic!("{plan}") };
        assert!(config.shared_stage, "{config:?}");
        let apart = MatrixConfig { shared_stage: false, ..config };
        let what = format!("{dtype:?} head dim {head_dim}, {rows} rows");
        let (source, shared) = matrix_source::<half::f16, u32>(&client, config, 8);
        let (apart_source, apart_shared) = matrix_source::<half::f16, u32>(&client, apart, 8);
        dump(&format!("matrix_F16_hd{head_dim}_rows{rows}_shared_stage.cu"), &source);
        dump(&format!("matrix_F16_hd{head_dim}_rows{rows}_apart.cu"), &apart_source);
        assert_fits_the_plan(&what, &source, shared, config.shared_memory_bytes());
        assert_fits_the_plan(&what, &apart_source, apart_shared, apart.shared_memory_bytes());
        assert!(shared < apart_shared, "{what}: {shared} bytes, {apart_shared} apart");
    }
}

/// With `Tuning::matrix_plane_rows` = 32 each plane of the matrix forward runs two row tiles
/// (one unit a row on the H200's 32-unit planes): the kernel declares the shared memory the
/// planner counts, and loads fewer fragments per product than with 16 rows a plane (each K and V
/// fragment once for both row tiles).
#[test]
fn matrix_forward_takes_32_rows_a_plane_where_asked() {
    let client = support::client();
    let props = support::h200(client.properties());
    let caps = DeviceCaps::new(&props, planning::SIMULATED);
    let case = problem(FloatKind::BF16, 64, 64, 203, 203);
    let source_of = |rows| {
        let tuning = planning::tuning()
            .with_forward_path(Some(ForwardPath::Matrix))
            .with_matrix_plane_rows(Some(rows));
        let plan = planning::forward_plan_tuned(&caps, &case, Layout::CHUNKED, &tuning);
        let plan = plan.expect("planned");
        let ForwardConfig::Matrix(config) = plan.config else { panic!("{plan}") };
        assert_eq!(config.plane_rows(), rows, "{plan}");
        let (source, shared) = matrix_source::<half::bf16, u32>(&client, config, 8);
        assert_fits_the_plan(&format!("{rows} rows"), &source, shared, config.shared_memory_bytes());
        source
    };
    let (rows16, rows32) = (source_of(16), source_of(32));
    dump("matrix_BF16_hd64_rows32.cu", &rows32);
    // Fragment loads per product, in the unrolled source.
    let loads_per_product = |source: &str| {
        source.matches("load_matrix_sync").count() as f64 / source.matches("mma_sync").count() as f64
    };
    let (fewer, more) = (loads_per_product(&rows32), loads_per_product(&rows16));
    assert!(fewer < more, "loads per product: 32 rows {fewer:.2}, 16 rows {more:.2}");
}

/// With `Tuning::matrix_wide_scores` the gradient kernels' S and dP rows are 32 bytes longer
/// (their units pairing a strip's rows two apart) and each kernel declares the shared memory
/// the planner counts for them (within its estimate).
#[test]
fn matrix_gradients_widen_their_score_rows_where_asked() {
    let client = support::client();
    let props = support::h200(client.properties());
    let caps = DeviceCaps::new(&props, planning::SIMULATED);
    let case = problem(FloatKind::BF16, 64, 64, 203, 203);
    for (kernel, dq) in [
        (BackwardKernel::KeyValue, DqAccumulation::Kernel),
        (BackwardKernel::KeyValue, DqAccumulation::Atomic),
        (BackwardKernel::Query, DqAccumulation::Kernel),
    ] {
        let planned = |wide| {
            let tuning = planning::tuning()
                .with_backward_path(Some(BackwardPath::Matrix))
                .with_matrix_wide_scores(Some(wide));
            let plan = plan::backward::gradient(&caps, &case, Layout::CHUNKED, &tuning, kernel);
            let GradientConfig::Matrix(config) = plan.expect("planned").config else { panic!() };
            MatrixGradientConfig { atomic_dq: dq == DqAccumulation::Atomic, ..config }
        };
        let (narrow, wide) = (planned(false), planned(true));
        assert!(wide.wide_scores && !narrow.wide_scores, "{kernel:?}");
        assert_eq!(wide.score_stride(), narrow.score_stride() + 4, "{kernel:?}: 16 more bytes");
        let (_, narrow_shared) = gradient_source_and_shared::<half::bf16>(&client, narrow, 8);
        let (source, shared) = gradient_source_and_shared::<half::bf16>(&client, wide, 8);
        dump(&format!("matrix_{kernel:?}_{dq:?}_wide_scores.cu"), &source);
        let what = format!("{kernel:?}, {dq:?}, wide scores");
        // The planner's count is an upper bound (the dQ kernel's unused P tile, one tile's
        // worth, is dropped by the compiler); the widening it counts exactly.
        let planned = wide.shared_memory_bytes();
        assert!(shared <= planned && !source.contains("#error"), "{what}: {shared} > {planned}");
        let widened = planned - narrow.shared_memory_bytes();
        assert_eq!(shared - narrow_shared, widened, "{what}: S and dP rows 16 bytes longer");
    }
}
