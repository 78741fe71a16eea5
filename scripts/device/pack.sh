#!/usr/bin/env bash
# Runs here (needs Rust and ../shared/anchors): builds the CUDA release binaries that run.sh,
# regs.sh and sass.sh need and packs them (stripped, gzipped) into .carry/bin/, with the anchors
# into .carry/anchors/, under the 64 MiB a device call may carry. See scripts/device/README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .carry/bin .carry/anchors
cp ../shared/anchors/*.py .carry/anchors/ 2>/dev/null || true
cp benches/anchors/*.py .carry/anchors/
pack() {  # pack NAME PATH
  strip -o ".carry/bin/$1" "$2" && gzip -f ".carry/bin/$1"
}
newest() {  # the newest executable cargo built for a target name
  ls -t target/release/deps/"$1"-* | grep -v '\.d$' | head -n 1
}
cargo test -p burn-flash-attn-kernels --release --no-default-features --features cuda --no-run
cargo test --test conformance --test nn --release --no-default-features --features cuda,fusion --no-run
cargo bench --bench attention --no-run --no-default-features --features cuda,fusion
for t in forward backward wave64 planner matrix_codegen matrix_tuning mma_codegen conformance nn \
  attention; do
  pack "$t" "$(newest "$t")"
done
du -sh .carry
