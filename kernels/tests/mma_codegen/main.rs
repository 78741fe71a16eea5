//! The mma path needs the register-level 16x8x16 mma (CUDA): lavapipe cannot run it. This
//! test expands its kernel for H200-like properties and compiles it to CUDA C++ with cubecl's
//! own CUDA compiler, no device needed: it proves the kernel expands for every config the
//! planner picks (tails, dims 8..128, all options), that the source has the `mma.sync` and
//! `ldmatrix` instructions and no `#error`, and that it fits the shared memory the planner
//! planned. Numerics: `cargo test --no-default-features --features cuda --test forward` on a
//! GPU. `FLASH_DUMP_DIR=dir` writes the sources there. `bench_configs.rs`: the bench shapes'
//! kernels (their generation time, dumped for the offline sm_90a report) and the gradient
//! kernels' chunked output.
#[path = "../support/mod.rs"]
mod support;
mod bench_configs;

use burn_flash_attn_kernels::backward::config::{BackwardKernel, GradientConfig, MmaGradientConfig};
use burn_flash_attn_kernels::config::{ForwardConfig, MmaConfig};
use burn_flash_attn_kernels::plan::{self, DeviceCaps, DqAccumulation, Layout};
use burn_flash_attn_kernels::{AttentionProblem, FloatKind, MaskKind};
use cubecl::prelude::*;
use support::cuda_codegen::{assert_fits_the_plan, dump, settings};
use support::mma_sources::{dkdv_source, dq_source, mma_source};
use support::{planning, problem};

#[test]
fn mma_path_expands_to_cuda_for_h200_configs() {
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
        problem(FloatKind::F16, 40, 80, 77, 90),
        problem(FloatKind::BF16, 8, 24, 1, 1),
        all_options(problem(FloatKind::F16, 96, 64, 203, 113)),
        all_options(problem(FloatKind::BF16, 128, 128, 4096, 4096)),
    ];
    // The planned blocks, and the same block of queries with the other row tiling (16 <-> 32
    // rows per plane), each with one and two key/value buffers through registers and two
    // filled by cp.async (`BURN_FLASH_MMA=planes,block_kv,plane_rows,buffers,async` picks any
    // of them).
    let with_both_tilings = cases.into_iter().flat_map(|case| {
        let plan = planning::forward_plan(&props, &case, None).expect("planned");
        let ForwardConfig::Mma(planned) = plan.config else {
            panic!("{case:?}: {plan}, not the mma path");
        };
        let other_rows = 48 - planned.plane_rows;
        let other = MmaConfig {
            planes: planned.block_q() / other_rows,
            plane_rows: other_rows,
            ..planned
        };
        [planned, other]
            .into_iter()
            .flat_map(move |config| {
                [(1, false), (2, false), (2, true)].map(|(kv_buffers, async_kv)| MmaConfig {
                    kv_buffers,
                    async_kv,
                    ..config
                })
            })
            .map(move |config| (case, config, plan.to_string()))
    });
    for (case, config, reason) in with_both_tilings {
        let (source, shared) = match (case.dtype, case.mask) {
            (FloatKind::F16, Some(MaskKind::U8)) => mma_source::<half::f16, u8>(&client, config),
            (FloatKind::F16, _) => mma_source::<half::f16, u32>(&client, config),
            (FloatKind::BF16, Some(MaskKind::U8)) => mma_source::<half::bf16, u8>(&client, config),
            (FloatKind::BF16, _) => mma_source::<half::bf16, u32>(&client, config),
            (FloatKind::F32, _) => unreachable!("f32 takes the portable path"),
        };
        let rows = config.mma_row_tiles() * 16;
        dump(
            &format!(
                "mma_{:?}_hd{}_dv{}_rows{rows}_buf{}{}.cu",
                case.dtype,
                case.head_dim,
                case.val_dim,
                config.kv_buffers,
                if config.async_kv { "_async" } else { "" }
            ),
            &source,
        );
        println!(
            "{case:?}, {rows} rows per plane, {} buffer(s): {reason} ({} bytes of CUDA, \
             {shared} bytes of shared memory)",
            config.kv_buffers,
            source.len()
        );
        assert!(
            source.contains("mma.sync"),
            "{case:?}: no mma.sync in the source"
        );
        assert!(
            source.contains("ldmatrix"),
            "{case:?}: no ldmatrix in the source"
        );
        // The softmax's exponentials are the fast built-ins: powers of two (`__powf(2, x)`,
        // a bare ex2.approx) where the scale folds into them, `__expf` otherwise.
        let fast_exp = if config.score.fold_scale { "__powf(float(2.0)" } else { "__expf(" };
        assert!(
            source.contains(fast_exp),
            "{case:?}: no {fast_exp} in the source"
        );
        assert_eq!(
            source.contains("cp.async") && source.contains("mbarrier"),
            config.async_kv,
            "{case:?}: cp.async copies completed by an mbarrier exactly when async_kv"
        );
        assert_fits_the_plan(&format!("{case:?}"), &source, shared, config.shared_memory_bytes());
    }
}

