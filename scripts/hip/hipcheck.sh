#!/usr/bin/env bash
# Offline compile of one HIP source (as cubecl-cpp's HIP dialect writes it) for an AMD GPU, the
# way hiprtc compiles it at run time (-std=c++17 -O3), with clang-19 and the headers and device
# libraries of setup-offline-toolchain.sh. Prints one line of key=value fields:
#   file=F status=ok sgpr= vgpr= agpr= scratch= occupancy= sgpr_spill= vgpr_spill= ds_read=N
#     flat_load=N mfma=N:instr,...
#   file=F status=fail error="first error"
# Exits 1 when the compile fails. ROCM=DIR (the toolchain), EXTRA_FLAGS (e.g. -I for rocWMMA).
#
# PCH_DIR=DIR: the file's `#include` lines are compiled once, with the same flags, into
# DIR/<hash of those lines and the flags>.pch (a lock keeps parallel runs from building one
# header twice) and included precompiled. Parsing the HIP (and rocWMMA) headers is about half
# of a variant's compile; the code compiled is the same, and so is every field printed (checked
# on all 658 variants).
# Origin: shared/hip/hipcheck.sh (the ladder in docs/HIP.md).
set -euo pipefail
SRC=$1
ARCH=${2:-gfx942}
ROCM=${ROCM:?set ROCM to the directory of setup-offline-toolchain.sh}
OUT=${SRC%.hip}.$ARCH.hsaco
LOG=$OUT.log
name=$(basename "$SRC")
# shellcheck disable=SC2206 # EXTRA_FLAGS is a list of flags
flags=(-x hip --offload-arch="$ARCH" --cuda-device-only --no-gpu-bundle-output
  --rocm-path="$ROCM" --hip-path="$ROCM" -std=c++17 -O3 ${EXTRA_FLAGS:-})
if [ -n "${PCH_DIR:-}" ]; then
  mkdir -p "$PCH_DIR"
  key=$({ grep -E '^#include' "$SRC"; echo "${flags[*]}"; } | md5sum | cut -c1-16)
  pch="$PCH_DIR/$key.$ARCH.pch"
  (
    flock 9
    if [ ! -s "$pch" ]; then
      grep -E '^#include' "$SRC" > "$PCH_DIR/$key.h"
      # The driver's -emit-llvm -c stops before the device link; -emit-pch replaces the output.
      clang-19 "${flags[@]}" -emit-llvm -c -Xclang -emit-pch "$PCH_DIR/$key.h" -o "$pch.tmp" \
        2>"$pch.log" && mv "$pch.tmp" "$pch"
    fi
  ) 9>"$pch.lock"
  [ -s "$pch" ] && flags+=(-include-pch "$pch")
fi
if ! clang-19 "${flags[@]}" -Rpass-analysis=kernel-resource-usage "$SRC" -o "$OUT" 2>"$LOG"; then
  error=$(grep -m1 "error:" "$LOG" | sed -E 's/^[^:]*:[0-9]+:[0-9]+: //; s/"/'"'"'/g' || true)
  echo "file=$name status=fail error=\"$error\""
  exit 1
fi
# "<file>:L:C: remark:     VGPRs: 104 [-Rpass-analysis=...]" -> vgpr=104
fields=$(sed -nE 's/.*remark: +(SGPRs|VGPRs|AGPRs|ScratchSize \[bytes\/lane\]|Occupancy \[waves\/SIMD\]|SGPRs Spill|VGPRs Spill): ([0-9]+).*/\1=\2/p' "$LOG" |
  sed -E 's/^SGPRs Spill=/sgpr_spill=/; s/^VGPRs Spill=/vgpr_spill=/; s/^SGPRs=/sgpr=/; s/^VGPRs=/vgpr=/; s/^AGPRs=/agpr=/;
          s/^ScratchSize \[bytes\/lane\]=/scratch=/; s/^Occupancy \[waves\/SIMD\]=/occupancy=/' | paste -sd' ' -)
isa=$(llvm-objdump-19 -d --mcpu="$ARCH" "$OUT")
mfma=$({ grep -oE "v_mfma_[a-z0-9_]+|v_wmma_[a-z0-9_]+" <<< "$isa" || true; } |
  sort | uniq -c | awk '{printf "%s%s:%s", sep, $1, $2; sep=","}')
# Loads from LDS as such (ds_read*) and through the flat (generic) path (flat_load*), which
# reaches LDS too but slower: whether the fragment and tile reads of shared memory kept their
# address space.
ds_reads=$(grep -cE "\bds_read" <<< "$isa" || true)
flat_loads=$(grep -cE "\bflat_load" <<< "$isa" || true)
echo "file=$name status=ok $fields ds_read=$ds_reads flat_load=$flat_loads mfma=${mfma:-none}"
