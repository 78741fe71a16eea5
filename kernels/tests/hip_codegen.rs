//! Rung 2 of the HIP ladder (docs/HIP.md): the HIP source of every kernel variant the routing
//! selects on an MI300X, generated with no device and no ROCm.
//!
//! A device-free client carries the properties cubecl-hip registers for gfx942 (wave64, 64 KiB
//! of LDS), once as cubecl-hip's default build (no cmma on gfx9) and once with `hip-rocwmma`
//! (rocWMMA cmma registered). The real planners choose every config for a grid of problems:
//! each dtype, head dims 33..256 (odd ones and val_dim != head_dim included), every
//! combination of causal / mask (u8, u32) / bias / softcap at long sequences, and every block
//! size the planners pick for short ones. Each variant's source is checked in
//! [`hip_offline::checks::violations`].
//!
//! A subset is written for the offline gfx942 compile (rung 3, `scripts/hip_offline_check.sh`):
//! to `$FLASH_HIP_SRC_DIR` (default `<target dir>/hip-src`), one `.hip` file per variant and a
//! `manifest.<build>.tsv` describing them.
mod hip_offline;
mod support;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use burn_flash_attn_kernels::plan::DeviceCaps;
use burn_flash_attn_kernels::{AttentionProblem, FloatKind, MaskKind, Window};
use hip_offline::checks::{WAVE, needs_rocwmma, violations};
use burn_flash_attn_kernels::backward::GradientConfig;
use burn_flash_attn_kernels::config::ForwardConfig;
use hip_offline::variants::{KernelConfig, Variant, hip_source, routed_variants};
use hip_offline::{GFX942, Intrinsics, MI300X_LDS_BYTES, MatrixCores, OfflineHip, RocWmma};

const DTYPES: [FloatKind; 3] = [FloatKind::F16, FloatKind::BF16, FloatKind::F32];
/// (head_dim, val_dim): the common ones, odd ones, and val_dim != head_dim.
const DIMS: [(usize, usize); 6] = [
    (64, 64),
    (128, 128),
    (256, 256),
    (33, 33),
    (127, 127),
    (96, 64),
];
/// Long enough that every planner picks its largest blocks.
const LONG: usize = 4096;
/// Sequence lengths whose pairs give every smaller block size the planners pick (forward
/// blocks 8..64, backward blocks 1..64).
const SWEEP: [usize; 7] = [1, 2, 4, 8, 16, 32, LONG];
/// The head dims whose block-size sweep is also compiled offline.
const COMPILED_SWEEP_DIMS: (usize, usize) = (128, 128);

/// The logit options of one problem.
#[derive(Clone, Copy, Debug)]
struct Options {
    causal: bool,
    mask: Option<MaskKind>,
    bias: bool,
    softcap: bool,
    quiet: bool,
    /// Window, ALiBi and grouped-query attention ([`all_features`]).
    features: bool,
}

const PLAIN: Options = Options {
    causal: false,
    mask: None,
    bias: false,
    softcap: false,
    quiet: false,
    features: false,
};

fn all_on(mask: MaskKind) -> Options {
    Options {
        causal: true,
        mask: Some(mask),
        bias: true,
        softcap: true,
        quiet: false,
        features: false,
    }
}

/// Every logit option with the model features: a sliding window, ALiBi, dropout, and
/// grouped-query attention (a runtime head mapping: the same variants as without).
fn all_features() -> Options {
    Options {
        features: true,
        ..all_on(MaskKind::U32)
    }
}

/// Every logit option and the quiet softmax (a forward-only variant: the backward is the same).
fn all_on_quiet() -> Options {
    Options {
        quiet: true,
        ..all_on(MaskKind::U32)
    }
}

fn every_option() -> Vec<Options> {
    let mut options = Vec::new();
    for causal in [false, true] {
        for mask in [None, Some(MaskKind::U8), Some(MaskKind::U32)] {
            for bias in [false, true] {
                for softcap in [false, true] {
                    options.push(Options {
                        causal,
                        mask,
                        bias,
                        softcap,
                        quiet: false,
                        features: false,
                    });
                }
            }
        }
    }
    options
}

fn problem(
    seq_q: usize,
    seq_kv: usize,
    (head_dim, val_dim): (usize, usize),
    dtype: FloatKind,
    o: Options,
) -> AttentionProblem {
    AttentionProblem {
        batch: 2,
        num_heads: 8,
        softcap: o.softcap.then_some(30.0),
        causal: o.causal,
        mask: o.mask,
        has_bias: o.bias,
        quiet_softmax: o.quiet,
        num_kv_heads: if o.features { 2 } else { 8 },
        window: o.features.then_some(Window { left: Some(200), right: Some(0) }),
        alibi: o.features,
        dropout: o.features.then_some(burn_flash_attn_kernels::Dropout::new(0.1, 7)),
        ..support::problem(dtype, head_dim, val_dim, seq_q, seq_kv)
    }
}

