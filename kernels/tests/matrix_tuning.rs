//! The matrix kernels' tuning options as the planner applies them, on MI300X and H200
//! properties built on the test client: 16-byte vector loads, the next block fetched ahead
//! within its register budget, the forward's staggered rows, the softmax kept in each plane.
mod support;

use burn_flash_attn_kernels::plan::{DeviceCaps, Layout, Tuning};
use burn_flash_attn_kernels::{FloatKind, ForwardConfig, ForwardPath, MatrixConfig};
use cubecl::ir::DeviceProperties;

use support::planning::planner_problem as problem;
use support::{h200, mi300x, planning};

#[test]
fn matrix_plans_read_in_vectors_unless_the_tuning_turns_it_off() {
    use burn_flash_attn_kernels::backward::BackwardPath;
    use burn_flash_attn_kernels::backward::config::GradientConfig;
    use burn_flash_attn_kernels::plan;
    let client = support::client();
    let caps_of = |props: &DeviceProperties, runtime: &'static str| (props.clone(), runtime);
    let (h200, mi300x) = (h200(client.properties()), mi300x(client.properties()));
    for (props, runtime) in [caps_of(&h200, planning::SIMULATED), caps_of(&mi300x, "hip")] {
        let caps = DeviceCaps::new(&props, runtime);
        for (asked, vectors) in [(None, true), (Some(false), false), (Some(true), true)] {
            let tuning = Tuning::default()
                .with_forward_path(Some(ForwardPath::Matrix))
                .with_backward_path(Some(BackwardPath::Matrix))
                .with_matrix_vector_loads(asked);
            let case = problem(FloatKind::F16, 64);
            let forward = plan::forward::forward(&caps, &case, Layout::CHUNKED, &tuning);
            let ForwardConfig::Matrix(config) = forward.expect("planned").config else { panic!() };
            assert_eq!(config.vector_loads, vectors, "{runtime}: forward");
            let backward = plan::backward::backward(&caps, &case, Layout::CHUNKED, &tuning);
            let backward = backward.expect("planned");
            for gradient in [&backward.dkdv, &backward.dq] {
                let GradientConfig::Matrix(config) = gradient.config else { panic!("{gradient}") };
                assert_eq!(config.vector_loads, vectors, "{runtime}: {gradient}");
            }
        }
    }
}

#[test]
fn matrix_plans_fetch_ahead_where_the_registers_allow() {
    use burn_flash_attn_kernels::backward::BackwardPath;
    use burn_flash_attn_kernels::backward::config::GradientConfig;
    use burn_flash_attn_kernels::plan::{self, MATRIX_PREFETCH_REGISTERS};
    use burn_flash_attn_kernels::primitives::row_stream::RowStreamShape;
    // 32-bit registers per unit that hold one streamed block of 16-byte vectors of 2-byte
    // elements (8 per vector).
    let registers = |shape: RowStreamShape| {
        let vectors = |dim: u32| (shape.rows * dim / 8).div_ceil(shape.units);
        (vectors(shape.first.dim_tile) + vectors(shape.second.dim_tile)) * 4
    };
    let client = support::client();
    let (h200, mi300x) = (h200(client.properties()), mi300x(client.properties()));
    for (props, runtime) in [(&h200, planning::SIMULATED), (&mi300x, "hip")] {
        let caps = DeviceCaps::new(props, runtime);
        for head_dim in [32, 64, 128] {
            // Asked for (with vector loads) it is planned where it fits; off by default, when
            // turned off and without vector loads.
            let on = Some(true);
            let cases = [(on, None), (None, None), (Some(false), None), (on, Some(false))];
            for (prefetch, vectors) in cases {
                let tuning = Tuning::default()
                    .with_forward_path(Some(ForwardPath::Matrix))
                    .with_backward_path(Some(BackwardPath::Matrix))
                    .with_matrix_vector_loads(vectors)
                    .with_matrix_prefetch(prefetch);
                let asked = prefetch == Some(true) && vectors.is_none();
                let case = problem(FloatKind::F16, head_dim);
                let what = format!("{runtime}, head dim {head_dim}, {prefetch:?}, {vectors:?}");
                let forward = plan::forward::forward(&caps, &case, Layout::CHUNKED, &tuning);
                let ForwardConfig::Matrix(config) = forward.expect("planned").config else {
                    panic!("{what}")
                };
                let fits = registers(config.kv_stream()) <= MATRIX_PREFETCH_REGISTERS.0;
                assert_eq!(config.prefetch, asked && fits, "{what}: forward");
                assert_eq!(config.kv_stream().prefetch, config.prefetch, "{what}");
                let backward = plan::backward::backward(&caps, &case, Layout::CHUNKED, &tuning);
                let backward = backward.expect("planned");
                for gradient in [&backward.dkdv, &backward.dq] {
                    let GradientConfig::Matrix(config) = gradient.config else { panic!("{what}") };
                    let fits = registers(config.inner_stream()) <= MATRIX_PREFETCH_REGISTERS.1;
                    assert_eq!(config.prefetch, asked && fits, "{what}: {gradient}");
                    // Head dim 64 (GPT-2's): every matrix kernel can fetch ahead.
                    assert!(config.prefetch || !asked || head_dim != 64, "{what}: {gradient}");
                }
                assert!(config.prefetch || !asked || head_dim != 64, "{what}: forward");
            }
        }
    }
}

