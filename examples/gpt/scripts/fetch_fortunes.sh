#!/usr/bin/env bash
# Real English text for the H200 run: the fortune cookies of Debian's `fortunes` and
# `fortunes-min` packages (about 2.6 MB), concatenated in a fixed order into one file.
# Usage: examples/gpt/scripts/fetch_fortunes.sh [OUT_FILE]   (default .carry/data/fortunes.txt)
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
out="${1:-$root/.carry/data/fortunes.txt}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"  # apt-get download runs as _apt
cd "$work"
apt-get download fortunes fortunes-min >/dev/null
for deb in ./*.deb; do dpkg -x "$deb" extracted; done
mkdir -p "$(dirname "$out")"
# Text files only: skip the .dat indexes and the symlinks (.u8 aliases).
find extracted/usr/share/games/fortunes -type f ! -name '*.dat' -print0 \
  | LC_ALL=C sort -z | xargs -0 cat >"$out"
echo "$out: $(wc -c <"$out") bytes"