/// The problem grid, and the part of it whose variants are compiled offline: at long
/// sequences no options, all of them (u8 and u32 masks) and all with the quiet softmax for
/// every dtype and head dim, and
/// the block-size sweep of one head dim.
fn grid() -> (Vec<AttentionProblem>, Vec<AttentionProblem>) {
    let (mut checked, mut compiled) = (Vec::new(), Vec::new());
    for dtype in DTYPES {
        for dims in DIMS {
            for options in every_option().into_iter().chain([all_on_quiet(), all_features()]) {
                checked.push(problem(LONG, LONG, dims, dtype, options));
            }
            for options in [PLAIN, all_on(MaskKind::U8), all_on(MaskKind::U32), all_on_quiet(), all_features()] {
                compiled.push(problem(LONG, LONG, dims, dtype, options));
            }
            for seq_q in SWEEP {
                for seq_kv in SWEEP {
                    for options in [PLAIN, all_on(MaskKind::U8)] {
                        let p = problem(seq_q, seq_kv, dims, dtype, options);
                        checked.push(p);
                        if dims == COMPILED_SWEEP_DIMS {
                            compiled.push(p);
                        }
                    }
                }
            }
        }
    }
    (checked, compiled)
}

/// Where the sources for rung 3 go.
fn source_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("FLASH_HIP_SRC_DIR") {
        return dir.into();
    }
    // <target dir>/<profile>/deps/<this test>
    let exe = std::env::current_exe().expect("the test's path");
    let target = exe.ancestors().nth(3).expect("a cargo target dir");
    target.join("hip-src")
}

