#!/usr/bin/env bash
# Runs every experiment of `chameleon experiment --list` at full size and
# writes its files (CSV, JSON, SVG) and printed tables into docs/experiments/
# (docs/experiments.md shows them). Usage: scripts/run-experiments.sh [DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/docs/experiments}
make -C "$root" --no-print-directory >/dev/null
bin="$root/build/chameleon"
mkdir -p "$out"
for name in $("$bin" experiment --list | awk '{print $1}'); do
  echo "== $name"
  "$bin" experiment "$name" --out "$out" | grep -v "^written to " | tee "$out/$name.txt"
done
