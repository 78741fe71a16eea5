#!/usr/bin/env bash
# Runs every test of the workspace on WGPU (lavapipe where there is no GPU): the kernels against
# the f64 reference, Flash<B> against Burn, burn_flash_attn::nn against burn-nn, and the examples
# (both builds of each) through burn-train's Learner.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo test --workspace "$@"
# The classifier example's other build: burn-flash-attn's encoder on Flash<Autodiff<Wgpu>> (the
# workspace run above builds it with burn-nn's encoder). `--workspace` keeps the features of the
# stack as above, so that only the two example crates are rebuilt (`-p flash-classifier` alone
# would rebuild Burn and WGPU with another feature set).
cargo test --workspace --features flash-classifier/flash --test tiny_lavapipe "$@"
