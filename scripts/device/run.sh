#!/usr/bin/env bash
# Runs on the H200 device machine, which has CUDA and PyTorch but no Rust: the binaries are built
# here, stripped and gzipped into .carry/bin/ (see scripts/device/pack.sh), the anchors copied to
# .carry/anchors/. Every step writes its full output under $OUT and prints a short tail.
#
#   scripts/device/run.sh STEP...
#   STEP: ptests | vtests | ktests | conformance | h200 | speed | bar | quick | memory | anchors
#         | features | features-burn | tune | profile | kprofile | dqab | sanitize | matrix
#         | rolled | rolled-compile | staged | staged-compile | base | ncu | ncu-matrix
#         | ncu-forward | prefetch
#         | staggered | plane_softmax | wide_scores | plane_rows | shared_stage | bwd_chunked
# base: the bench of an earlier commit (.carry/bin/attention-base.gz), ours at the eight shapes.
# rolled: the mma kernels with their head-dim products as loops in the source beside the
# default, ours only, at the eight shapes of `h200` ($OUT/rolled.csv).
# staged / staged-compile: the same two for the mma kernels streaming through registers
# instead of cp.async (Tuning::async_copy; $OUT/staged.csv, $OUT/kprofile-{staged,async}.csv).
# bwd_chunked: the mma gradient kernels' dK, dV, dQ written in 16-byte chunks beside element-wise.
# h200: results/h200.csv in one step: ours at issue 15's eight shapes, then the PyTorch anchors
# (the same eight by default), into $OUT/ours.csv, $OUT/torch.csv and $OUT/h200.csv (ours and
# the SDPA flash / cuDNN rows, as benches/results/h200.csv keeps them).
# matrix: the matrix (cmma) forward and backward forced, beside the default path (issue 16).
# prefetch / staggered / plane_softmax / wide_scores / plane_rows: the matrix paths forced,
# with that option on and off ($OUT/<step>.csv; plane_rows: the forward only, 32 and 16).
# kprofile: device time per kernel from CubeCL's profiler (`attention profile`, PROFILE_SHAPES).
# ptests: the device test suites in parallel (ktests and conformance run them one by one);
# PTESTS picks them: forward, forward-rows32, forward-matrix, forward-rolled, backward,
# backward-atomic, backward-matrix, backward-matrix-atomic, backward-rolled,
# backward-atomic-rolled, forward-staged, backward-staged, backward-atomic-staged (BWD_FILTER),
# forward-matrix-rows32, forward-matrix-shared, backward-chunked, backward-atomic-chunked,
# matrix-backward, matrix-forward, wave64, conformance, nn, or any other test binary by name
# (scripts/device/ptests.sh has each one's command line). Each test runs its cases on
# CASE_THREADS threads (FLASH_CASE_THREADS, default 4): nvrtc compiles a case's kernels on one
# core, and a test's cases otherwise run in order; CASE_DTYPES (FLASH_CASE_DTYPES, e.g.
# f16,bf16) runs only those dtypes' cases.
# vtests: the mma tests of the forward (names with "mma") and backward (bf16 / f16) suites for
# non-default blocks, in parallel: VTEST_FWD (BURN_FLASH_MMA) and VTEST_BWD (BURN_FLASH_MMA_BWD).
# tune: our kernels only, the two shapes of the issues' bar, for several block configs of the
# mma forward (BURN_FLASH_MMA=planes,block_kv,plane_rows,buffers,async) and backward
# (BURN_FLASH_MMA_BWD=planes,inner,16,buffers,async; "default" = the binary's defaults).
# bar: ours and Burn's rows at the bar shapes; BAR_ARGS=--head-dim=64 (or 128) takes one shape
# (both with Burn's rows take about 290 s). PTESTS picks ptests' suites.
set -uo pipefail
cd "$(dirname "$0")/../.."
# ptest_cmd: the command line of each of the ptests step's suites.
source scripts/device/ptests.sh
# BIN: where the binaries are unpacked (another folder for a second run.sh in parallel).
BIN=${BIN:-/tmp/flash-bin}
mkdir -p "$BIN" "${OUT:=/tmp/out}"
for f in .carry/bin/*.gz; do
  gunzip -c "$f" > "$BIN/$(basename "$f" .gz)" && chmod +x "$BIN/$(basename "$f" .gz)"
done
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"
export PYTHONUNBUFFERED=1
# Issue 15's eight shapes (torch_attention.py's default list).
EIGHT=(--shape=64,12,1024,64 --shape=16,16,2048,64 --shape=8,16,4096,64 --shape=16,16,2048,128
  --shape=4,16,8192,128 --shape=32,12,1024,32 --shape=6,12,512,32 --shape=1,16,32768,128)

step() {  # step NAME COMMAND...: runs COMMAND (cut after STEP_TIMEOUT s), full log under $OUT
  local name=$1; shift
  local start=$SECONDS
  timeout "${STEP_TIMEOUT:-240}" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc, $((SECONDS - start)) s"
  grep -E "^test result|FAILED|panicked|error" "$OUT/$name.log" | head -20
  tail -n 4 "$OUT/$name.log"
}

# find_ncu: the path of Nsight Compute's ncu on this machine, empty if there is none.
find_ncu() {
  command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null \
    | head -n 1
}

# ncu_profile NAME KERNEL_REGEX KEYS CMD...: Nsight Compute (`$ncu`, full set, clocks as the
# bench sees them) on LAUNCHES (default 1) launches of KERNEL_REGEX after the first two in CMD:
# $OUT/NAME.csv (sections), NAME-sass.csv (per-SASS-instruction counters), with RAW=1 also
# NAME-raw.csv (every raw metric); prints the metrics KEYS (a regex of metric names) names.
ncu_profile() {
  local name=$1 kernel=$2 keys=$3 start=$SECONDS
  shift 3
  timeout "${NCU_TIMEOUT:-150}" "$ncu" --clock-control none --kernel-name "regex:$kernel" \
    --launch-skip 2 --launch-count "${LAUNCHES:-1}" --set full --import-source no \
    -f -o "$OUT/$name" "$@" > "$OUT/$name.log" 2>&1
  echo "== $name: exit $?, $((SECONDS - start)) s"
  "$ncu" --import "$OUT/$name.ncu-rep" --page details --csv > "$OUT/$name.csv" 2>&1
  "$ncu" --import "$OUT/$name.ncu-rep" --page source --print-source sass --csv \
    > "$OUT/$name-sass.csv" 2>&1
  if [ "${RAW:-0}" = 1 ]; then
    "$ncu" --import "$OUT/$name.ncu-rep" --page raw --csv > "$OUT/$name-raw.csv" 2>&1
  fi
  grep -E "\"($keys)\"" "$OUT/$name.csv" | cut -d, -f5,12- | head -12
  rm -f "$OUT/$name.ncu-rep"
}

# speed_beside NAME VAR=VALUE [ARGS...]: ours at the eight shapes of `h200` with VAR=VALUE in
# the environment (impl flash-NAME), then with the default, one process each, PAIRS times
# (default 1), the bench given ARGS too: $OUT/NAME.csv (each pair's NAME rows, then its default
# rows).
speed_beside() {
  local name=$1 setting=$2 start=$SECONDS pair run
  shift 2
  for pair in $(seq "${PAIRS:-1}"); do
    run=$name$([ "$pair" = 1 ] || echo "-$pair")
    env "$setting" timeout "${STEP_TIMEOUT:-240}" "$BIN/attention" speed --flash-only "$@" \
      "${EIGHT[@]}" > "$OUT/$run-only.csv" 2> "$OUT/$run.err"
    echo "== $run: exit $?, $((SECONDS - start)) s"
    timeout "${STEP_TIMEOUT:-240}" "$BIN/attention" speed --flash-only "$@" "${EIGHT[@]}" \
      > "$OUT/$run-default.csv" 2> "$OUT/$run-default.err"
    echo "== default: exit $?, $((SECONDS - start)) s"
  done
  { head -n 1 "$OUT/$name-only.csv"
    for pair in $(seq "${PAIRS:-1}"); do
      run=$name$([ "$pair" = 1 ] || echo "-$pair")
      grep -v '^impl' "$OUT/$run-only.csv" | sed "s/^flash,/flash-$name,/"
      grep -v '^impl' "$OUT/$run-default.csv"
    done
  } > "$OUT/$name.csv"
  cat "$OUT/$name.csv"
}

# first_calls_beside VAR NAME=VALUE NAME=VALUE "SHAPES": first calls (compilation + run) per
# kernel from CubeCL's profiler at SHAPES, one process per VAR=VALUE: $OUT/kprofile-NAME.csv.
first_calls_beside() {
  local var=$1 shapes=$4 args=() shape run
  for shape in $shapes; do args+=("--shape=$shape"); done
  for run in "$2" "$3"; do
    local name=${run%%=*}
    step "kprofile-$name" env "$var=${run#*=}" PROFILE_LOG="$OUT/cubecl-profile-$name.log" \
      "$BIN/attention" profile "${args[@]}"
    cp "$OUT/kprofile-$name.log" "$OUT/kprofile-$name.csv"
  done
}

for s in "$@"; do
  case $s in
    ktests)
      for t in forward backward wave64 planner matrix_codegen mma_codegen; do
        [ -x "$BIN/$t" ] && step "kernels-$t" "$BIN/$t" --test-threads=4
      done ;;
    ptests)
      # The device suites at once (nvrtc compiles on 16 cores): forward (default blocks, and
      # 32-row planes everywhere), backward, wave64 and conformance (PTESTS picks some).
      export FLASH_CASE_THREADS=${CASE_THREADS:-4}
      if [ -n "${CASE_DTYPES:-}" ]; then export FLASH_CASE_DTYPES=$CASE_DTYPES; fi
      start=$SECONDS
      for run in ${PTESTS:-forward forward-rows32 backward wave64 conformance}; do
        ptest_cmd "$run"
        (timeout "${STEP_TIMEOUT:-420}" "${cmd[@]}" > "$OUT/p-$run.log" 2>&1
         echo "== $run: exit $?, $((SECONDS - start)) s") &
      done
      wait
      for run in ${PTESTS:-forward forward-rows32 backward wave64 conformance}; do
        echo "-- $run"; grep -E "^test result|FAILED|panicked" "$OUT/p-$run.log" | head -12
      done ;;
    vtests)
      start=$SECONDS
      for cfg in ${VTEST_FWD:-4,64,32,2 8,32,16,2}; do
        (BURN_FLASH_MMA=$cfg timeout "${STEP_TIMEOUT:-300}" "$BIN/forward" mma --test-threads=4 \
           > "$OUT/v-fwd-${cfg//,/x}.log" 2>&1
         echo "== forward mma, BURN_FLASH_MMA=$cfg: exit $?, $((SECONDS - start)) s") &
      done
      for cfg in ${VTEST_BWD:-4,32,16,2}; do
        (BURN_FLASH_MMA_BWD=$cfg timeout "${STEP_TIMEOUT:-300}" "$BIN/backward" bf16 f16 \
           --test-threads=6 > "$OUT/v-bwd-${cfg//,/x}.log" 2>&1
         echo "== backward bf16/f16, BURN_FLASH_MMA_BWD=$cfg: exit $?, $((SECONDS - start)) s") &
      done
      wait
      for log in "$OUT"/v-*.log; do
        echo "-- $(basename "$log")"; grep -E "^test result|FAILED|panicked" "$log" | head -8
      done ;;
    profile)
      # Per-kernel device time of the bar shapes (ours only) under Nsight Systems, if present.
      nsys=$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys \
        2>/dev/null | head -n 1)
      if [ -z "$nsys" ]; then echo "profile: no nsys on this machine"; else
        timeout "${STEP_TIMEOUT:-240}" "$nsys" profile -o "$OUT/prof" --force-overwrite true -t cuda \
          "$BIN/attention" speed --bar --flash-only > "$OUT/profile-run.log" 2>&1
        echo "== profile: exit $?"
        "$nsys" stats -r cuda_gpu_kern_sum -f csv -o "$OUT/prof" "$OUT/prof.nsys-rep" \
          > "$OUT/profile-stats.log" 2>&1
        cut -d, -f1-9 "$OUT"/prof_cuda_gpu_kern_sum.csv 2>/dev/null | cut -c1-220 | head -40
      fi ;;
    kprofile)
      # Device time per kernel from CubeCL's own profiler (`attention profile`), ours only, at
      # PROFILE_SHAPES (default the smallest anchor shape and the bar's long one).
      args=()
      for shape in ${PROFILE_SHAPES:-6,12,512,32 4,16,8192,128}; do args+=("--shape=$shape"); done
      PROFILE_LOG="$OUT/cubecl-profile.log" step kprofile "$BIN/attention" profile "${args[@]}"
      cp "$OUT/kprofile.log" "$OUT/kprofile.csv" ;;
    sanitize)
      # compute-sanitizer memcheck over the conformance gradient tests (SANITIZE_FILTER), to name
      # the kernel behind an illegal address.
      cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n 1)
      if [ -z "$cs" ]; then echo "sanitize: no compute-sanitizer on this machine"; else
        timeout "${STEP_TIMEOUT:-240}" "$cs" --tool memcheck --print-limit 20 "$BIN/conformance" \
          "${SANITIZE_FILTER:-semantics::gradients_match_autodiff_semantics}" --exact --test-threads=1 \
          > "$OUT/sanitize.log" 2>&1
        echo "== sanitize: exit $?"
        grep -E "Invalid|of size|at 0x|by thread|kernel|ERROR SUMMARY" "$OUT/sanitize.log" | head -40
      fi ;;
    conformance) step conformance "$BIN/conformance" --test-threads=1 --nocapture ;;
    quick) step quick "$BIN/attention" speed --quick ;;
    speed) step speed "$BIN/attention" speed ;;
    # Burn's own rows are slow (its training step at (16,16,2048,128) takes ~40 ms a call, at
    # N = 8192 seconds): a 240 s limit cut both of these on 2026-11-30 (H200, 0af16f3).
    bar) STEP_TIMEOUT=${BAR_TIMEOUT:-420} step bar "$BIN/attention" speed --bar ${BAR_ARGS:-} ;;
    # The one-pass backward against dQ's own kernel, interleaved in one process (DQAB_ARGS:
    # shapes, default the eight of `h200`; 126 s on 2026-12-03). DQAB_WIDTHS=1,2,4 (read by
    # the bench) times the one pass at each dQ atomic width (252 s at the eight shapes).
    dqab)
      if [ -n "${DQAB_ARGS:-}" ]; then args=($DQAB_ARGS); else args=("${EIGHT[@]}"); fi
      STEP_TIMEOUT=${DQAB_TIMEOUT:-420} step dqab "$BIN/attention" dq-ab "${args[@]}" ;;
    h200)
      # About 90 s for ours and 75 s for PyTorch's four paths (2026-12-03).
      start=$SECONDS
      timeout "${STEP_TIMEOUT:-240}" "$BIN/attention" speed --flash-only "${EIGHT[@]}" \
        > "$OUT/ours.csv" 2> "$OUT/ours.err"
      echo "== ours: exit $?, $((SECONDS - start)) s"
      timeout "${ANCHOR_TIMEOUT:-240}" python3 .carry/anchors/torch_attention.py \
        > "$OUT/torch.csv" 2> "$OUT/torch.err"
      echo "== torch: exit $?, $((SECONDS - start)) s"
      { cat "$OUT/ours.csv"
        grep -E '^torch-sdpa-(flash|cudnn),' "$OUT/torch.csv" | sed 's/,True,/,true,/; s/,False,/,false,/'
      } > "$OUT/h200.csv"
      cat "$OUT/h200.csv" ;;
    base)
      # The bench binary of an earlier commit, packed here as .carry/bin/attention-base.gz (see
      # scripts/device/README.md), ours only at the eight shapes of `h200`, right after them in
      # the same call: $OUT/base.csv (impl flash-base).
      start=$SECONDS
      if [ ! -x "$BIN/attention-base" ]; then echo "base: no attention-base in .carry/bin"; else
        timeout "${STEP_TIMEOUT:-240}" "$BIN/attention-base" speed --flash-only "${EIGHT[@]}" \
          2> "$OUT/base.err" | sed 's/^flash,/flash-base,/' > "$OUT/base.csv"
        echo "== base: exit ${PIPESTATUS[0]}, $((SECONDS - start)) s"
        cat "$OUT/base.csv"
      fi ;;
    rolled)
      # Tuning::rolled_steps: the mma kernels with their head-dim products as loops in the
      # source, beside the default (unrolled): $OUT/rolled.csv (impl flash-rolled, then flash).
      speed_beside rolled BURN_FLASH_ROLLED=true ;;
    staged)
      # Tuning::async_copy: the mma kernels streaming through registers (no cp.async: a first
      # compile without libcu++'s barrier headers), beside the default: $OUT/staged.csv.
      speed_beside staged BURN_FLASH_ASYNC=false ;;
    bwd_chunked)
      # Tuning::backward_chunked_output: the mma gradient kernels writing dK, dV and dQ
      # through shared memory in 16-byte chunks beside their element-wise stores, at the eight
      # shapes, in PAIRS process pairs (default 2): $OUT/bwd_chunked.csv (impl flash-bwd_chunked,
      # then flash).
      PAIRS=${PAIRS:-2} speed_beside bwd_chunked BURN_FLASH_MMA_BWD_CHUNKED_OUTPUT=true ;;
    rolled-compile)
      # First calls per kernel, rolled and unrolled (Tuning::rolled_steps), default
      # PROFILE_SHAPES head dims 64 and 128 at 2048 keys: $OUT/kprofile-{rolled,unrolled}.csv.
      first_calls_beside BURN_FLASH_ROLLED rolled=true unrolled=false \
        "${PROFILE_SHAPES:-16,16,2048,64 16,16,2048,128}" ;;
    staged-compile)
      # The same, staged and by cp.async (Tuning::async_copy), default PROFILE_SHAPES head dims
      # 32 and 64 at 1024 keys: $OUT/kprofile-{staged,async}.csv.
      first_calls_beside BURN_FLASH_ASYNC staged=false async=true \
        "${PROFILE_SHAPES:-32,12,1024,32 64,12,1024,64}" ;;
    matrix)
      # The matrix paths (cmma: the forward's and the backward's, BURN_FLASH_FWD_PATH /
      # BURN_FLASH_BWD_PATH) beside the default (mma) path, ours only, at the eight shapes of
      # `h200`, one process each: $OUT/matrix.csv (impl flash-matrix, flash-matrix-two-kernel,
      # then flash).
      start=$SECONDS
      BURN_FLASH_FWD_PATH=matrix BURN_FLASH_BWD_PATH=matrix timeout "${STEP_TIMEOUT:-420}" \
        "$BIN/attention" speed --flash-only "${EIGHT[@]}" > "$OUT/matrix-only.csv" 2> "$OUT/matrix.err"
      echo "== matrix: exit $?, $((SECONDS - start)) s"
      # The matrix backward with dQ by its own kernel (the deterministic path; the default is
      # the one pass), impl flash-matrix-two-kernel, at MATRIX_TWO_KERNEL_SHAPES.
      BURN_FLASH_FWD_PATH=matrix BURN_FLASH_BWD_PATH=matrix BURN_FLASH_DQ=kernel timeout "${STEP_TIMEOUT:-420}" \
        "$BIN/attention" speed --flash-only ${MATRIX_TWO_KERNEL_SHAPES:---shape=16,16,2048,64 --shape=16,16,2048,128 --shape=4,16,8192,128} \
        > "$OUT/matrix-two-kernel.csv" 2>> "$OUT/matrix.err"
      echo "== matrix, dQ by its kernel: exit $?, $((SECONDS - start)) s"
      timeout "${STEP_TIMEOUT:-240}" "$BIN/attention" speed --flash-only "${EIGHT[@]}" \
        > "$OUT/mma.csv" 2> "$OUT/mma.err"
      echo "== mma (default): exit $?, $((SECONDS - start)) s"
      { sed 's/^flash,/flash-matrix,/' "$OUT/matrix-only.csv"
        grep -v '^impl' "$OUT/matrix-two-kernel.csv" | sed 's/^flash,/flash-matrix-two-kernel,/'
        grep -v '^impl' "$OUT/mma.csv"; } > "$OUT/matrix.csv"
      grep -iE "warning|error" "$OUT/matrix.err" | head -5
      cat "$OUT/matrix.csv" ;;
    prefetch|staggered|plane_softmax|wide_scores|plane_rows|shared_stage)
      # The matrix paths forced (the backward on its one pass) with one of their options on and
      # off, one process each: prefetch, the streamed blocks fetched one block ahead
      # (Tuning::matrix_prefetch); staggered, the forward's rows 8-15 walking their columns one
      # step later (Tuning::matrix_staggered); plane_softmax, the forward's softmax kept in each
      # plane (Tuning::matrix_plane_softmax); wide_scores, the f32 score rows padded by 32
      # bytes (the forward's S, its rows staggered in four groups; the gradient kernels' S and
      # dP, a strip's rows paired two apart: Tuning::matrix_wide_scores); plane_rows, the
      # forward's 32 query rows a plane against 16 (Tuning::matrix_plane_rows, forward only),
      # then 32 in two planes a cube (-32x2); shared_stage, the forward's S and O staging in
      # one tile (Tuning::matrix_shared_stage, forward only), 16 then 32 rows a plane (-32true,
      # -32false). At AB_SHAPES (default: the six of issue 15's bar): $OUT/$s.csv (impl
      # flash-matrix-$s-true, -false; -32, -16, -32x2).
      var=BURN_FLASH_MATRIX_$(echo "$s" | tr a-z A-Z)
      if [ -n "${AB_SHAPES:-}" ]; then args=($AB_SHAPES); else args=("${EIGHT[@]:0:6}"); fi
      values=(true false)
      if [ "$s" = plane_rows ]; then values=(32 16 32x2); args+=(--fwd-only); fi
      if [ "$s" = shared_stage ]; then values=(true false 32true 32false); args+=(--fwd-only); fi
      start=$SECONDS
      for on in "${values[@]}"; do
        case $on in
          32x2) setting=("$var=32" BURN_FLASH_MATRIX_PLANES=2) ;;
          32true|32false) setting=("$var=${on#32}" BURN_FLASH_MATRIX_PLANE_ROWS=32) ;;
          *) setting=("$var=$on") ;;
        esac
        env BURN_FLASH_FWD_PATH=matrix BURN_FLASH_BWD_PATH=matrix "${setting[@]}" \
          timeout "${STEP_TIMEOUT:-240}" "$BIN/attention" speed --flash-only "${args[@]}" \
          2>> "$OUT/$s.err" | sed "s/^flash,/flash-matrix-$s-$on,/" > "$OUT/$s-$on.csv"
        echo "== matrix, ${setting[*]}: exit ${PIPESTATUS[0]}, $((SECONDS - start)) s"
      done
      { cat "$OUT/$s-${values[0]}.csv"
        for on in "${values[@]:1}"; do grep -v '^impl' "$OUT/$s-$on.csv"; done; } > "$OUT/$s.csv"
      grep -iE "warning|error" "$OUT/$s.err" | head -5
      cat "$OUT/$s.csv" ;;
    ncu)
      # Nsight Compute on one launch of each gradient kernel (the default two-kernel backward,
      # then the one pass: BURN_FLASH_DQ=atomic) at NCU_SHAPE: sections as CSV in
      # $OUT/ncu-{two,one}.csv, per-SASS-instruction stall samples in $OUT/ncu-{two,one}-sass.csv.
      ncu=$(find_ncu)
      if [ -z "$ncu" ]; then echo "ncu: no ncu on this machine"; else
        keys='Duration|Registers Per Thread|Achieved Occupancy|Compute \(SM\) Throughput'
        keys+='|Memory Throughput|Issue Slots Busy'
        BURN_FLASH_DQ=kernel LAUNCHES=2 ncu_profile ncu-two "${NCU_KERNELS:-dkdv_mma|dq_mma}" \
          "$keys" "$BIN/attention" speed --flash-only "--shape=${NCU_SHAPE:-16,16,2048,64}"
        BURN_FLASH_DQ=atomic ncu_profile ncu-one "${NCU_KERNELS:-dkdv_mma|dq_mma}" "$keys" \
          "$BIN/attention" speed --flash-only "--shape=${NCU_SHAPE:-16,16,2048,64}"
      fi ;;
    ncu-forward)
      # Nsight Compute on one launch of our mma forward and one of PyTorch's SDPA-flash forward
      # (FlashAttention-2's kernel) at NCU_SHAPE (default 64,12,1024,64), not causal and
      # causal: $OUT/ncu-forward-{ours,sdpa}-{false,true}.csv (side by side:
      # scripts/device/ncu_compare.py), -raw.csv (every metric, the stall reasons among them)
      # and -sass.csv (per-SASS-instruction samples: scripts/device/ncu_sass_regions.py).
      ncu=$(find_ncu)
      if [ -z "$ncu" ]; then echo "ncu: no ncu on this machine"; else
        shape=${NCU_SHAPE:-64,12,1024,64}
        keys='Duration|Registers Per Thread|Achieved Occupancy|Issue Slots Busy'
        keys+='|Executed Instructions|Dynamic Shared Memory Per Block|Block Size|Grid Size'
        for causal in false true; do
          RAW=1 ncu_profile "ncu-forward-ours-$causal" forward_mma "$keys" "$BIN/attention" \
            speed --flash-only --fwd-only "--shape=$shape" "--causal=$causal"
          RAW=1 ncu_profile "ncu-forward-sdpa-$causal" flash_fwd "$keys" \
            python3 .carry/anchors/sdpa_forward_once.py "$shape" "$causal"
        done
      fi ;;
    ncu-matrix)
      # Nsight Compute on one launch of the matrix forward and one of the matrix dK/dV kernel
      # (the one pass: dQ by atomic adds), both paths forced, at NCU_SHAPE: sections as CSV in
      # $OUT/ncu-matrix-{forward,dkdv}.csv (benches/RESULTS.md reads instruction mix, stalls,
      # occupancy and issue from them), per-SASS-instruction counters (stall samples, shared
      # wavefronts and bank conflicts per instruction) in $OUT/ncu-matrix-{forward,dkdv}-sass.csv.
      ncu=$(find_ncu)
      if [ -z "$ncu" ]; then echo "ncu: no ncu on this machine"; else
        keys='Duration|Registers Per Thread|Achieved Occupancy|Issue Slots Busy'
        keys+='|Executed Instructions'
        for run in forward dkdv; do
          kernel=$([ $run = forward ] && echo forward_matrix || echo matrix_dkdv)
          BURN_FLASH_FWD_PATH=matrix BURN_FLASH_BWD_PATH=matrix ncu_profile "ncu-matrix-$run" \
            "$kernel" "$keys" "$BIN/attention" speed --flash-only \
            "--shape=${NCU_SHAPE:-16,16,2048,64}"
        done
      fi ;;
    memory) STEP_TIMEOUT=${MEMORY_TIMEOUT:-420} step memory "$BIN/attention" memory ;;
    anchors) step anchors python3 .carry/anchors/torch_attention.py ;;
    # The model features (issue 13): ours, PyTorch's anchors, the N = 8192 padding memory;
    # Burn's rows (which materialize [B,H,N,N] at N = 8192) in their own step, features-burn.
    features)
      step features-flash "$BIN/attention" features --flash-only
      STEP_TIMEOUT=${ANCHOR_TIMEOUT:-300} step features-torch python3 .carry/anchors/torch_features.py
      step features-memory "$BIN/attention" features-memory ;;
    features-burn) STEP_TIMEOUT=${BURN_TIMEOUT:-300} step features-burn "$BIN/attention" features ;;
    tune)
      # TUNE_FWD: mma forward blocks (BURN_FLASH_MMA), each with "/shared" to re-read Q from
      # its shared tile (BURN_FLASH_MMA_Q_REGISTERS=false); TUNE_ARGS: the shapes (the bar's).
      for cfg in ${TUNE_FWD:-8,64,16,1 8,32,16,1 8,64,16,2 8,32,16,2 4,64,32,1 4,64,32,2 4,32,32,2 16,64,16,2}; do
        q=true; [[ $cfg == */shared ]] && q=false
        name=${cfg//,/x}; name=${name//\//-}
        BURN_FLASH_MMA=${cfg%/shared} BURN_FLASH_MMA_Q_REGISTERS=$q step "tune-fwd-$name" \
          "$BIN/attention" speed ${TUNE_ARGS:---bar} --flash-only --fwd-only
        sed "s|^|$cfg;|" "$OUT/tune-fwd-$name.log" | grep -v impl
      done
      for cfg in ${TUNE_BWD:-4,32,16,1 4,32,16,2 4,64,16,2 8,64,16,2 8,32,16,2}; do
        BURN_FLASH_MMA_BWD=$cfg step "tune-bwd-${cfg//,/x}" "$BIN/attention" speed --bar --flash-only
        sed "s/^/$cfg;/" "$OUT/tune-bwd-${cfg//,/x}.log" | grep "fwd+bwd"
      done ;;
    *) echo "unknown step $s" ;;
  esac
done
# PACK_OUT=1: everything under $OUT in one $OUT/all.tgz (a device call brings back at most 8
# files; a run of several steps writes more).
if [ "${PACK_OUT:-0}" = 1 ]; then
  tar czf /tmp/run-out.tgz -C "$OUT" . && rm -rf "${OUT:?}"/* && mv /tmp/run-out.tgz "$OUT/all.tgz"
fi
