//! Comparison with the f64 CPU oracle under the FlashAttention tolerance rule
//! ([`burn_flash_attn_kernels::tolerance`]): the kernel's error against the f64 oracle at most
//! `factor` times the error of the plain implementation at the test dtype's precision, plus a
//! rounding floor.
use burn_flash_attn_kernels::primitives::online_softmax::FULLY_MASKED_LSE;
use burn_flash_attn_kernels::problem::{AttentionProblem, FloatKind};
use burn_flash_attn_kernels::reference::{Forward, Precision};
use burn_flash_attn_kernels::tolerance::{GRADIENT_FACTOR, OUTPUT_FACTOR, check};

use super::case::Case;

/// The [`Precision`] of the plain implementation in a float kind.
pub fn precision(kind: FloatKind) -> Precision {
    match kind {
        FloatKind::F16 => Precision::F16,
        FloatKind::BF16 => Precision::BF16,
        FloatKind::F32 => Precision::F32,
    }
}

/// Checks a gradient against the oracle with the gradient rule, and that it holds no NaN.
/// `label` names the case and its seed.
pub fn check_gradient(
    label: &str,
    what: &str,
    got: &[f64],
    plain: &[f64],
    oracle: &[f64],
    dtype: FloatKind,
) -> Result<(), String> {
    if let Some(at) = got.iter().position(|x| !x.is_finite()) {
        return Err(format!(
            "{label}: {what} has a non-finite value {} at flat index {at}",
            got[at]
        ));
    }
    check(
        &format!("{label} {what}"),
        got,
        plain,
        oracle,
        GRADIENT_FACTOR,
        precision(dtype),
    )
}

/// Checks a forward's `o` and `lse` (logical row-major) against the oracle with the output
/// rule: o everywhere; the lse of rows that see a key against the plain lse rounded to f32 (the
/// type of the lse output: no f32 output can be closer than that); fully masked rows exactly
/// `FULLY_MASKED_LSE` with an all-zero output row. `label` names the case and its seed.
pub fn check_forward(
    label: &str,
    p: &AttentionProblem,
    o: &[f64],
    lse: &[f64],
    plain: &Forward,
    oracle: &Forward,
) -> Result<(), String> {
    let rounding = precision(p.dtype);
    check(
        &format!("{label}: o"),
        o,
        &plain.o,
        &oracle.o,
        OUTPUT_FACTOR,
        rounding,
    )?;
    let mut visible = (Vec::new(), Vec::new(), Vec::new());
    for row in 0..lse.len() {
        if oracle.lse[row].is_infinite() {
            let o_row = &o[row * p.val_dim..(row + 1) * p.val_dim];
            if lse[row] != FULLY_MASKED_LSE as f64 || o_row.iter().any(|&x| x != 0.0) {
                return Err(format!(
                    "{label}: fully masked row {row}: lse {} (want {FULLY_MASKED_LSE}), o {o_row:?}",
                    lse[row]
                ));
            }
        } else {
            visible.0.push(lse[row]);
            visible.1.push(Precision::F32.round(plain.lse[row]));
            visible.2.push(oracle.lse[row]);
        }
    }
    check(
        &format!("{label}: lse"),
        &visible.0,
        &visible.1,
        &visible.2,
        OUTPUT_FACTOR,
        rounding,
    )
}

/// Threads one test's cases run on: `FLASH_CASE_THREADS`, default 1 (in order). On a GPU most
/// of a case's time is one CPU core compiling its kernels, and a test's cases otherwise run one
/// after the other whatever `--test-threads` says: the device runs (`scripts/device/run.sh`)
/// set it so that a suite's longest tests use the machine's cores.
fn case_threads() -> usize {
    std::env::var("FLASH_CASE_THREADS").ok().and_then(|v| v.parse().ok()).unwrap_or(1).max(1)
}

/// The dtypes whose cases run: `FLASH_CASE_DTYPES`, a comma-separated list of `f16`, `bf16`,
/// `f32` (default: all). A device run that checks only the half-precision kernels (e.g. an mma
/// option: f32 takes the portable path on CUDA) sets `f16,bf16` so that a test's f32 cases do
/// not take its time; CI sets nothing.
fn case_dtypes() -> Vec<FloatKind> {
    let Ok(list) = std::env::var("FLASH_CASE_DTYPES") else {
        return vec![FloatKind::F16, FloatKind::BF16, FloatKind::F32];
    };
    list.split(',')
        .map(|name| match name.trim() {
            "f16" => FloatKind::F16,
            "bf16" => FloatKind::BF16,
            "f32" => FloatKind::F32,
            other => panic!("FLASH_CASE_DTYPES: {other:?} is not f16, bf16 or f32"),
        })
        .collect()
}

/// Runs `run` on every case of [`case_dtypes`] (on [`case_threads`] threads) and fails with all
/// the failures at once, in the cases' order.
pub fn run_all(cases: &[Case], run: impl Fn(&Case) -> Result<(), String> + Sync) {
    let dtypes = case_dtypes();
    let selected: Vec<&Case> = cases.iter().filter(|case| dtypes.contains(&case.dtype)).collect();
    if selected.len() < cases.len() {
        println!("FLASH_CASE_DTYPES: {} of {} cases run", selected.len(), cases.len());
    }
    let cases = &selected[..];
    let threads = case_threads().min(cases.len());
    let failures: Vec<String> = if threads <= 1 {
        cases.iter().filter_map(|case| run(case).err()).collect()
    } else {
        let next = std::sync::atomic::AtomicUsize::new(0);
        let mut failed: Vec<(usize, String)> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    scope.spawn(|| {
                        let mut failed = Vec::new();
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some(case) = cases.get(i) else { break failed };
                            if let Err(failure) = run(case) {
                                failed.push((i, failure));
                            }
                        }
                    })
                })
                .collect();
            workers.into_iter().flat_map(|worker| worker.join().expect("a case panicked")).collect()
        });
        failed.sort_by_key(|(i, _)| *i);
        failed.into_iter().map(|(_, failure)| failure).collect()
    };
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
