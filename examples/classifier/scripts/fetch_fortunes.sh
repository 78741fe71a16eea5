#!/usr/bin/env bash
# Labelled real text for the classifier: the topic files of Debian's `fortunes` package (one
# file per topic, records separated by `%` lines), copied into one directory.
# Usage: examples/classifier/scripts/fetch_fortunes.sh [OUT_DIR]   (default .carry/data/fortunes)
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
out="${1:-$root/.carry/data/fortunes}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"  # apt-get download runs as _apt
cd "$work"
apt-get download fortunes >/dev/null
dpkg -x ./fortunes_*.deb extracted
mkdir -p "$out"
for topic in computers people politics science; do
  cp "extracted/usr/share/games/fortunes/$topic" "$out/$topic"
  echo "$out/$topic: $(grep -c '^%$' "$out/$topic") records, $(wc -c <"$out/$topic") bytes"
done
