#!/usr/bin/env bash
# Runs the quickstart on WGPU (lavapipe where there is no GPU): one attention through Flash<Wgpu>
# and through Burn, printing the route taken and the max difference.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo run --example quickstart "$@"
