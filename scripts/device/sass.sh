#!/usr/bin/env bash
# Runs on the device machine after regs.sh (which dumps the mma kernels' CUDA into $OUT/cu):
# an opcode histogram of the SASS of the kernels named by SASS_MATCH (a grep pattern on the
# dump names), to see where the instruction budget of the inner loop goes. Needs nvcc and
# cuobjdump.
set -uo pipefail
OUT=${OUT:-/tmp/out}
NVCC=$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -n 1)
[ -n "$NVCC" ] || { echo "sass: no nvcc on this machine"; exit 0; }
OBJDUMP=$(dirname "$NVCC")/cuobjdump
for f in $(ls "$OUT"/cu/*.cu | grep -E "${SASS_MATCH:-.}"); do
  cubin=/tmp/$(basename "$f" .cu).cubin
  "$NVCC" -arch=sm_90a -cubin -o "$cubin" "$f" 2>/dev/null || { echo "$f: nvcc failed"; continue; }
  echo "== $(basename "$f" .cu): $("$OBJDUMP" -sass "$cubin" | grep -cE '^\s+/\*[0-9a-f]{4}\*/') instructions"
  "$OBJDUMP" -sass "$cubin" | grep -E '^\s+/\*[0-9a-f]{4}\*/' \
    | sed -E 's/^\s+\/\*[0-9a-f]+\*\/\s+(@!?U?P[0-9T] )?([A-Z0-9_.]+).*/\2/' \
    | sort | uniq -c | sort -rn | head -n "${SASS_TOP:-28}" | tr '\n' ' '
  echo
done | tee "$OUT/sass.txt"