/// Checks every routed variant on a gfx942 client built with matrix-core compiler `M`, and
/// writes the sources of the compiled subset that `keep` accepts.
fn check_build<M: MatrixCores>(build: &str, keep: impl Fn(&Variant) -> bool) {
    let client = OfflineHip::<M>::client_for(GFX942);
    // What `plan` sees on a HIP client (bf16 cmma dropped: it does not compile).
    let runtime = <OfflineHip<M> as cubecl::Runtime>::name(&client);
    let caps = DeviceCaps::new(client.properties(), runtime);
    let (checked, compiled) = grid();
    let variants = routed_variants(&caps, &checked);
    let to_write = routed_variants(&caps, &compiled);
    assert!(to_write.keys().all(|name| variants.contains_key(name)));
    let dir = source_dir();
    std::fs::create_dir_all(&dir).expect("create the HIP source directory");
    let mut manifest =
        std::fs::File::create(dir.join(format!("manifest.{build}.tsv"))).expect("manifest");
    let (mut failures, mut written) = (Vec::new(), 0);
    let mut counts = BTreeMap::new();
    for (name, (variant, reason)) in &variants {
        let hip = hip_source(&client, variant).unwrap_or_else(|e| panic!("{build} {name}: {e}"));
        for wrong in violations(variant, &hip, MI300X_LDS_BYTES) {
            failures.push(format!("{build} {name}: {wrong}"));
        }
        *counts
            .entry(name.split('_').next().unwrap_or_default())
            .or_insert(0) += 1;
        if to_write.contains_key(name) && keep(variant) {
            let file = format!("{name}.hip");
            std::fs::write(dir.join(&file), &hip.source).expect("write a HIP source");
            let (cube, lds, rocwmma) = (
                hip.cube_size,
                hip.shared_memory_bytes,
                needs_rocwmma(&hip.source),
            );
            writeln!(
                manifest,
                "{file}\t{build}\t{cube}\t{lds}\t{rocwmma}\t{reason}"
            )
            .expect("manifest line");
            written += 1;
        }
    }
    let summary = format!(
        "{build}: {} variants checked {counts:?}; {written} written to {}",
        variants.len(),
        dir.display()
    );
    println!("{summary}");
    // For the report of scripts/hip_offline_check.sh, which may reuse these sources.
    std::fs::write(dir.join(format!("checked.{build}.txt")), format!("{summary}\n"))
        .expect("write the summary");
    assert!(
        failures.is_empty(),
        "{} violations:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// cubecl-hip's default build: no cmma on gfx9, so every variant is portable or backward.
#[test]
fn gfx942_default_build_every_routed_variant_gives_valid_hip() {
    check_build::<Intrinsics>("default", |_| true);
}

/// With `hip-rocwmma`: cmma is registered; only the matrix-path sources differ from the default
/// build's, so only they are written.
#[test]
fn gfx942_rocwmma_build_every_routed_variant_gives_valid_hip() {
    check_build::<RocWmma>("rocwmma", Variant::claims_matrix);
}

/// The rule without the partial-wave allowance: the portable planner gives every cube
/// at least one whole plane (for seq_q <= 8 it used to pick 32 work-items, half a wave64).
#[test]
fn gfx942_every_cube_is_a_whole_number_of_waves() {
    let client = OfflineHip::<Intrinsics>::client_for(GFX942);
    let runtime = <OfflineHip<Intrinsics> as cubecl::Runtime>::name(&client);
    let (checked, _) = grid();
    let partial: Vec<String> = routed_variants(&DeviceCaps::new(client.properties(), runtime), &checked)
        .into_iter()
        .filter(|(_, (variant, _))| !variant.cube_dim().num_elems().is_multiple_of(WAVE))
        .map(|(name, _)| name)
        .collect();
    assert!(
        partial.is_empty(),
        "{} variants run a partial wave: {:?}",
        partial.len(),
        &partial[..partial.len().min(3)]
    );
}

/// bf16 cmma fragments do not compile with rocWMMA (`rocwmma::PackTraits<__hip_bfloat16>` is
/// undefined: cubecl declares them as `__hip_bfloat16`), so no bf16 variant may take bf16
/// fragments on gfx942: `hip-rocwmma` registers bf16 16x16x16 cmma, and the planners see the
/// properties through `DeviceCaps::new`, which counts them as absent on HIP runtimes (as
/// `DeviceCaps::of` does). The bf16 matrix variants there are the matrix backward's with f32
/// tiles (the inputs converted, on rocWMMA's f32 cmma), where their tiles fit the LDS.
#[test]
fn gfx942_rocwmma_bf16_claims_the_matrix_path_only_on_f32_tiles() {
    let client = OfflineHip::<RocWmma>::client_for(GFX942);
    let (checked, _) = grid();
    let runtime = <OfflineHip<RocWmma> as cubecl::Runtime>::name(&client);
    let caps = DeviceCaps::new(client.properties(), runtime);
    let bf16: Vec<(String, Variant)> = routed_variants(&caps, &checked)
        .into_iter()
        .filter(|(_, (variant, _))| variant.dtype == FloatKind::BF16)
        .map(|(name, (variant, _))| (name, variant))
        .collect();
    let wrong: Vec<&String> = bf16
        .iter()
        .filter(|(_, variant)| match variant.kernel {
            KernelConfig::Forward(ForwardConfig::Matrix(config)) => !config.f32_tiles,
            KernelConfig::Backward(GradientConfig::Matrix(config)) => !config.f32_tiles,
            _ => false,
        })
        .map(|(name, _)| name)
        .collect();
    assert!(
        wrong.is_empty(),
        "{} bf16 variants on bf16 fragments: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(3)]
    );
    let f32_tiles = |forward: bool| {
        bf16.iter().any(|(_, variant)| {
            variant.claims_matrix() && matches!(variant.kernel, KernelConfig::Forward(_)) == forward
        })
    };
    assert!(f32_tiles(true), "bf16 takes the f32-tile matrix forward");
    assert!(f32_tiles(false), "bf16 takes the f32-tile matrix backward");
}

/// The shared-memory layout of every compiled variant but the matrix kernels' (forward and
/// backward, which still declare separate shared arrays) is the same in every generation: the
/// portable kernels carve their tiles from one allocation (`primitives::arena`), where CubeCL would
/// place separate arrays in a hash set's order, different in every process, and the gfx942 register
/// use with them (the offline compile of one generation would then say nothing certain about the
/// next). Each source is generated twice; the two optimizer runs hash with different keys.
#[test]
fn gfx942_shared_memory_layout_is_the_same_in_every_generation() {
    let client = OfflineHip::<Intrinsics>::client_for(GFX942);
    let runtime = <OfflineHip<Intrinsics> as cubecl::Runtime>::name(&client);
    let caps = DeviceCaps::new(client.properties(), runtime);
    let (_, compiled) = grid();
    let layout = |source: &str| -> Vec<String> {
        source
            .lines()
            .filter(|line| line.contains("dynamic_shared_mem[") || line.starts_with("// Shared array size"))
            .map(str::to_owned)
            .collect()
    };
    let mut differing = Vec::new();
    for (name, (variant, _)) in routed_variants(&caps, &compiled) {
        if variant.claims_matrix() {
            continue;
        }
        let first = hip_source(&client, &variant).expect("a HIP source");
        let second = hip_source(&client, &variant).expect("a HIP source");
        if layout(&first.source) != layout(&second.source) {
            differing.push(name);
        }
    }
    assert!(
        differing.is_empty(),
        "{} variants placed their shared memory differently in two generations: {:?}",
        differing.len(),
        &differing[..differing.len().min(3)]
    );
}
