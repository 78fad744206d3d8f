#!/usr/bin/env bash
# `chameleon simulate`: bad arguments give a clear message and a non-zero
# exit; each policy's JSON has the documented keys; native fails out of
# memory where Chameleon runs; capuchin fails at a changed op sequence.
set -uo pipefail
build=$2
bin="$build/chameleon"
. "$1/tests/support/cli.sh" || exit 1

# Llama 2 7B's shape with 4 layers on one device of a ZeRO-3 group of 8:
# about 13 GiB at its peak; 7 GiB makes memory management necessary.
small=(simulate --model llama2 --layers 4 --seq 2048 --mbs 4 --dp 8 --zero 3
       --device a100-80g --steps 12)

check sim-help 0 '^usage: chameleon simulate' -- simulate --help
check sim-unknown-model 2 'unknown model "gpt5" \(known: gpt2-1.5b llama2-7b' -- \
  simulate --model gpt5
check sim-bad-heads 2 'hidden \(4096\) must be a multiple of heads \(7\)' -- \
  "${small[@]}" --heads 7
check sim-bad-tp 2 'kv-heads \(8\) must be a multiple of tp \(3\)' -- \
  simulate --model llama3-8b --tp 3
check sim-bad-zero 2 'zero must be 0..3, got 5' -- "${small[@]}" --zero 5
check sim-bad-policy 2 '--policy must be chameleon, native, ideal, recompute, capuchin or vdnn, got "magic"' -- \
  "${small[@]}" --policy magic
check sim-bad-device 2 'unknown device "tpu"' -- "${small[@]}" --device tpu
check sim-bad-flag 2 '--flash must be on or off, got "maybe"' -- "${small[@]}" --flash maybe
check sim-bad-capacity 2 '--capacity must be a size above 0' -- "${small[@]}" --capacity lots
check sim-no-value 2 'option --steps needs a value' -- simulate --steps
check sim-unknown-option 2 'unknown option --warp' -- "${small[@]}" --warp 9
check sim-zero-layers 2 '--layers must be a whole number' -- "${small[@]}" --layers 0

keys='"policy".*"device".*"steps".*"oom".*"error".*"peak_device_bytes".*"capacity_bytes".*"step_time_s".*"ideal_step_time_s".*"overhead_vs_ideal".*"swapped_bytes_per_step".*"hazards": 0.*"stage_changes"'
for p in ideal native recompute chameleon capuchin vdnn; do
  out=$("$bin" "${small[@]}" --policy $p --capacity 9GiB --json 2>&1)
  if tr -d '\n' <<<"$out" | grep -qE -- "$keys"; then echo "ok   sim-json-$p"
  else echo "FAIL sim-json-$p:"; echo "$out" | head -30; fails=$((fails + 1)); fi
done
check sim-native-oom 1 'FAILED +at step 0, op [0-9]+: .*out of device memory' -- \
  "${small[@]}" --policy native --capacity 7GiB --quiet
check sim-native-oom-json 1 '"oom_op": [1-9]' -- \
  "${small[@]}" --policy native --capacity 7GiB --json
check sim-chameleon-fits 0 'steps +12 of 12' -- "${small[@]}" --capacity 7GiB --quiet
check sim-capuchin-changed 1 'at step 8, op [0-9]+: capuchin policy: .*the op sequence changed' -- \
  "${small[@]}" --policy capuchin --capacity 6GiB --validate-every 8 --quiet
check sim-progress 0 'step +11 +Stable +[0-9.]+ ms +peak' -- "${small[@]}" --capacity 7GiB
dir=$(mktemp -d "${TMPDIR:-/tmp}/cham-sim-cli-XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
check sim-trace 0 'steps +12 of 12' -- "${small[@]}" --capacity 7GiB --quiet --trace "$dir/t.json"
if grep -q '"traceEvents":\[' "$dir/t.json" && tail -c 4 "$dir/t.json" | grep -q ']}'; then
  echo "ok   sim-trace-file"
else
  echo "FAIL sim-trace-file: $(head -c 200 "$dir/t.json")"; fails=$((fails + 1))
fi
check sim-trace-unwritable 1 'cannot write the trace' -- "${small[@]}" --quiet --trace /proc/no/t.json
check sim-curve 0 'steps +12 of 12' -- "${small[@]}" --capacity 7GiB --quiet --memory-curve "$dir/c"
if [ -s "$dir/c/memory_curve.svg" ] && [ -s "$dir/c/memory_curve.csv" ]; then echo "ok   sim-curve-files"
else echo "FAIL sim-curve-files"; fails=$((fails + 1)); fi
checks_done "chameleon simulate"
