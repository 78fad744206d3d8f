#!/usr/bin/env bash
# `chameleon train`: bad arguments give a clear message and a non-zero exit;
# the native policy fails with the out-of-memory report at half the memory;
# a short verified run is bit-exact with no hazards and prints its JSON.
set -uo pipefail
build=$2
bin="$build/chameleon"
. "$1/tests/support/cli.sh" || exit 1
dir=$(mktemp -d "${TMPDIR:-/tmp}/cham-train-cli-XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT

# The default model, a few steps: its activations, not its weights, fill the
# memory, as in the long-sequence training Chameleon is for.
small=(train --steps 3 --quiet)

check train-zero-layers 2 '--layers must be an integer from 1 to 1000000, got "0"' -- \
  "${small[@]}" --layers 0
check train-bad-heads 2 'heads: 5 is not valid .*multiple' -- "${small[@]}" --heads 5
check train-no-value 2 'option --steps needs a value' -- train --steps
check train-unknown-preset 2 'unknown device preset "nope"' -- "${small[@]}" --device nope
check train-missing-data 1 "$dir/missing\.txt: cannot open: No such file or directory" -- \
  "${small[@]}" --data "$dir/missing.txt"
printf 'too short' >"$dir/short.txt"
check train-short-data 1 "short\.txt: 9 bytes is too short" -- "${small[@]}" --data "$dir/short.txt"
check train-tiny-budget 2 'budget 1000 bytes is below the largest single op.s working set: [a-z_]+ needs [0-9]+ bytes' -- \
  "${small[@]}" --budget 1000
check train-bad-budget 2 '--budget must be a size above 0 .* got "lots"' -- "${small[@]}" --budget lots
check train-bad-policy 2 '--policy must be chameleon, native, recompute, capuchin or vdnn, got "magic"' -- \
  "${small[@]}" --policy magic
for p in recompute capuchin; do
  check train-$p 0 '"bit_exact": true, "hazards": 0, "oom": 0' -- \
    "${small[@]}" --policy $p --verify --json --budget 50%
done
# vDNN keeps the layer it computes and the one it prefetches: it needs more.
check train-vdnn 0 '"bit_exact": true, "hazards": 0, "oom": 0' -- \
  "${small[@]}" --policy vdnn --verify --json --budget 75%
check train-vdnn-oom 1 'out of device memory' -- "${small[@]}" --policy vdnn --budget 50%
check train-bad-overflow 2 '--overflow-at must be a comma-separated list' -- \
  "${small[@]}" --overflow-at 3,x
check train-unknown-option 2 'unknown option --frobnicate' -- "${small[@]}" --frobnicate
check train-stray-argument 2 'unexpected argument fast' -- "${small[@]}" fast
check train-native-oom 1 'step 0 \(training\): .*out of device memory' -- \
  "${small[@]}" --policy native --budget 50%
check train-help 0 '^usage: chameleon train' -- train --help
check train-json 0 '"bit_exact": true, "hazards": 0, "oom": 0' -- \
  "${small[@]}" --verify --json --budget 50%
printf 'The quick brown fox jumps over the lazy dog. %.0s' {1..40} >"$dir/text.txt"
check train-data-file 0 '"steps": 3' -- "${small[@]}" --data "$dir/text.txt" --json
check train-pictures 0 'memory curve +.*/memory_curve.svg' -- \
  "${small[@]}" --trace "$dir/trace.json" --memory-curve "$dir/pictures"
for f in trace.json pictures/memory_curve.svg pictures/memory_curve.csv pictures/last-step-profile.json; do
  if [ -s "$dir/$f" ]; then echo "ok   train-file-$f"
  else echo "FAIL train-file-$f: missing or empty"; fails=$((fails + 1)); fi
done
grep -q '^op,sample,name,in_use_bytes,without_swaps_bytes,capacity_bytes' "$dir/pictures/memory_curve.csv" \
  && echo "ok   train-curve-csv" || { echo "FAIL train-curve-csv"; fails=$((fails + 1)); }
check train-report 0 'report +.*/report.html' -- "${small[@]}" --report "$dir/report.html"
for want in '<figure id="memory-curve">' '<figure id="step-time">' '<h2>Policy</h2>'; do
  grep -qF -- "$want" "$dir/report.html" && echo "ok   train-report-has $want" \
    || { echo "FAIL train-report-has $want"; fails=$((fails + 1)); }
done
checks_done "train cli"
