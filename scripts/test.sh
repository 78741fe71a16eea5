#!/usr/bin/env bash
# Runs every test of the workspace on WGPU (lavapipe where there is no GPU): the kernels against
# the f64 reference, and Flash<B> against Burn.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo test --workspace "$@"