#[test]
fn matrix_forward_staggers_its_rows_by_default_and_as_asked() {
    use burn_flash_attn_kernels::plan;
    let client = support::client();
    let (h200, mi300x) = (h200(client.properties()), mi300x(client.properties()));
    for (props, runtime) in [(&h200, planning::SIMULATED), (&mi300x, "hip")] {
        let caps = DeviceCaps::new(props, runtime);
        let cases = [(None, plan::MATRIX_STAGGERED), (Some(false), false), (Some(true), true)];
        for (asked, staggered) in cases {
            let tuning = Tuning::default()
                .with_forward_path(Some(ForwardPath::Matrix))
                .with_matrix_staggered(asked);
            let case = problem(FloatKind::F16, 64);
            let forward = plan::forward::forward(&caps, &case, Layout::CHUNKED, &tuning);
            let ForwardConfig::Matrix(config) = forward.expect("planned").config else { panic!() };
            assert_eq!(config.staggered, staggered, "{runtime}: {asked:?}");
        }
    }
}

/// `Tuning::matrix_plane_softmax` takes what the device has: on CUDA (the H200) plane shuffles
/// and plane syncs in the forward and plane syncs in the gradient kernels; on an MI300X (HIP:
/// shuffles, no plane sync) the forward's shuffles only; on lavapipe (the stand-in) neither.
#[test]
fn matrix_plane_softmax_takes_what_the_device_has() {
    use burn_flash_attn_kernels::backward::BackwardPath;
    use burn_flash_attn_kernels::backward::config::GradientConfig;
    use burn_flash_attn_kernels::plan;
    let client = support::client();
    let (h200, mi300x) = (h200(client.properties()), mi300x(client.properties()));
    let lavapipe = client.properties().clone();
    // (props, runtime, asked, forward shuffles, forward plane sync, gradient plane sync)
    let on = plan::MATRIX_PLANE_SOFTMAX;
    let mut cases = vec![
        (&h200, planning::SIMULATED, None, on, on, on),
        (&h200, planning::SIMULATED, Some(false), false, false, false),
        (&h200, planning::SIMULATED, Some(true), true, true, true),
        (&mi300x, "hip", None, on, false, false),
        (&mi300x, "hip", Some(true), true, false, false),
    ];
    // The test client is lavapipe (the stand-in) on CPU; on a GPU it is that GPU, which the
    // H200 properties above stand for.
    if lavapipe.features.matmul.cmma.is_empty() {
        cases.push((&lavapipe, planning::SIMULATED, Some(true), false, false, false));
    }
    for (props, runtime, asked, shuffles, plane_sync, gradient_sync) in cases {
        let caps = DeviceCaps::new(props, runtime);
        let tuning = Tuning::default()
            .with_forward_path(Some(ForwardPath::Matrix))
            .with_backward_path(Some(BackwardPath::Matrix))
            .with_matrix_stand_in(true)
            .with_matrix_plane_softmax(asked);
        let case = problem(FloatKind::F16, 64);
        let forward = plan::forward::forward(&caps, &case, Layout::CHUNKED, &tuning);
        let ForwardConfig::Matrix(config) = forward.expect("planned").config else { panic!() };
        let what = format!("{runtime}, plane size {}: {asked:?}", config.plane_size);
        assert_eq!(config.stand_in, props.features.matmul.cmma.is_empty(), "{what}");
        assert_eq!((config.plane_shuffles, config.plane_sync), (shuffles, plane_sync), "{what}");
        let backward = plan::backward::backward(&caps, &case, Layout::CHUNKED, &tuning);
        let backward = backward.expect("planned");
        for gradient in [&backward.dkdv, &backward.dq] {
            let GradientConfig::Matrix(config) = gradient.config else { panic!("{gradient}") };
            assert_eq!(config.plane_sync, gradient_sync, "{what}: {gradient}");
        }
    }
}

