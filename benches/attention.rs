//! Attention throughput and peak memory: our kernels (through `Flash<B>`) beside Burn's own
//! `attention` (inference) and `Autodiff` attention (training), bf16, on the runtime chosen by
//! cargo feature (`cuda` for the H200 runs recorded in benches/RESULTS.md).
//!
//! ```text
//! cargo bench --bench attention --no-default-features --features cuda,fusion -- [speed|dq-ab|memory|profile|features|features-memory]
//!     [--quick] [--bar] [--flash-only] [--fwd-only]
//! ```
//! `--quick`: the first shape only; `--bar`: the two shapes of the issues' bar; `--flash-only`
//! and `--fwd-only` skip Burn's rows and the training rows (for tuning runs), `--causal=true`
//! (or `false`; `BENCH_CAUSAL`) only that variant (for profiles of one launch);
//! `--shape=B,H,N,D` (repeatable): these shapes instead; `--head-dim=D`: only that head_dim.
//! Tuning (the planner's explicit overrides, `burn_flash_attn::set_tuning`):
//! `--mma=planes,rows[,plane_rows[,buffers[,async]]]` for the mma forward's blocks and
//! `--mma-bwd=...` for the mma backward's, `--dq=kernel|atomic` for how the backward sums dQ
//! (its own kernel, or the one-pass dK/dV kernel's atomic adds), `--dq-width=1|2|4` for the f32
//! per dQ atomic request, `--fwd-path=portable|matrix|mma` / `--bwd-path=portable|mma|matrix`
//! for the kernels' paths (the matrix paths on cmma where the device has it), `--rolled=true|false`
//! for the mma kernels' head-dim products as loops or unrolled in the source
//! (`Tuning::rolled_steps`), `--async=true|false` for the mma kernels' streams by `cp.async` or
//! through registers (`Tuning::async_copy`), `--q-registers=true|false` for the mma forward's
//! Q fragments in registers or re-read from shared memory (`Tuning::forward_q_registers`),
//! `--early-kv=true|false` for its first key/value block started before the query block
//! (`Tuning::forward_early_kv`), `--chunked-output=true|false` for its O written through shared
//! memory in 16-byte chunks (`Tuning::forward_chunked_output`), `--bwd-chunked-output=true|false`
//! for the mma gradient kernels' dK, dV and dQ likewise (`Tuning::backward_chunked_output`),
//! `--matrix-vectors=true|false` for the matrix
//! kernels' inputs read in 16-byte vectors (`Tuning::matrix_vector_loads`),
//! `--matrix-prefetch=true|false` for their streamed blocks fetched one block ahead
//! (`Tuning::matrix_prefetch`), `--matrix-staggered=true|false` for the matrix forward's rows
//! 8-15 walking their columns one step later (`Tuning::matrix_staggered`),
//! `--matrix-plane-softmax=true|false` for its softmax kept in each plane
//! (`Tuning::matrix_plane_softmax`), `--matrix-wide-scores=true|false` for S's rows padded by
//! 32 bytes (`Tuning::matrix_wide_scores`), `--matrix-plane-rows=16|32` for the matrix forward's
//! query rows per plane (`Tuning::matrix_plane_rows`), `--matrix-planes=1|2|4` for its planes per
//! cube (`Tuning::matrix_forward_planes`), `--matrix-shared-stage=true|false` for its S and O
//! staging in one tile (`Tuning::matrix_shared_stage`); `BURN_FLASH_MMA` /
//! `BURN_FLASH_MMA_BWD` / `BURN_FLASH_DQ` / `BURN_FLASH_DQ_WIDTH` / `BURN_FLASH_FWD_PATH` /
//! `BURN_FLASH_BWD_PATH` / `BURN_FLASH_ROLLED` / `BURN_FLASH_ASYNC` /
//! `BURN_FLASH_MMA_Q_REGISTERS` / `BURN_FLASH_MMA_EARLY_KV` / `BURN_FLASH_MMA_CHUNKED_OUTPUT` /
//! `BURN_FLASH_MMA_BWD_CHUNKED_OUTPUT` /
//! `BURN_FLASH_MATRIX_VECTORS`
//! / `BURN_FLASH_MATRIX_PREFETCH` / `BURN_FLASH_MATRIX_STAGGERED` /
//! `BURN_FLASH_MATRIX_PLANE_SOFTMAX` / `BURN_FLASH_MATRIX_WIDE_SCORES` /
//! `BURN_FLASH_MATRIX_PLANE_ROWS` / `BURN_FLASH_MATRIX_PLANES` /
//! `BURN_FLASH_MATRIX_SHARED_STAGE` in the environment are
//! read as
//! the same flags (the device scripts' tuning runs set them).
//! Prints CSV in the format of `../shared/anchors/torch_attention.py`:
//! `impl,B,H,N,D,causal,pass,ms,tflops` (speed) or `impl,B,H,N,D,causal,pass,peak_mib` (memory).
//! FLOPs: forward 4·B·H·N²·D, halved when causal; forward+backward 3.5× forward.
//! `dq-ab`: ours forward+backward with dQ by its kernel and by the one-pass atomics,
//! interleaved in one process (3 rounds per shape; impl `flash-dq-kernel` / `flash-dq-atomic`;
//! `--dq-widths=1,2,4` or `DQAB_WIDTHS`: the one pass once per dQ atomic width, `-wN` rows).
//! `profile`: device time per kernel from CubeCL's profiler (benches/profile/mod.rs), at the
//! `--shape`s given (default the first), tables in `$PROFILE_LOG` (default
//! `target/attention-profile.log`).
use std::time::{Duration, Instant};

