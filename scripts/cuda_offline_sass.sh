#!/usr/bin/env bash
# The CUDA kernels the planner picks for the H200 bench shapes, compiled and disassembled on
# this machine, no GPU: registers, spill bytes and the streaming loops' instruction mix (see
# scripts/cuda/sass_report.py); the same kernels streaming without cp.async (staged_*) for the
# compile time. Installs NVIDIA's nvrtc, ptxas and cuobjdump from PyPI (pinned
# wheels, into target/cuda-tools) the first time. Writes $OUT/sass.csv (default
# target/cuda-sass) and prints one line per kernel.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS=${CUDA_TOOLS:-target/cuda-tools}
OUT=${OUT:-target/cuda-sass}
if [ ! -e "$TOOLS/.installed" ]; then
  python3 -m pip install --quiet --no-deps --target "$TOOLS" \
    nvidia-cuda-nvrtc-cu12==12.9.86 nvidia-cuda-nvcc-cu12==12.9.86 \
    nvidia-cuda-runtime-cu12==12.9.79 nvidia-cuda-cccl-cu12==12.9.27 \
    nvidia-cuda-cuobjdump==13.5.37 nvidia-cuda-nvdisasm==13.5.37
  chmod +x "$TOOLS"/nvidia/cuda_nvcc/bin/* "$TOOLS"/nvidia/cu13/bin/*
  touch "$TOOLS/.installed"
fi
TOOLS=$(cd "$TOOLS" && pwd)
rm -rf "$OUT/cu"
mkdir -p "$OUT/cu"
FLASH_DUMP_DIR="$(cd "$OUT/cu" && pwd)" cargo test -q -p burn-flash-attn-kernels --test mma_codegen -- \
  --exact bench_configs::cubecl_codegen_time_of_the_bench_configs --ignored > "$OUT/codegen.log"
python3 scripts/cuda/sass_report.py "$TOOLS" "$OUT/sass.csv" "$OUT"/cu/bench_*.cu "$OUT"/cu/staged_*.cu