/// `Tuning::matrix_wide_scores` pads S's f32 rows by 32 bytes instead of 16 and staggers the
/// rows in four groups instead of two (on by default in the forward, off in the gradient
/// kernels), on the H200 and on an MI300X, where the wider rows must still fit 64 KiB: the
/// planner counts them, and takes the narrow padding before a smaller block. The gradient
/// kernels' S and dP rows too, at head dims 64 and 128.
#[test]
fn matrix_score_rows_widen_by_default_in_the_forward_and_where_asked() {
    use burn_flash_attn_kernels::backward::BackwardPath;
    use burn_flash_attn_kernels::backward::config::GradientConfig;
    use burn_flash_attn_kernels::plan;
    let client = support::client();
    let (h200, mi300x) = (h200(client.properties()), mi300x(client.properties()));
    for (props, runtime) in [(&h200, planning::SIMULATED), (&mi300x, "hip")] {
        let caps = DeviceCaps::new(props, runtime);
        let planned = |asked, head_dim| {
            let tuning = Tuning::default()
                .with_forward_path(Some(ForwardPath::Matrix))
                .with_matrix_wide_scores(asked);
            let case = problem(FloatKind::F16, head_dim);
            let forward = plan::forward::forward(&caps, &case, Layout::CHUNKED, &tuning);
            let ForwardConfig::Matrix(config) = forward.expect("planned").config else { panic!() };
            config
        };
        for head_dim in [128, 256] {
            let (narrow, wide) = (planned(Some(false), head_dim), planned(Some(true), head_dim));
            let blocks = |c: &MatrixConfig| (c.block_q, c.block_kv);
            assert_eq!(blocks(&wide), blocks(&narrow), "{runtime}, head dim {head_dim}");
        }
        let head_dim = 64;
        let (default, narrow) = (planned(None, head_dim), planned(Some(false), head_dim));
        let wide = planned(Some(true), head_dim);
        assert_eq!(default.wide_scores, plan::MATRIX_WIDE_SCORES, "{runtime}");
        assert!(!narrow.wide_scores && wide.wide_scores, "{runtime}");
        assert_eq!(wide.score_stride(), narrow.score_stride() + 4, "{runtime}: 16 more bytes");
        assert_eq!((narrow.stagger_groups(), wide.stagger_groups()), (2, 4), "{runtime}");
        let limit = props.hardware.max_shared_memory_size;
        assert!(wide.shared_memory_bytes() <= limit, "{runtime}: within {limit} bytes");
        for head_dim in [64, 128] {
            let gradients = |asked| {
                let tuning = Tuning::default()
                    .with_backward_path(Some(BackwardPath::Matrix))
                    .with_matrix_wide_scores(asked);
                let case = problem(FloatKind::F16, head_dim);
                let backward = plan::backward::backward(&caps, &case, Layout::CHUNKED, &tuning);
                let backward = backward.expect("planned");
                [backward.dkdv, backward.dq].map(|gradient| match gradient.config {
                    GradientConfig::Matrix(config) => config,
                    _ => panic!("{gradient}"),
                })
            };
            let default = gradients(None);
            let (narrow, wide) = (gradients(Some(false)), gradients(Some(true)));
            for ((default, narrow), wide) in default.iter().zip(&narrow).zip(&wide) {
                let what = format!("{runtime}, head dim {head_dim}, {:?}", wide.kernel);
                assert_eq!(default.wide_scores, plan::MATRIX_GRADIENT_WIDE_SCORES, "{what}");
                assert!(!narrow.wide_scores && wide.wide_scores, "{what}");
                let blocks = (wide.block_q, wide.block_kv);
                assert_eq!(blocks, (narrow.block_q, narrow.block_kv), "{what}: same blocks");
                assert_eq!(wide.score_stride(), wide.block_kv + 8, "{what}: 32 bytes of padding");
                assert!(wide.shared_memory_bytes() <= limit, "{what}: within {limit} bytes");
            }
        }
    }
}