use burn::tensor::{
    Distribution, Tensor, backend::{AutodiffBackend, Backend}, module::attention, ops::AttentionModuleOptions,
};
use burn_autodiff::Autodiff;
use burn_cubecl::CubeBackend;
use burn_flash_attn::{Flash, last_route};

#[path = "features/mod.rs"]
mod features;
#[path = "profile/mod.rs"]
mod profile;
use burn_fusion::Fusion;
use cubecl::Runtime as _;
use half::bf16;

#[cfg(feature = "cuda")]
type Runtime = cubecl::cuda::CudaRuntime;
#[cfg(all(feature = "rocm", not(feature = "cuda")))]
type Runtime = cubecl::hip::HipRuntime;
#[cfg(not(any(feature = "cuda", feature = "rocm")))]
type Runtime = cubecl::wgpu::WgpuRuntime;

type Inner = Fusion<CubeBackend<Runtime, bf16, i32, u8>>;

/// (batch, heads, seq, head_dim): the shapes of ../shared/anchors/torch_attention.py.
const SHAPES: [[usize; 4]; 5] =
    [[64, 12, 1024, 64], [16, 16, 2048, 64], [8, 16, 4096, 64], [16, 16, 2048, 128], [4, 16, 8192, 128]];
/// Memory: batch·heads = 64, head_dim = 128, growing sequence (issue: O(N) vs O(N²)).
const MEMORY_SEQS: [usize; 4] = [1024, 2048, 4096, 8192];
/// Calls before timing: kernel compilation and memory-pool growth stay out of the numbers.
const WARMUP: usize = 2;
/// Each timing runs at least this long and at least `MIN_ITERS` calls (a device call has 10 min).
const MIN_TIME: Duration = Duration::from_millis(300);
const MIN_ITERS: usize = 10;
/// Timed calls are queued back to back, as a training loop queues them, with one device sync
/// per this many calls (PyTorch's `do_bench`, which times the anchors, queues its calls too).
const CALLS_PER_SYNC: usize = 10;
/// forward + backward FLOPs / forward FLOPs (FlashAttention's convention: backward = 2.5×).
const TRAIN_FLOP_FACTOR: f64 = 3.5;

fn device<B: Backend>() -> B::Device {
    Default::default()
}

fn inputs<B: Backend>([b, h, n, d]: [usize; 4]) -> [Tensor<B, 4>; 3] {
    let dev = device::<B>();
    [0; 3].map(|_| Tensor::random([b, h, n, d], Distribution::Normal(0.0, 1.0), &dev))
}

fn options(causal: bool) -> AttentionModuleOptions {
    AttentionModuleOptions { is_causal: causal, ..Default::default() }
}

/// One forward call, queued (the caller syncs: [`sync`]).
fn forward<B: Backend>(shape: [usize; 4], causal: bool) -> impl FnMut() {
    let [q, k, v] = inputs::<B>(shape);
    move || {
        let out = attention(q.clone(), k.clone(), v.clone(), None, None, options(causal));
        drop(out);
    }
}

/// One forward + backward call, queued (the caller syncs: [`sync`]). The backward starts from
/// the output's gradient (`backward()` on the output seeds it with ones), as the anchors'
/// `out.backward(d_out)` does: no loss is computed, so the row times attention only.
fn train<B: AutodiffBackend>(shape: [usize; 4], causal: bool) -> impl FnMut() {
    let [q, k, v] = inputs::<B>(shape);
    move || {
        let [q, k, v] = [&q, &k, &v].map(|x| x.clone().detach().require_grad());
        let out = attention(q.clone(), k, v, None, None, options(causal));
        let grads = out.backward();
        drop(q.grad(&grads));
    }
}

