#!/usr/bin/env bash
# Offline gfx942 (MI300X) HIP compile toolchain from Debian packages only: no GPU, no ROCm install.
#  - clang-19 / lld-19 / llvm-19 from Debian 12 bookworm (LLVM 19 knows gfx940/941/942);
#  - HIP headers from Debian unstable (libamdhip64-dev 6.4.x: HIP 5.7's __hip_bfloat16 has no
#    conversions, so cubecl's bf16 code only compiles against ROCm >= 6 headers, as with hiprtc
#    of the ROCm releases cubecl-hip supports) and ROCm 6.0 device libraries (rocm-device-libs-17:
#    LLVM 17 bitcode that clang-19 reads, with oclc_isa_version_942.bc) from Debian 13 trixie,
#    downloaded with a private APT config and unpacked with dpkg -x: nothing is installed.
# Result: DEST/{include/hip, amdgcn/bitcode, share/hip/version}, usable as --rocm-path/--hip-path.
# Does nothing when DEST is already complete (CI caches it under target/).
# Do NOT install Debian's `hipcc` on a machine that builds cubecl-hip: it puts a HIP 5.x
# `hipconfig` on PATH and cubecl-hip-sys' build script then picks bindings that do not exist.
# Origin: shared/hip/setup-offline-hip-toolchain.sh (the ladder in docs/HIP.md).
set -euo pipefail
DEST=${1:?usage: setup-offline-toolchain.sh DEST}
MARKERS=("$DEST/amdgcn/bitcode/oclc_isa_version_942.bc" "$DEST/include/hip/hip_bf16.h")
sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
export DEBIAN_FRONTEND=noninteractive
if ! command -v clang-19 >/dev/null || ! command -v llvm-objdump-19 >/dev/null || ! command -v ld.lld-19 >/dev/null; then
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends clang-19 lld-19 llvm-19 >/dev/null
fi
if ls "${MARKERS[@]}" >/dev/null 2>&1; then
  echo "ok: ROCM=$DEST (cached)"
  exit 0
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/lists/partial" "$WORK/cache/archives/partial" "$WORK/debs"
# The Debian mirror this machine's apt uses, with the next release's suite.
MIRROR=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[ -n "$MIRROR" ] || MIRROR=$(awk '$1=="deb"{for(i=2;i<=NF;i++) if($i ~ /^http/){print $i; exit}}' /etc/apt/sources.list 2>/dev/null || true)
[ -n "$MIRROR" ] || { echo "no Debian mirror found in the apt sources" >&2; exit 1; }
for suite in trixie sid; do
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR $suite main"
done > "$WORK/sources.list"
touch "$WORK/status"
cat > "$WORK/apt.conf" <<CONF
Dir::Etc::SourceList "$WORK/sources.list";
Dir::Etc::SourceParts "/dev/null";
Dir::State::Lists "$WORK/lists";
Dir::Cache "$WORK/cache";
Dir::State::status "$WORK/status";
APT::Architecture "amd64";
APT::Sandbox::User "$(id -un)";
CONF
APT_CONFIG="$WORK/apt.conf" apt-get update -qq
(cd "$WORK/debs" && APT_CONFIG="$WORK/apt.conf" apt-get download -qq libamdhip64-dev/sid rocm-device-libs-17/trixie)
mkdir -p "$WORK/x" "$DEST/amdgcn" "$DEST/share/hip"
for f in "$WORK"/debs/*.deb; do dpkg -x "$f" "$WORK/x"; done
rm -rf "$DEST/include" "$DEST/amdgcn/bitcode"
cp -r "$WORK/x/usr/include" "$DEST/include"
cp -r "$WORK/x/usr/lib/llvm-17/lib/clang/17/amdgcn/bitcode" "$DEST/amdgcn/bitcode"
cp "$WORK/x/usr/share/hip/version" "$DEST/share/hip/version"
ls "${MARKERS[@]}" >/dev/null
echo "ok: ROCM=$DEST"