/// `Tuning::matrix_plane_rows` = 32 gives each matrix-forward plane two row tiles (one unit a row
/// on the H200's 32-unit planes, two on an MI300X's 64), the stagger in twice as many groups of
/// the same rows, 16 rows where no 32-row block fits; 16 by default; any other count is refused.
/// `Tuning::matrix_forward_planes` = 2 with 32 rows gives the blocks of 4 planes of 16.
#[test]
fn matrix_planes_take_32_rows_where_asked() {
    use burn_flash_attn_kernels::FlashError;
    use burn_flash_attn_kernels::plan;
    let client = support::client();
    let (h200, mi300x) = (h200(client.properties()), mi300x(client.properties()));
    for (props, runtime, lanes) in [(&h200, planning::SIMULATED, 1), (&mi300x, "hip", 2)] {
        let caps = DeviceCaps::new(props, runtime);
        // The f16 plan at `head_dim` for the plane rows and planes asked.
        let planned_at = |asked, planes, head_dim| {
            let tuning = Tuning::default()
                .with_forward_path(Some(ForwardPath::Matrix))
                .with_matrix_plane_rows(asked)
                .with_matrix_forward_planes(planes);
            let case = problem(FloatKind::F16, head_dim);
            plan::forward::forward(&caps, &case, Layout::CHUNKED, &tuning).map(|forward| {
                let ForwardConfig::Matrix(config) = forward.config else { panic!() };
                config
            })
        };
        let planned_with = |asked, planes| planned_at(asked, planes, 64);
        let planned = |asked| planned_with(asked, None);
        let (default, rows32) = (planned(None).expect("planned"), planned(Some(32)).expect("32"));
        assert_eq!(default.plane_rows(), plan::MATRIX_PLANE_ROWS, "{runtime}");
        assert_eq!((rows32.row_tiles, rows32.units_per_row()), (2, lanes), "{runtime}");
        assert_eq!(rows32.num_planes() * 32, rows32.block_q, "{runtime}");
        let rows16 = planned(Some(16)).expect("16");
        assert_eq!(rows16.num_planes(), 4, "{runtime}: the most planes");
        // Two planes of 32 rows: the blocks of four planes of 16.
        let two_planes = planned_with(Some(32), Some(2)).expect("two planes of 32");
        let blocks = |c: &MatrixConfig| (c.block_q, c.block_kv, c.shared_memory_bytes());
        assert_eq!(blocks(&two_planes), blocks(&rows16), "{runtime}");
        assert_eq!(two_planes.num_planes(), 2, "{runtime}");
        let three = planned_with(Some(32), Some(3));
        assert!(matches!(three, Err(FlashError::InvalidTuning(_))), "{runtime}: {three:?}");
        assert_eq!(rows32.stagger_rows(), rows16.stagger_rows(), "{runtime}: rows per group");
        assert_eq!(rows32.stagger_groups(), 2 * rows16.stagger_groups(), "{runtime}");
        let limit = props.hardware.max_shared_memory_size;
        assert!(rows32.shared_memory_bytes() <= limit, "{runtime}: within {limit} bytes");
        // Where no block of 32-row planes fits (f16 at head dim 256 in an MI300X's 64 KiB, with
        // one 16-row plane), 32 asked gives the 16-row plan.
        let one_plane = planned_at(Some(16), None, 256).expect("head dim 256");
        assert!(runtime != "hip" || one_plane.block_q == 16, "{runtime}: {one_plane:?}");
        if one_plane.block_q == 16 {
            let asked_32 = planned_at(Some(32), None, 256).expect("head dim 256, 32 asked");
            assert_eq!(asked_32, one_plane, "{runtime}: head dim 256");
        }
        let refused = planned(Some(24));
        assert!(matches!(refused, Err(FlashError::InvalidTuning(_))), "{runtime}: {refused:?}");
    }
}

