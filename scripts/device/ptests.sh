#!/usr/bin/env bash
# Sourced by run.sh: ptest_cmd NAME sets `cmd` to the command line of one of `run.sh ptests`'
# suites (its header lists the names); $BIN holds the binaries, THREADS the test threads,
# BWD_FILTER / FWD_FILTER the backward / forward suite's test filter where an entry takes one.
ptest_cmd() {
  local threads=--test-threads=${THREADS:-4}
  # The backward suite's tests BWD_FILTER picks, the whole backward and forward suites.
  local bwd=("$BIN/backward" ${BWD_FILTER:-} "$threads") all_bwd=("$BIN/backward" "$threads")
  local fwd=("$BIN/forward" "$threads")
  case $1 in
    forward-rows32) cmd=(env BURN_FLASH_MMA=4,64,32 "$BIN/forward" --test-threads=4) ;;
    # The backward suite on the planner's default path.
    backward) cmd=("${bwd[@]}") ;;
    # The whole backward suite on the one-pass path (dQ by atomic adds).
    backward-atomic) cmd=(env BURN_FLASH_DQ=atomic "${all_bwd[@]}") ;;
    # The backward suite on the matrix backward wherever the device has cmma for the dtype
    # (f16 / bf16 on CUDA; f32 keeps its path).
    backward-matrix) cmd=(env BURN_FLASH_BWD_PATH=matrix "${bwd[@]}") ;;
    # The same on the matrix one pass (dQ by atomic adds in the matrix dK/dV kernel).
    backward-matrix-atomic) cmd=(env BURN_FLASH_BWD_PATH=matrix BURN_FLASH_DQ=atomic "${bwd[@]}") ;;
    # The matrix tests of the backward and forward suites (the matrix paths asked for).
    matrix-backward) cmd=("$BIN/backward" matrix "$threads") ;;
    matrix-forward) cmd=("$BIN/forward" matrix "$threads") ;;
    # The whole forward suite on the matrix forward where the device has cmma for the
    # dtype (cases that force the mma path keep it; f32 cases skip: cmma rounds to tf32).
    forward-matrix) cmd=(env BURN_FLASH_FWD_PATH=matrix "${fwd[@]}") ;;
    # The mma kernels with their head-dim products as loops in the source
    # (Tuning::rolled_steps): the forward suite, and the backward's.
    forward-rolled) cmd=(env BURN_FLASH_ROLLED=true "${fwd[@]}") ;;
    backward-rolled) cmd=(env BURN_FLASH_ROLLED=true "${bwd[@]}") ;;
    backward-atomic-rolled) cmd=(env BURN_FLASH_ROLLED=true BURN_FLASH_DQ=atomic "${bwd[@]}") ;;
    # The mma kernels streaming through registers (Tuning::async_copy off): the forward
    # suite, and the backward's (two kernels, and the one pass).
    forward-staged) cmd=(env BURN_FLASH_ASYNC=false "${fwd[@]}") ;;
    backward-staged) cmd=(env BURN_FLASH_ASYNC=false "${bwd[@]}") ;;
    backward-atomic-staged) cmd=(env BURN_FLASH_ASYNC=false BURN_FLASH_DQ=atomic "${bwd[@]}") ;;
    # The backward suite with the mma gradient kernels' dK, dV and dQ in 16-byte chunks
    # (Tuning::backward_chunked_output), two kernels and the one pass.
    backward-chunked) cmd=(env BURN_FLASH_MMA_BWD_CHUNKED_OUTPUT=true "${bwd[@]}") ;;
    backward-atomic-chunked) cmd=(env BURN_FLASH_MMA_BWD_CHUNKED_OUTPUT=true
      BURN_FLASH_DQ=atomic "${bwd[@]}") ;;
    # The whole forward suite on the matrix forward (as forward-matrix) with 32 query rows
    # a plane (Tuning::matrix_plane_rows).
    forward-matrix-rows32) cmd=(env BURN_FLASH_FWD_PATH=matrix BURN_FLASH_MATRIX_PLANE_ROWS=32
      "${fwd[@]}") ;;
    # The same with S and O's staging in one tile (Tuning::matrix_shared_stage; FWD_FILTER
    # picks tests).
    forward-matrix-shared) cmd=(env BURN_FLASH_FWD_PATH=matrix BURN_FLASH_MATRIX_SHARED_STAGE=true
      "$BIN/forward" ${FWD_FILTER:-} "$threads") ;;
    # --nocapture: a panic on CubeCL's device thread (spawned inside the first test, so
    # libtest would capture its message there) reaches the log.
    conformance) cmd=("$BIN/conformance" --test-threads=1 --nocapture) ;;
    *) cmd=("$BIN/$1" "$threads") ;;
  esac
}