/// Waits for everything queued on the device. Every row's backend (`Flash<Inner>`,
/// `Autodiff<Inner>`, ...) runs on `Inner`'s device, whose sync also flushes fusion's queue.
fn sync() {
    Inner::sync(&device::<Inner>()).expect("device sync");
}

/// One call, waited for (warm-ups, memory peaks, the profiler's calls).
fn synced(run: &mut impl FnMut()) {
    run();
    sync();
}

/// Mean milliseconds per call after a warm-up: calls queued back to back, a device sync after
/// every [`CALLS_PER_SYNC`], host clock from the first call to the last sync. A call whose host
/// work outlasts its device work is timed by its host work.
fn time(mut run: impl FnMut()) -> f64 {
    (0..WARMUP).for_each(|_| synced(&mut run));
    let start = Instant::now();
    let mut iters = 0;
    while iters < MIN_ITERS || start.elapsed() < MIN_TIME {
        (0..CALLS_PER_SYNC).for_each(|_| run());
        sync();
        iters += CALLS_PER_SYNC;
    }
    start.elapsed().as_secs_f64() * 1e3 / iters as f64
}

/// Peak reserved device memory of one call, from a clean memory pool (after a warm-up call, so
/// that compilation and autotune allocations are not counted).
fn peak_mib(mut run: impl FnMut()) -> f64 {
    let client = Runtime::client(&Default::default());
    synced(&mut run);
    client.memory_cleanup();
    synced(&mut run);
    let usage = client.memory_usage().expect("memory usage");
    usage.bytes_reserved as f64 / (1024.0 * 1024.0)
}

fn forward_flops([b, h, n, d]: [usize; 4], causal: bool) -> f64 {
    let full = 4.0 * (b * h) as f64 * (n * n) as f64 * d as f64;
    if causal { full / 2.0 } else { full }
}

/// A benchmark: inputs are made when it is built, so that rows never hold each other's memory.
type Bench = Box<dyn Fn([usize; 4], bool) -> Box<dyn FnMut()>>;

/// (impl, pass, flop factor over the forward, benchmark).
fn rows() -> [(&'static str, &'static str, f64, Bench); 4] {
    [
        ("flash", "fwd", 1.0, Box::new(|s, c| Box::new(forward::<Flash<Inner>>(s, c)))),
        ("burn", "fwd", 1.0, Box::new(|s, c| Box::new(forward::<Inner>(s, c)))),
        ("flash", "fwd+bwd", TRAIN_FLOP_FACTOR, Box::new(|s, c| Box::new(train::<Flash<Autodiff<Inner>>>(s, c)))),
        ("burn", "fwd+bwd", TRAIN_FLOP_FACTOR, Box::new(|s, c| Box::new(train::<Autodiff<Inner>>(s, c)))),
    ]
}

/// Warns when a flash row did not run our kernels.
fn check_route(name: &str, shape: [usize; 4]) {
    if name == "flash"
        && let Some(route) = last_route().filter(|r| !r.is_kernel())
    {
        eprintln!("warning: flash {shape:?} took {route}");
    }
}

/// Rows to skip in a tuning run.
#[derive(Clone, Copy)]
struct Only {
    flash: bool,
    forward: bool,
    /// `--causal=true|false`: only that variant (both when `None`).
    causal: Option<bool>,
}

fn speed(shapes: &[[usize; 4]], only: Only) {
    println!("{SPEED_CSV_HEADER}");
    for &shape in shapes {
        for causal in [false, true].into_iter().filter(|c| only.causal.is_none_or(|o| o == *c)) {
            for (name, pass, factor, bench) in rows() {
                if (only.flash && name != "flash") || (only.forward && pass != "fwd") {
                    continue;
                }
                let ms = time(bench(shape, causal));
                check_route(name, shape);
                print_speed_row(name, shape, causal, pass, factor, ms);
            }
        }
    }
}

/// The speed modes' CSV columns (those of `../shared/anchors/torch_attention.py`).
const SPEED_CSV_HEADER: &str = "impl,B,H,N,D,causal,pass,ms,tflops";