/// `Tuning::matrix_shared_stage` puts the matrix forward's S and O staging in one tile: the
/// planner takes it where asked (off by default), the cube declares the longer of the two rows
/// once instead of both (and a word for the rescale flag without plane shuffles), and its blocks
/// are never smaller than without it (on an MI300X's 64 KiB, at least as large).
#[test]
fn matrix_forward_stages_s_and_o_in_one_tile_where_asked() {
    use burn_flash_attn_kernels::plan;
    let client = support::client();
    let (h200, mi300x) = (h200(client.properties()), mi300x(client.properties()));
    for (props, runtime) in [(&h200, planning::SIMULATED), (&mi300x, "hip")] {
        let caps = DeviceCaps::new(props, runtime);
        for (dtype, head_dim, rows) in [
            (FloatKind::F16, 64, 16),
            (FloatKind::F16, 128, 16),
            (FloatKind::F16, 64, 32),
            (FloatKind::F16, 256, 16),
        ] {
            let planned = |shared| {
                let tuning = Tuning::default()
                    .with_forward_path(Some(ForwardPath::Matrix))
                    .with_matrix_plane_rows(Some(rows))
                    .with_matrix_shared_stage(shared);
                let case = problem(dtype, head_dim);
                let forward = plan::forward::forward(&caps, &case, Layout::CHUNKED, &tuning);
                let ForwardConfig::Matrix(config) = forward.expect("planned").config else {
                    panic!()
                };
                config
            };
            let what = format!("{runtime} {dtype:?} head dim {head_dim}, {rows} rows");
            let (default, apart, shared) = (planned(None), planned(Some(false)), planned(Some(true)));
            assert_eq!(default.shared_stage, plan::MATRIX_SHARED_STAGE, "{what}");
            assert!(!apart.shared_stage && shared.shared_stage, "{what}");
            assert!(shared.block_q * shared.block_kv >= apart.block_q * apart.block_kv, "{what}");
            // One row stride for both: the longer row with S's padding (as without sharing).
            let same_blocks = MatrixConfig { shared_stage: false, ..shared };
            let score_pad = same_blocks.score_stride() - shared.block_kv;
            let stride = shared.block_kv.max(shared.val_dim_tile()) + score_pad;
            assert_eq!((shared.score_stride(), shared.out_stride()), (stride, stride), "{what}");
            // The flag's word after the rows: one 32-byte chunk of f32, without plane shuffles.
            let flag = if shared.plane_shuffles { 0 } else { 8 };
            assert_eq!(shared.score_tile_len(), shared.block_q * stride + flag, "{what}");
            assert_eq!(shared.rescale_flag(), shared.block_q * stride, "{what}");
            assert!(
                shared.shared_memory_bytes() < same_blocks.shared_memory_bytes(),
                "{what}: {} bytes shared, {} apart",
                shared.shared_memory_bytes(),
                same_blocks.shared_memory_bytes()
            );
            println!(
                "{what}: apart {} x {}, {} bytes; shared {} x {}, {} bytes ({} apart)",
                apart.block_q,
                apart.block_kv,
                apart.shared_memory_bytes(),
                shared.block_q,
                shared.block_kv,
                shared.shared_memory_bytes(),
                same_blocks.shared_memory_bytes()
            );
        }
    }
}