/// The backward mma kernels (dK/dV and dQ) for the configs `plan::backward` picks on an H200.
#[test]
fn backward_mma_kernels_expand_to_cuda_for_h200_configs() {
    let client = support::client();
    let props = support::h200(client.properties());
    let cases = [
        problem(FloatKind::BF16, 64, 64, 1024, 1024),
        problem(FloatKind::F16, 128, 128, 113, 203),
        AttentionProblem {
            softcap: Some(2.0),
            causal: true,
            mask: Some(MaskKind::U32),
            has_bias: true,
            ..problem(FloatKind::BF16, 40, 80, 77, 90)
        },
    ];
    // The planned blocks with one and two inner buffers, through registers and by cp.async
    // (`BURN_FLASH_MMA_BWD=...,buffers,async`); dK/dV also as the one-pass kernel, with dQ
    // added 4 f32 per atomic request, and with 1 and 2 as well at two buffers by cp.async.
    let kernels = [(BackwardKernel::KeyValue, false), (BackwardKernel::KeyValue, true), (BackwardKernel::Query, false)];
    let variants = cases
        .into_iter()
        .flat_map(|case| kernels.map(|(kernel, atomic_dq)| (case, kernel, atomic_dq)))
        .flat_map(|(case, kernel, atomic_dq)| {
            [(1, false), (2, false), (1, true), (2, true)]
                .map(|(buffers, async_inner)| (case, kernel, atomic_dq, buffers, async_inner))
        })
        .flat_map(|(case, kernel, atomic_dq, buffers, async_inner)| {
            let widths: &[u32] = match (atomic_dq, buffers, async_inner) {
                (false, ..) => &[1],
                (true, 2, true) => &[1, 2, 4],
                (true, ..) => &[4],
            };
            widths.iter().map(move |&dq_width| (case, kernel, atomic_dq, buffers, async_inner, dq_width))
        });
    for (case, kernel, atomic_dq, buffers, async_inner, dq_width) in variants {
        let plan = planning::gradient_plan(&props, &case, kernel).expect("planned");
        let GradientConfig::Mma(planned) = plan.config else {
            panic!("{case:?}: {plan}, not the mma path");
        };
        let config = MmaGradientConfig {
            buffers,
            async_inner,
            atomic_dq,
            dq_width,
            ..planned
        };
        let settings = settings(CubeDim::new_2d(32, config.planes()));
        let (source, shared) = match (kernel, case.dtype) {
            (BackwardKernel::KeyValue, FloatKind::BF16) => {
                dkdv_source::<half::bf16>(&client, settings, config)
            }
            (BackwardKernel::KeyValue, _) => dkdv_source::<half::f16>(&client, settings, config),
            (BackwardKernel::Query, FloatKind::BF16) => {
                dq_source::<half::bf16>(&client, settings, config)
            }
            (BackwardKernel::Query, _) => dq_source::<half::f16>(&client, settings, config),
        };
        dump(
            &format!(
                "mma_bwd_{kernel:?}{}_{:?}_hd{}_dv{}_buf{buffers}{}.cu",
                if atomic_dq { format!("_atomicdq_w{dq_width}") } else { String::new() },
                case.dtype,
                case.head_dim,
                case.val_dim,
                if async_inner { "_async" } else { "" }
            ),
            &source,
        );
        println!(
            "{case:?} {kernel:?}, {buffers} buffer(s): {} ({} bytes of CUDA, {shared} bytes \
                 of shared memory)",
            plan,
            source.len()
        );
        assert!(
            source.contains("mma.sync"),
            "{case:?} {kernel:?}: no mma.sync"
        );
        assert!(
            source.contains("ldmatrix"),
            "{case:?} {kernel:?}: no ldmatrix"
        );
        assert_eq!(
            source.contains("cp.async") && source.contains("mbarrier"),
            async_inner,
            "{case:?} {kernel:?}: cp.async copies completed by an mbarrier exactly when async"
        );
        assert!(
            !source.contains("#error"),
            "{case:?} {kernel:?}: #error in the source"
        );
        // Only the one-pass kernel adds (dQ) with f32 atomics.
        assert_eq!(source.contains("atomicAdd"), atomic_dq, "{case:?} {kernel:?} atomic_dq {atomic_dq}: atomicAdd");
        // Of the width asked for: CUDA's float2 / float4 atomicAdd overloads.
        for width in [2, 4] {
            let vector_add = source.contains(&format!("atomicAdd(\n                    reinterpret_cast<float{width}*>"))
                || source.contains(&format!("reinterpret_cast<float{width}*>"));
            assert_eq!(vector_add, atomic_dq && dq_width == width, "{case:?} {kernel:?} width {dq_width}: float{width} atomics");
        }
        // The mbarrier's 8 bytes may land in alignment padding: the estimate reserves 16.
        let slack = if async_inner { 8 } else { 0 };
        let estimate = config.shared_memory_bytes();
        assert!(
            shared <= estimate && estimate - shared <= slack,
            "{case:?} {kernel:?}: shared memory {shared}, estimate {estimate}"
        );
    }
}