/// One row under [`SPEED_CSV_HEADER`].
fn print_speed_row(name: &str, shape: [usize; 4], causal: bool, pass: &str, flop_factor: f64, ms: f64) {
    let [b, h, n, d] = shape;
    let tflops = forward_flops(shape, causal) * flop_factor / ms / 1e9;
    println!("{name},{b},{h},{n},{d},{causal},{pass},{ms:.3},{tflops:.1}");
}

/// Rounds of the `dq-ab` mode per shape.
const AB_ROUNDS: usize = 3;

/// `dq-ab`: ours forward+backward with dQ by its own kernel and by the one-pass atomics (once
/// per dQ atomic width of `--dq-widths=1,2,4`, default the planner's), interleaved (each round
/// times every variant, `AB_ROUNDS` rounds per shape), so that a drift of the device during the
/// run weighs on all alike. Rows `flash-dq-kernel` and `flash-dq-atomic` (or
/// `flash-dq-atomic-wN` with widths).
fn dq_ab(shapes: &[[usize; 4]], base: burn_flash_attn::Tuning, widths: &[u32]) {
    use burn_flash_attn::kernels::plan::DqAccumulation;
    let mut variants = vec![(DqAccumulation::Kernel, None)];
    if widths.is_empty() {
        variants.push((DqAccumulation::Atomic, None));
    }
    variants.extend(widths.iter().map(|&w| (DqAccumulation::Atomic, Some(w))));
    println!("{SPEED_CSV_HEADER}");
    for &shape in shapes {
        for causal in [false, true] {
            for _ in 0..AB_ROUNDS {
                for &(dq, width) in &variants {
                    let tuning = base.with_backward_dq(Some(dq));
                    burn_flash_attn::set_tuning(tuning.with_backward_dq_width(width.or(base.backward_dq_width)));
                    let ms = time(train::<Flash<Autodiff<Inner>>>(shape, causal));
                    check_route("flash", shape);
                    let name = match width {
                        Some(w) => format!("flash-dq-{}-w{w}", dq.name()),
                        None => format!("flash-dq-{}", dq.name()),
                    };
                    print_speed_row(&name, shape, causal, "fwd+bwd", TRAIN_FLOP_FACTOR, ms);
                }
            }
        }
    }
    burn_flash_attn::set_tuning(base);
}

fn memory() {
    println!("impl,B,H,N,D,causal,pass,peak_mib");
    for n in MEMORY_SEQS {
        let shape = [4, 16, n, 128];
        let [b, h, _, d] = shape;
        for (name, pass, _, bench) in rows() {
            let peak = peak_mib(bench(shape, true));
            check_route(name, shape);
            println!("{name},{b},{h},{n},{d},true,{pass},{peak:.0}");
        }
    }
}

/// The mma blocks of `--{flag}=...`, else of the environment variable `var`.
/// `--flag=value`, else the environment's `var`, parsed (exits with the error when it does not
/// parse).
fn parsed_arg<T>(args: &[String], flag: &str, var: &str) -> Option<T>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    let value = args
        .iter()
        .find_map(|a| a.strip_prefix(&format!("--{flag}=")).map(str::to_string))
        .or_else(|| std::env::var(var).ok())?;
    match value.parse() {
        Ok(parsed) => Some(parsed),
        Err(error) => {
            eprintln!("--{flag} / {var}: {error}");
            std::process::exit(2);
        }
    }
}

