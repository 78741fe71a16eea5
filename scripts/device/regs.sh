#!/usr/bin/env bash
# Runs on the device machine: registers and spills of every mma kernel variant that
# tests/mma_codegen/ expands (forward: both row tilings x 1/2 key/value buffers; backward:
# 1/2 inner buffers), from `nvcc --resource-usage` on the CUDA sources it dumps. Needs nvcc.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
dir="$OUT/cu"
mkdir -p "$dir" /tmp/regs-bin
gunzip -c .carry/bin/mma_codegen.gz > /tmp/regs-bin/mma_codegen && chmod +x /tmp/regs-bin/mma_codegen
FLASH_DUMP_DIR="$dir" /tmp/regs-bin/mma_codegen > "$OUT/regs-codegen.log" 2>&1
NVCC=$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -n 1)
[ -n "$NVCC" ] || { echo "regs: no nvcc on this machine"; exit 0; }
ls "$dir"/*.cu | xargs -P 12 -I{} sh -c \
  "'$NVCC' -arch=sm_90 -cubin -o /dev/null --resource-usage '{}' > '{}.ptxas' 2>&1"
for f in "$dir"/*.cu; do
  usage=$(grep -o "Used [0-9]* registers" "$f.ptxas" | head -n 1)
  spill=$(grep -o "[0-9]* bytes spill stores" "$f.ptxas" | head -n 1)
  echo "$(basename "$f" .cu): ${usage:-?} ${spill:-(no ptxas line: see $f.ptxas)}"
done | tee "$OUT/regs.txt"
