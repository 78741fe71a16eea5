#!/usr/bin/env bash
# Rung 3 of the HIP ladder (docs/HIP.md): compiles the HIP source of the kernel variants the
# routing selects on an MI300X for gfx942, offline (no GPU, no ROCm), and writes the resource
# report (VGPR / AGPR / LDS / occupancy / MFMA per variant) into docs/HIP.md.
#
#  1. scripts/hip/setup-offline-toolchain.sh: clang-19 + HIP headers + device libraries (cached);
#  2. kernels/tests/hip_codegen.rs writes the sources and their manifest to $FLASH_HIP_SRC_DIR;
#  3. scripts/hip/hipcheck.sh compiles each one (-std=c++17 -O3, as hiprtc does), the headers
#     of each distinct `#include` block precompiled once (HIP_PCH=0: parsed in every compile);
#  4. scripts/hip/report.awk turns the results into the generated section of docs/HIP.md.
#
# Exits non-zero when a variant that needs no rocWMMA headers fails to compile or spills
# registers (VGPRs or SGPRs); HIP_SPILLS=report turns spills into a warning (compile failures
# always fail).
# Variants that include rocWMMA headers are compiled only with ROCWMMA_INCLUDE=DIR (the directory
# holding rocwmma/rocwmma.hpp; no Debian package ships rocWMMA's internal headers; CI sets it to
# ../shared/hip/rocwmma-rocm-6.2.2/include) and then fail the script like every other variant.
set -euo pipefail
cd "$(dirname "$0")/.."
ARCH=gfx942
TARGET=${CARGO_TARGET_DIR:-$PWD/target}
export ROCM=${HIP_TOOLCHAIN_DIR:-$TARGET/hip-toolchain}
SRC=${FLASH_HIP_SRC_DIR:-$TARGET/hip-src}
DOC=docs/HIP.md
JOBS=${JOBS:-$(nproc)}
SPILLS=${HIP_SPILLS:-fail}
RESULTS="$SRC/results.$ARCH.txt"

scripts/hip/setup-offline-toolchain.sh "$ROCM"
if [ "${HIP_SRC_READY:-0}" = 1 ] && ls "$SRC"/checked.*.txt > /dev/null 2>&1; then
  # .ci/run: scripts/test.sh has just run tests/hip_codegen.rs on this tree, which wrote them.
  echo "HIP sources of this tree's test run: $SRC"
else
  rm -rf "$SRC"
  mkdir -p "$SRC"
  FLASH_HIP_SRC_DIR="$SRC" cargo test --workspace --test hip_codegen -- --nocapture 2>&1 |
    tee "$SRC/codegen.log"
  grep -q "test result: ok" "$SRC/codegen.log"
fi

compile_one() {
  local file=$1
  if grep -q "#include <rocwmma/" "$file"; then
    if [ -z "${ROCWMMA_INCLUDE:-}" ]; then
      echo "file=$(basename "$file") status=skipped error=\"needs rocWMMA headers\""
      return 0
    fi
    EXTRA_FLAGS="-I$ROCWMMA_INCLUDE" scripts/hip/hipcheck.sh "$file" "$ARCH" || true
  else
    scripts/hip/hipcheck.sh "$file" "$ARCH" || true
  fi
}
export -f compile_one
export ARCH
if [ "${HIP_PCH:-1}" != 0 ]; then export PCH_DIR="$SRC/pch"; fi
start=$(date +%s)
find "$SRC" -maxdepth 1 -name '*.hip' | sort | xargs -P "$JOBS" -I{} bash -c 'compile_one "$1"' _ {} > "$RESULTS"
seconds=$(( $(date +%s) - start ))

hip_version=$(sed -nE 's/^HIP_VERSION_(MAJOR|MINOR|PATCH)=//p' "$ROCM/share/hip/version" | paste -sd. -)
clang_version=$(clang-19 --version | head -1)
checked=$(cat "$SRC"/checked.*.txt | grep -oE "^[a-z]+: [0-9]+ variants checked" |
  sed -E 's/ variants checked//' | paste -sd, -)
section=$(cat "$SRC"/manifest.*.tsv | awk -v date="$(date -u +%Y-%m-%d)" -v arch="$ARCH" \
  -v hip="$hip_version" -v clang="$clang_version" -v checked="$checked" -v seconds="$seconds" \
  -v jobs="$JOBS" -v rocwmma="${ROCWMMA_INCLUDE:+yes}" \
  -f scripts/hip/report.awk - "$RESULTS")

# Replace the generated section of docs/HIP.md (between the markers) with the new report.
begin="<!-- hip-offline-report:begin -->"
end="<!-- hip-offline-report:end -->"
printf '%s\n' "$section" > "$SRC/report.md"
awk -v begin="$begin" -v end="$end" -v report="$SRC/report.md" '
  $0 == begin { print; while ((getline line < report) > 0) print line; skipping = 1; next }
  $0 == end { skipping = 0 }
  !skipping { print }
' "$DOC" > "$SRC/HIP.md.new"
grep -qF "$begin" "$DOC" || { echo "$DOC has no '$begin' marker" >&2; exit 1; }
mv "$SRC/HIP.md.new" "$DOC"

failed=$(grep -v "status=ok" "$RESULTS" | grep -v "status=skipped" || true)
spilled=$(grep -E "(vgpr|sgpr)_spill=[1-9]" "$RESULTS" || true)
# Without rocWMMA's headers only the variants that need none count; with them, every variant.
counted() {  # the files of the result lines on stdin that fail the run
  for f in $(sed -nE 's/^file=([^ ]+).*/\1/p'); do
    if [ -n "${ROCWMMA_INCLUDE:-}" ]; then echo "$SRC/$f"; else grep -L "#include <rocwmma/" "$SRC/$f" || true; fi
  done
}
portable_failed=$(printf '%s\n' "$failed" | counted)
portable_spilled=$(printf '%s\n' "$spilled" | counted)
echo "$(grep -c "status=ok" "$RESULTS") compiled, $(grep -c "status=skipped" "$RESULTS") skipped (rocWMMA), $(printf '%s' "$failed" | grep -c . || true) failed in ${seconds}s; report in $DOC"
if [ -n "$portable_failed" ]; then
  echo "FAILED: variants that do not compile:" >&2
  printf '%s\n' "$portable_failed" >&2
  grep "status=fail" "$RESULTS" | head -20 >&2
  exit 1
fi
if [ -n "$portable_spilled" ]; then
  echo "$(printf '%s\n' "$portable_spilled" | grep -c .) variants spill registers (rung 3 requires none):" >&2
  grep -E "_spill=[1-9]" "$RESULTS" | sed -E 's/ (sgpr|scratch|occupancy|mfma)=[^ ]*//g' >&2
  [ "$SPILLS" = report ] || exit 1
  echo "HIP_SPILLS=report: spills reported, not failed" >&2
fi