/// `B,H,N,D`.
fn parse_shape(text: &str) -> Option<[usize; 4]> {
    let dims: Vec<usize> = text.split(',').map(|d| d.trim().parse().ok()).collect::<Option<_>>()?;
    dims.try_into().ok()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| args.iter().any(|a| a == name);
    let mode = args.iter().find(|a| !a.starts_with("--")).map(String::as_str);
    // Before any CubeCL client: CubeCL reads its configuration once.
    let profile_log = profile::log_path();
    if mode == Some("profile") {
        profile::enable(&profile_log);
    }
    let tuning = burn_flash_attn::Tuning::default()
        .with_forward_mma(parsed_arg(&args, "mma", "BURN_FLASH_MMA"))
        .with_backward_mma(parsed_arg(&args, "mma-bwd", "BURN_FLASH_MMA_BWD"))
        .with_backward_dq(parsed_arg(&args, "dq", "BURN_FLASH_DQ"))
        .with_backward_dq_width(parsed_arg(&args, "dq-width", "BURN_FLASH_DQ_WIDTH"))
        .with_forward_path(parsed_arg(&args, "fwd-path", "BURN_FLASH_FWD_PATH"))
        .with_backward_path(parsed_arg(&args, "bwd-path", "BURN_FLASH_BWD_PATH"))
        .with_rolled_steps(parsed_arg(&args, "rolled", "BURN_FLASH_ROLLED"))
        .with_async_copy(parsed_arg(&args, "async", "BURN_FLASH_ASYNC"))
        .with_forward_q_registers(parsed_arg(&args, "q-registers", "BURN_FLASH_MMA_Q_REGISTERS"))
        .with_forward_early_kv(parsed_arg(&args, "early-kv", "BURN_FLASH_MMA_EARLY_KV"))
        .with_forward_chunked_output(parsed_arg(
            &args,
            "chunked-output",
            "BURN_FLASH_MMA_CHUNKED_OUTPUT",
        ))
        .with_backward_chunked_output(parsed_arg(
            &args,
            "bwd-chunked-output",
            "BURN_FLASH_MMA_BWD_CHUNKED_OUTPUT",
        ))
        .with_matrix_vector_loads(parsed_arg(&args, "matrix-vectors", "BURN_FLASH_MATRIX_VECTORS"))
        .with_matrix_prefetch(parsed_arg(&args, "matrix-prefetch", "BURN_FLASH_MATRIX_PREFETCH"))
        .with_matrix_staggered(parsed_arg(
            &args,
            "matrix-staggered",
            "BURN_FLASH_MATRIX_STAGGERED",
        ))
        .with_matrix_plane_softmax(parsed_arg(
            &args,
            "matrix-plane-softmax",
            "BURN_FLASH_MATRIX_PLANE_SOFTMAX",
        ))
        .with_matrix_wide_scores(parsed_arg(
            &args,
            "matrix-wide-scores",
            "BURN_FLASH_MATRIX_WIDE_SCORES",
        ))
        .with_matrix_plane_rows(parsed_arg(
            &args,
            "matrix-plane-rows",
            "BURN_FLASH_MATRIX_PLANE_ROWS",
        ))
        .with_matrix_forward_planes(parsed_arg(&args, "matrix-planes", "BURN_FLASH_MATRIX_PLANES"))
        .with_matrix_shared_stage(parsed_arg(
            &args,
            "matrix-shared-stage",
            "BURN_FLASH_MATRIX_SHARED_STAGE",
        ));
    if tuning != burn_flash_attn::Tuning::default() {
        eprintln!("tuning: {tuning:?}");
    }
    burn_flash_attn::set_tuning(tuning);
    let bar = [SHAPES[0], SHAPES[3]];
    let given: Vec<[usize; 4]> = args
        .iter()
        .filter_map(|a| a.strip_prefix("--shape="))
        .map(|s| parse_shape(s).unwrap_or_else(|| panic!("--shape={s}: expected B,H,N,D")))
        .collect();
    let shapes: &[[usize; 4]] = if !given.is_empty() {
        &given
    } else if flag("--quick") {
        &SHAPES[..1]
    } else if flag("--bar") {
        &bar
    } else {
        &SHAPES
    };
    // `--head-dim=D`: only the shapes of that head_dim (a device call has 10 minutes, and
    // Burn's own rows at both bar shapes take about that long).
    let head_dim = args.iter().find_map(|a| a.strip_prefix("--head-dim=")?.parse::<usize>().ok());
    let shapes: Vec<[usize; 4]> =
        shapes.iter().copied().filter(|s| head_dim.is_none_or(|d| s[3] == d)).collect();
    let shapes = &shapes[..];
    let only = Only {
        flash: flag("--flash-only"),
        forward: flag("--fwd-only"),
        causal: parsed_arg(&args, "causal", "BENCH_CAUSAL"),
    };
    match mode {
        Some("memory") => memory(),
        Some("profile") => profile::profile(if given.is_empty() { &SHAPES[..1] } else { &given }, &profile_log),
        Some("features") => features::features(only.flash),
        Some("features-memory") => features::features_memory(),
        Some("speed") | None => speed(shapes, only),
        Some("dq-ab") => {
            let widths: Option<String> = parsed_arg(&args, "dq-widths", "DQAB_WIDTHS");
            let widths: Vec<u32> = widths
                .iter()
                .flat_map(|w| w.split(','))
                .map(|w| w.trim().parse().unwrap_or_else(|_| panic!("--dq-widths: {w:?} is not a width")))
                .collect();
            dq_ab(shapes, tuning, &widths)
        }
        Some(other) => eprintln!("unknown mode {other}: use speed, dq-ab, memory, profile, features or features-memory"),
    }
}
