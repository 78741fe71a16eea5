//! The mma kernels the planner picks for the bench shapes (see `main.rs`): CubeCL's generation
//! time for them, and the gradient kernels' chunked output.
use super::*;

/// The host side of a first launch, without nvrtc: CubeCL's expansion, optimizer and CUDA C++
/// generation of the forward, dK/dV and dQ mma kernels the planner picks for the H200 bench
/// shapes (bf16), timed on this machine's CPU. A measurement, not a check: run with
/// `cargo test --release -p burn-flash-attn-kernels --test mma_codegen -- --ignored --nocapture`.
/// With `FLASH_DUMP_DIR` it writes those kernels' sources (`bench_*.cu`, the one-pass dK/dV
/// too; `staged_*.cu`: the same kernels streaming without `cp.async`, at head dims 32, 64 and
/// 128), which `scripts/cuda_offline_sass.sh` compiles for sm_90a.
#[test]
#[ignore = "a timing, printed: run it by name with --ignored"]
fn cubecl_codegen_time_of_the_bench_configs() {
    use std::time::Instant;
    let client = support::client();
    let props = support::h200(client.properties());
    // A gradient kernel's CUDA source: dK/dV (the one pass too) or dQ, as its config says.
    let gradient_source = |config: MmaGradientConfig| {
        let settings = settings(CubeDim::new_2d(32, config.planes()));
        match config.kernel {
            BackwardKernel::KeyValue => dkdv_source::<half::bf16>(&client, settings, config).0,
            BackwardKernel::Query => dq_source::<half::bf16>(&client, settings, config).0,
        }
    };
    println!("kernel,head_dim,seq,causal,config,codegen_ms,cuda_bytes");
    for (head_dim, seq) in [(32, 512), (32, 1024), (64, 1024), (128, 2048), (128, 8192)] {
        for causal in [false, true] {
            let case = AttentionProblem { causal, ..problem(FloatKind::BF16, head_dim, head_dim, seq, seq) };
            let plan = planning::forward_plan(&props, &case, None).expect("planned");
            let ForwardConfig::Mma(config) = plan.config else { panic!("{case:?}: {plan}") };
            let start = Instant::now();
            let (source, _) = mma_source::<half::bf16, u32>(&client, config);
            let ms = start.elapsed().as_secs_f64() * 1e3;
            println!("forward,{head_dim},{seq},{causal},\"{plan}\",{ms:.0},{}", source.len());
            let name = format!("hd{head_dim}_n{seq}{}", if causal { "_causal" } else { "" });
            dump(&format!("bench_forward_{name}.cu"), &source);
            // The same kernels streaming through registers instead of `cp.async` (`staged_*`): no
            // mbarrier, so none of the headers it pulls in (libcu++'s `cuda/barrier`,
            // cooperative groups), which `sass_report.py` times apart from the kernel's body.
            let staged = seq != 512 && seq != 8192;
            if staged && config.async_kv {
                let config = MmaConfig { async_kv: false, ..config };
                let (source, _) = mma_source::<half::bf16, u32>(&client, config);
                dump(&format!("staged_forward_{name}.cu"), &source);
            }
            for kernel in [BackwardKernel::KeyValue, BackwardKernel::Query] {
                let plan = planning::gradient_plan(&props, &case, kernel).expect("planned");
                let GradientConfig::Mma(config) = plan.config else { panic!("{case:?}: {plan}") };
                let start = Instant::now();
                let source = gradient_source(config);
                let ms = start.elapsed().as_secs_f64() * 1e3;
                println!("{kernel:?},{head_dim},{seq},{causal},\"{plan}\",{ms:.0},{}", source.len());
                dump(&format!("bench_{kernel:?}_{name}.cu"), &source);
                if staged && config.async_inner {
                    let source = gradient_source(MmaGradientConfig { async_inner: false, ..config });
                    dump(&format!("staged_{kernel:?}_{name}.cu"), &source);
                }
                if kernel == BackwardKernel::KeyValue {
                    // The one pass as the planner plans it (its own blocks, dQ 4 f32 per request).
                    let atomic = planning::tuning().with_backward_dq(Some(DqAccumulation::Atomic));
                    let caps = DeviceCaps::new(&props, planning::SIMULATED);
                    let plan = plan::backward::backward(&caps, &case, Layout::CHUNKED, &atomic).expect("planned");
                    let GradientConfig::Mma(one_pass) = plan.dkdv.config else { panic!("{case:?}: {plan}") };
                    assert!(one_pass.atomic_dq, "{case:?}: {plan}");
                    dump(&format!("bench_OnePass_{name}.cu"), &gradient_source(one_pass));
                    if staged && one_pass.async_inner {
                        let source = gradient_source(MmaGradientConfig { async_inner: false, ..one_pass });
                        dump(&format!("staged_OnePass_{name}.cu"), &source);
                    }
                }
            }
        }
    }
}