/// Where the planner proves that no block pair needs the masked pass (no causal, window or
/// mask; both sequences tiled by the blocks) the mma gradient kernels leave it out: the planned
/// config says so, and its source is the unrolled body once, well under the source with the
/// masked pass. A causal problem, a mask, a key tail and a query tail keep it. The forward keeps
/// it everywhere (measured slower without it, see `plan::mma_blocks`), but expands without it
/// too, at about half the source (`FLASH_DUMP_DIR` writes both forms for the register dumps).
#[test]
fn the_masked_pass_is_left_out_exactly_where_no_block_needs_it() {
    let client = support::client();
    let props = support::h200(client.properties());
    let aligned = problem(FloatKind::BF16, 128, 128, 1024, 1024);
    let keeps = [
        AttentionProblem { causal: true, ..aligned },
        AttentionProblem { mask: Some(MaskKind::U8), ..aligned },
        problem(FloatKind::BF16, 128, 128, 1024, 1000),
    ];
    let forward = |case: &AttentionProblem| {
        let plan = planning::forward_plan(&props, case, None).expect("planned");
        let ForwardConfig::Mma(config) = plan.config else { panic!("{case:?}: {plan}") };
        config
    };
    let gradient = |case: &AttentionProblem, kernel| {
        let plan = planning::gradient_plan(&props, case, kernel).expect("planned");
        let GradientConfig::Mma(config) = plan.config else { panic!("{case:?}: {plan}") };
        config
    };
    let kernels = [BackwardKernel::KeyValue, BackwardKernel::Query];
    let query_tail = problem(FloatKind::BF16, 128, 128, 1000, 1024);
    for case in keeps.iter().chain([&query_tail, &aligned]) {
        assert!(!forward(case).never_masked, "{case:?}: forward");
    }
    for case in keeps.iter().chain([&query_tail]) {
        for kernel in kernels {
            assert!(!gradient(case, kernel).never_masked, "{case:?}: {kernel:?}");
        }
    }

    for head_dim in [32, 64, 128] {
        let config = forward(&problem(FloatKind::BF16, head_dim, head_dim, 1024, 1024));
        let (with, _) = mma_source::<half::bf16, u32>(&client, config);
        let (without, _) = mma_source::<half::bf16, u32>(&client, MmaConfig { never_masked: true, ..config });
        dump(&format!("mma_fwd_masked_pass_BF16_hd{head_dim}.cu"), &with);
        dump(&format!("mma_fwd_no_masked_pass_BF16_hd{head_dim}.cu"), &without);
        println!("forward hd{head_dim}: {} bytes of CUDA without the masked pass, {} with it", without.len(), with.len());
        assert!(4 * without.len() < 3 * with.len(), "forward hd{head_dim}: {} vs {} bytes", without.len(), with.len());
    }
    for kernel in kernels {
        let config = gradient(&aligned, kernel);
        assert!(config.never_masked, "aligned: {kernel:?}");
        let settings = settings(CubeDim::new_2d(32, config.planes()));
        let source = |config| match kernel {
            BackwardKernel::KeyValue => dkdv_source::<half::bf16>(&client, settings.clone(), config).0,
            BackwardKernel::Query => dq_source::<half::bf16>(&client, settings.clone(), config).0,
        };
        let (without, with) = (source(config), source(MmaGradientConfig { never_masked: false, ..config }));
        println!("{kernel:?}: {} bytes of CUDA without the masked pass, {} with it", without.len(), with.len());
        assert!(4 * without.len() < 3 * with.len(), "{kernel:?}: {} vs {} bytes", without.len(), with.len());
    }
}
