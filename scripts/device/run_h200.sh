#!/usr/bin/env bash
# The example runs on the H200 device machine (no Rust there), bf16, same seed and data for the
# flash binary and the fallback binary: the GPT-2-small experiment (hand-written loop, batch
# 16 x 1024 bytes) and PyTorch's GPT-2 anchor; the same model through burn-train's Learner at
# any context; the encoder classifier on the fortunes' topics. CSVs and logs go to $OUT.
#
# Carry `.carry` (built here by scripts/device/pack_gpt.sh, see scripts/device/README.md):
#   .carry/bin/flash-gpt-{flash,fallback}.gz   stripped, gzip-compressed CUDA bf16 release builds
#   .carry/bin/flash-classifier-{flash,fallback}.gz
#   .carry/data/fortunes.txt                   examples/gpt/scripts/fetch_fortunes.sh
#   .carry/data/fortunes/                      examples/classifier/scripts/fetch_fortunes.sh
#   .carry/anchors/torch_gpt.py                copied from ../shared/anchors
#
# Usage: scripts/device/run_h200.sh [PHASE...]   (default: flash fallback torch compare)
#   flash | fallback                  the hand-written loop, gpt2-small, BATCH x 1024, STEPS steps
#   learner-VARIANT[:CONTEXT[:BATCH]] gpt2-small through the Learner (default 1024 and BATCH):
#                                     learner-VARIANT-CONTEXT.csv, its Learner artifacts deleted
#   classifier-VARIANT                the classifier (`base`, EPOCHS epochs, dropout 0.1) on the
#                                     fortunes: classifier-VARIANT.csv
#   torch | compare                   torch_gpt.py; compare and plot flash.csv / fallback.csv
# GPT_ARGS: more arguments for every flash-gpt train (e.g. `--backward-dq atomic`).
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

unpack() {  # unpack BINARY (flash-gpt-flash, flash-classifier-fallback, ...)
  gunzip -c "$carry/bin/$1.gz" >"$bin/$1" && chmod +x "$bin/$1"
}

# run NAME BINARY ARGS...: runs BINARY in a scratch directory (cut after PHASE_TIMEOUT s), its
# output in $out/NAME.log. CubeCL logs each kernel it compiles (cubecl.toml in the working
# directory); a sampler records every 10 s how many were compiled and how many CSV rows were
# written, so a run cut by the timeout still says where its time went.
run() {
  local name="$1" binary="$2"
  shift 2
  unpack "$binary" || return 1
  echo "== $name: $binary $*"
  local work
  work="$(mktemp -d)"
  printf '[compilation.logger]\nlevel = "basic"\nfile = "%s"\n' "$out/$name-compiled.log" >"$work/cubecl.toml"
  (
    while sleep 10; do
      echo "$(date +%T) compiled $(grep -c . "$out/$name-compiled.log" 2>/dev/null || echo 0)" \
        "csv_rows $(grep -c . "$out/$name.csv" 2>/dev/null || echo 0)"
    done
  ) >"$out/$name-progress.txt" &
  local sampler=$!
  # The PTX of every compiled kernel is cached under target/ (kept between calls on a warm
  # machine): a later phase or call compiles only what no earlier one did.
  mkdir -p "$root/target/gpt-ptx-cache"
  (cd "$work" && timeout "$phase_timeout" "$bin/$binary" "$@" --kernel-cache "$root/target/gpt-ptx-cache") 2>&1 \
    | tee "$out/$name.log"
  local status=${PIPESTATUS[0]}
  kill "$sampler" 2>/dev/null
  rm -rf "$work"
  return "$status"
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$out/gpu.txt" 2>&1
status=0
for phase in "${phases[@]}"; do
  case "$phase" in
    flash | fallback)
      echo "== $phase: gpt2-small, hand-written loop, batch $batch, $steps steps, seed $seed, $data"
      run "$phase" "flash-gpt-$phase" train --hand-loop --preset gpt2-small --batch "$batch" \
        --steps "$steps" --seed "$seed" --data "$data" --csv "$out/$phase.csv" --quiet ${GPT_ARGS:-} || status=1
      ;;
    learner-*)
      IFS=: read -r name context lbatch <<<"${phase#learner-}"
      context=${context:-1024}
      lbatch=${lbatch:-$batch}
      run "learner-$name-$context" "flash-gpt-$name" train --preset gpt2-small --context "$context" \
        --batch "$lbatch" --steps "$steps" --seed "$seed" --data "$data" \
        --csv "$out/learner-$name-$context.csv" --artifacts learner --quiet ${GPT_ARGS:-} || status=1
      ;;
    classifier-*)
      name=${phase#classifier-}
      run "classifier-$name" "flash-classifier-$name" --preset base --epochs "${EPOCHS:-5}" \
        --seed "$seed" --data "$carry/data/fortunes" --csv "$out/classifier-$name.csv" \
        --artifacts classifier || status=1
      ;;
    torch)
      timeout "$phase_timeout" python3 "$carry/anchors/torch_gpt.py" "$batch" 2>&1 \
        | tee "$out/torch_gpt.log" || status=1
      ;;
    compare)
      unpack flash-gpt-flash || { status=1; continue; }
      "$bin/flash-gpt-flash" compare "$out/flash.csv" "$out/fallback.csv" | tee "$out/compare.txt"
      "$bin/flash-gpt-flash" plot "$out/flash.csv" "$out/fallback.csv" --out "$out/gpt2-small.png"
      ;;
    *) echo "unknown phase $phase (flash fallback learner-* classifier-* torch compare)"; status=1 ;;
  esac
done
exit "$status"