/// `Tuning::backward_chunked_output` plans the mma gradient kernels to write their gradients in
/// 16-byte chunks, dK and dV (two-kernel and one pass) through the K and V tiles, dQ through the
/// Q tile; off by default. The chunked kernels expand and keep the shared memory the planner
/// counts (they reuse the tiles), val_dim 24 included (lanes that do not share a row's chunks
/// evenly).
#[test]
fn dkdv_writes_dk_and_dv_in_chunks_where_asked() {
    let client = support::client();
    let props = support::h200(client.properties());
    let caps = DeviceCaps::new(&props, planning::SIMULATED);
    let cases =
        [problem(FloatKind::BF16, 64, 64, 203, 203), problem(FloatKind::BF16, 40, 24, 77, 90)];
    let asked = [(None, plan::BACKWARD_CHUNKED_OUTPUT), (Some(true), true), (Some(false), false)];
    for case in cases {
        for (asked, expected) in asked {
            let tuning = planning::tuning().with_backward_chunked_output(asked);
            let backward = plan::backward::backward(&caps, &case, Layout::CHUNKED, &tuning);
            let backward = backward.expect("planned");
            let configs = (backward.dkdv.config, backward.dq.config);
            let (GradientConfig::Mma(dkdv), GradientConfig::Mma(dq)) = configs else {
                panic!("{case:?}: not the mma path");
            };
            assert_eq!(dkdv.chunked_output, expected, "{case:?} {asked:?}");
            assert_eq!(dq.chunked_output, expected, "{case:?} {asked:?}: dQ's kernel");
        }
        let tuning = planning::tuning().with_backward_chunked_output(Some(true));
        let backward = plan::backward::backward(&caps, &case, Layout::CHUNKED, &tuning);
        let backward = backward.expect("planned");
        let (GradientConfig::Mma(planned), GradientConfig::Mma(dq)) =
            (backward.dkdv.config, backward.dq.config)
        else {
            panic!()
        };
        let settings = |config: MmaGradientConfig| settings(CubeDim::new_2d(32, config.planes()));
        let (chunked, _) = dq_source::<half::bf16>(&client, settings(dq), dq);
        let without = MmaGradientConfig { chunked_output: false, ..dq };
        assert_ne!(chunked, dq_source::<half::bf16>(&client, settings(without), without).0);
        assert!(!chunked.contains("#error"), "{case:?} chunked dQ: #error in the source");
        for atomic_dq in [false, true] {
            let config = MmaGradientConfig { atomic_dq, dq_width: 1, ..planned };
            let (chunked, shared) = dkdv_source::<half::bf16>(&client, settings(config), config);
            let without = MmaGradientConfig { chunked_output: false, ..config };
            let (elementwise, _) = dkdv_source::<half::bf16>(&client, settings(without), without);
            assert_ne!(chunked, elementwise, "{case:?}");
            let what = format!("{case:?} chunked dK/dV, atomic dQ {atomic_dq}");
            assert!(!chunked.contains("#error"), "{what}: #error in the source");
            // The mbarrier's 8 bytes may land in alignment padding: the estimate reserves 16.
            let estimate = config.shared_memory_bytes();
            let slack = if config.async_inner { 8 } else { 0 };
            let within = shared <= estimate && estimate - shared <= slack;
            assert!(within, "{what}: {shared} bytes, estimate {estimate}");
            let (dtype, head_dim) = (case.dtype, case.head_dim);
            dump(&format!("mma_bwd_chunked_{dtype:?}_hd{head_dim}_atomic{atomic_dq}.cu"), &chunked);
        }
    }
}
