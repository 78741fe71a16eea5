#!/usr/bin/env bash
# Runs here (needs Rust, apt-get for the text, and ../shared/anchors): builds the two CUDA bf16
# release binaries of the GPT run (fallback, flash) and packs them, stripped and gzipped, into
# .carry/bin/ with the anchor and the text, for run_h200.sh (see scripts/device/README.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -f .carry/data/fortunes.txt ] || examples/gpt/scripts/fetch_fortunes.sh
mkdir -p .carry/bin .carry/anchors
cp ../shared/anchors/torch_gpt.py .carry/anchors/
for variant in fallback flash; do
  features=cuda,bf16
  [ "$variant" = flash ] && features=$features,flash
  nice -n 10 cargo build --release -p flash-gpt --no-default-features --features "$features"
  strip -o ".carry/bin/flash-gpt-$variant" target/release/flash-gpt
  gzip -9f ".carry/bin/flash-gpt-$variant"
done
du -sh .carry/bin/flash-gpt-*
