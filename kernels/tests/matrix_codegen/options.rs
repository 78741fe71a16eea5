//! The matrix kernels' tuning options in their CUDA source (see `main.rs`): the softmax in
//! the plane, the gradient strips handed over in the plane, wide score rows, S and O staged in
//! one tile, 32 query rows a plane.
use super::*;

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
