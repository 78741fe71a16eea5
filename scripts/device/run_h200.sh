#!/usr/bin/env bash
# The seed experiment on the H200 device machine (no Rust there): gpt2-small, batch 16 x 1024
# bytes, bf16, same seed and data, trained by the flash binary and by the fallback binary, then
# PyTorch's GPT-2 anchor. CSVs and logs go to $OUT.
#
# Carry `.carry` (built here by scripts/device/pack_gpt.sh, see scripts/device/README.md):
#   .carry/bin/flash-gpt-{flash,fallback}.gz   stripped, gzip-compressed CUDA bf16 release builds
#   .carry/data/fortunes.txt                   examples/gpt/scripts/fetch_fortunes.sh
#   .carry/anchors/torch_gpt.py                copied from ../shared/anchors
#
# Usage: scripts/device/run_h200.sh [PHASE...]   phases: flash fallback torch compare (default: all)
# DATA (default .carry/data/fortunes.txt) and OUT (default out/ in the repository root): a
# relative path given is relative to the directory the script is called from.
# The device allows 10 minutes per command: run phases in separate calls if one call is too short.
# Each phase is cut at PHASE_TIMEOUT seconds; a cut run keeps the CSV rows it had written.
set -uo pipefail

# Absolute paths before any cd: the training phase runs in a temporary directory.
[ -z "${DATA:-}" ] || DATA="$(realpath -m -- "$DATA")"
[ -z "${OUT:-}" ] || OUT="$(realpath -m -- "$OUT")"
cd "$(dirname "$0")/../.."
root="$PWD"

carry="$root/.carry"
out="${OUT:-$root/out}"
steps="${STEPS:-300}"
batch="${BATCH:-16}"
seed="${SEED:-0}"
data="${DATA:-$carry/data/fortunes.txt}"
phase_timeout="${PHASE_TIMEOUT:-280}"
export RUST_LOG="${RUST_LOG:-warn,burn_flash_attn=info}"
phases=("$@")
[ ${#phases[@]} -gt 0 ] || phases=(flash fallback torch compare)
mkdir -p "$out"
bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT

unpack() {
  gunzip -c "$carry/bin/flash-gpt-$1.gz" >"$bin/flash-gpt-$1" && chmod +x "$bin/flash-gpt-$1"
}

train() {
  local variant="$1"
  unpack "$variant" || return 1
  echo "== $variant: gpt2-small, batch $batch, $steps steps, seed $seed, $data"
  # CubeCL logs each kernel it compiles (cubecl.toml in the working directory); a sampler
  # records every 10 s how many were compiled and how many steps were done, so a run cut by
  # the timeout still says where its time went.
  local work
  work="$(mktemp -d)"
  # The PTX of every compiled kernel is cached under target/ (kept between calls on a warm
  # machine): a later phase or call compiles only what no earlier one did.
  mkdir -p "$root/target/gpt-ptx-cache"
  printf '[compilation]\ncache = { file = "%s" }\n\n[compilation.logger]\nlevel = "basic"\nfile = "%s"\n' \
    "$root/target/gpt-ptx-cache" "$out/$variant-compiled.log" >"$work/cubecl.toml"
  (
    while sleep 10; do
      echo "$(date +%T) compiled $(grep -c . "$out/$variant-compiled.log" 2>/dev/null || echo 0)" \
        "csv_rows $(grep -c . "$out/$variant.csv" 2>/dev/null || echo 0)"
    done
  ) >"$out/$variant-progress.txt" &
  local sampler=$!
  (cd "$work" && timeout "$phase_timeout" "$bin/flash-gpt-$variant" train --preset gpt2-small \
    --batch "$batch" --steps "$steps" --seed "$seed" --data "$data" \
    --csv "$out/$variant.csv" --quiet) 2>&1 | tee "$out/$variant.log"
  local status=${PIPESTATUS[0]}
  kill "$sampler" 2>/dev/null
  rm -rf "$work"
  return "$status"
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$out/gpu.txt" 2>&1
status=0
for phase in "${phases[@]}"; do
  case "$phase" in
    flash | fallback) train "$phase" || status=1 ;;
    torch)
      timeout "$phase_timeout" python3 "$carry/anchors/torch_gpt.py" "$batch" 2>&1 \
        | tee "$out/torch_gpt.log" || status=1
      ;;
    compare)
      unpack flash || { status=1; continue; }
      "$bin/flash-gpt-flash" compare "$out/flash.csv" "$out/fallback.csv" | tee "$out/compare.txt"
      "$bin/flash-gpt-flash" plot "$out/flash.csv" "$out/fallback.csv" --out "$out/gpt2-small.png"
      ;;
    *) echo "unknown phase $phase (flash fallback torch compare)"; status=1 ;;
  esac
done
exit "$status"
