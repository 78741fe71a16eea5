#!/usr/bin/env bash
# Runs on the H200 device machine, which has CUDA and PyTorch but no Rust: the binaries are built
# here, stripped and gzipped into .carry/bin/ (see benches/device/pack.sh), the anchors copied to
# .carry/anchors/. Every step writes its full output under $OUT and prints a short tail.
#
#   benches/device/run.sh STEP...
#   STEP: ptests | ktests | conformance | speed | quick | memory | anchors | tune
# ptests: the device test suites in parallel (ktests and conformance run them one by one).
# tune: our kernels only, the two shapes of the issues' bar, for several block configs of the
# mma forward (BURN_FLASH_MMA=planes,block_kv[,plane_rows]) and backward
# (BURN_FLASH_MMA_BWD=planes,inner).
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=/tmp/flash-bin
mkdir -p "$BIN" "${OUT:=/tmp/out}"
for f in .carry/bin/*.gz; do
  gunzip -c "$f" > "$BIN/$(basename "$f" .gz)" && chmod +x "$BIN/$(basename "$f" .gz)"
done
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"
export PYTHONUNBUFFERED=1

step() {  # step NAME COMMAND...: runs COMMAND (cut after STEP_TIMEOUT s), full log under $OUT
  local name=$1; shift
  local start=$SECONDS
  timeout "${STEP_TIMEOUT:-240}" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc, $((SECONDS - start)) s"
  grep -E "^test result|FAILED|panicked|error" "$OUT/$name.log" | head -20
  tail -n 4 "$OUT/$name.log"
}

for s in "$@"; do
  case $s in
    ktests)
      for t in forward backward wave64 heuristics matrix_codegen mma_codegen; do
        [ -x "$BIN/$t" ] && step "kernels-$t" "$BIN/$t" --test-threads=4
      done ;;
    ptests)
      # The device suites at once (nvrtc compiles on 16 cores): forward (default blocks, and
      # 32-row planes everywhere), backward, wave64 and conformance.
      start=$SECONDS
      for run in forward forward-rows32 backward wave64 conformance; do
        case $run in
          forward-rows32) cmd=(env BURN_FLASH_MMA=4,64,32 "$BIN/forward" --test-threads=4) ;;
          conformance) cmd=("$BIN/conformance" --test-threads=1) ;;
          *) cmd=("$BIN/$run" --test-threads=4) ;;
        esac
        (timeout "${STEP_TIMEOUT:-420}" "${cmd[@]}" > "$OUT/p-$run.log" 2>&1
         echo "== $run: exit $?, $((SECONDS - start)) s") &
      done
      wait
      for run in forward forward-rows32 backward wave64 conformance; do
        echo "-- $run"; grep -E "^test result|FAILED|panicked" "$OUT/p-$run.log" | head -12
      done ;;
    conformance) step conformance "$BIN/conformance" --test-threads=1 ;;
    quick) step quick "$BIN/attention" speed --quick ;;
    speed) step speed "$BIN/attention" speed ;;
    memory) step memory "$BIN/attention" memory ;;
    anchors) step anchors python3 .carry/anchors/torch_attention.py ;;
    tune)
      for cfg in ${TUNE_FWD:-4,64,32 4,32,32 2,64,32 8,64 8,32}; do
        BURN_FLASH_MMA=$cfg step "tune-fwd-${cfg//,/x}" "$BIN/attention" speed --bar --flash-only --fwd-only
        sed "s/^/$cfg;/" "$OUT/tune-fwd-${cfg//,/x}.log" | grep -v impl
      done
      for cfg in ${TUNE_BWD:-4,64 4,32 8,64}; do
        BURN_FLASH_MMA_BWD=$cfg step "tune-bwd-${cfg//,/x}" "$BIN/attention" speed --bar --flash-only
        sed "s/^/$cfg;/" "$OUT/tune-bwd-${cfg//,/x}.log" | grep "fwd+bwd"
      done ;;
    *) echo "unknown step $s" ;;
  esac
done
