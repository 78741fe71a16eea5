#!/usr/bin/env bash
# Runs here (needs Rust, apt-get for the texts, and ../shared/anchors): builds the CUDA bf16
# release binaries of the example runs (flash-gpt and flash-classifier, each fallback and
# flash) and packs them, stripped and gzipped, into .carry/bin/ with the anchor and the texts,
# for run_h200.sh (see scripts/device/README.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -f .carry/data/fortunes.txt ] || examples/gpt/scripts/fetch_fortunes.sh
[ -f .carry/data/fortunes/science ] || examples/classifier/scripts/fetch_fortunes.sh
mkdir -p .carry/bin .carry/anchors
cp ../shared/anchors/torch_gpt.py .carry/anchors/
for variant in fallback flash; do
  features=cuda,bf16
  [ "$variant" = flash ] && features=$features,flash
  # One cargo call for both examples: the same features of the stack, built once.
  both=$(for f in ${features//,/ }; do printf 'flash-gpt/%s,flash-classifier/%s,' "$f" "$f"; done)
  nice -n 10 cargo build --release -p flash-gpt -p flash-classifier --no-default-features \
    --features "${both%,}"
  for example in flash-gpt flash-classifier; do
    strip -o ".carry/bin/$example-$variant" "target/release/$example"
    gzip -9f ".carry/bin/$example-$variant"
  done
done
du -sh .carry/bin/flash-gpt-* .carry/bin/flash-classifier-*
