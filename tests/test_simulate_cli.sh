#!/usr/bin/env bash
# `chameleon simulate`: bad arguments give a clear message and a non-zero
# exit; each strategy's JSON has the documented keys; native fails out of
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
check sim-unknown-model 2 '--model: unknown model "gpt5" \(known: gpt2-1.5b llama2-7b' -- \
  simulate --model gpt5
check sim-bad-heads 2 'hidden \(4096\) must be a multiple of heads \(7\)' -- \
  "${small[@]}" --heads 7
check sim-bad-tp 2 'kv-heads \(8\) must be a multiple of tp \(3\)' -- \
  simulate --model llama3-8b --tp 3
check sim-bad-zero 2 'zero must be 0..3, got 5' -- "${small[@]}" --zero 5
check sim-bad-strategy 2 '--strategy must be chameleon, native, ideal, recompute, capuchin, vdnn, chameleon-swap, protrain, zero-offload, swapadvisor or hyperoffload, got "magic"' -- \
  "${small[@]}" --strategy magic
check sim-bad-on-change 2 '--on-change must be search or fail, got "never"' -- \
  "${small[@]}" --strategy swapadvisor --on-change never
check sim-bad-search-seconds 2 '--search-seconds must be seconds above 0, such as 2\.5, got "-1"' -- \
  "${small[@]}" --strategy swapadvisor --search-seconds -1
check sim-old-policy 0 '"strategy": "ideal"' -- "${small[@]}" --policy ideal --json
check sim-old-policy-note 0 'note: --policy is deprecated, use --strategy' -- \
  "${small[@]}" --policy ideal --quiet
check sim-bad-allocator 2 '--allocator must be auto, classic or expandable, got "buddy"' -- \
  "${small[@]}" --allocator buddy
# Expandable segments: the same job runs, hazard-free (the unmaps wait for
# the device), at no more memory than the capacity.
check sim-expandable 0 '"hazards": 0' -- "${small[@]}" --capacity 7GiB --allocator expandable --json
check sim-bad-device 2 '--device: unknown device preset "tpu" \(known: ' -- "${small[@]}" --device tpu
check sim-bad-flag 2 '--flash must be on or off, got "maybe"' -- "${small[@]}" --flash maybe
check sim-bad-capacity 2 '--capacity must be a size from 1 byte to 64TiB .* got "lots"' -- \
  "${small[@]}" --capacity lots
check sim-no-value 2 'option --steps needs a value' -- simulate --steps
check sim-unknown-option 2 'unknown option --warp' -- "${small[@]}" --warp 9
check sim-zero-layers 2 '--layers must be a whole number' -- "${small[@]}" --layers 0
check sim-bad-optimizer 2 '--optimizer must be device, host, host:N .* or auto, got "gpu"' -- \
  "${small[@]}" --optimizer gpu
# The optimizer on the host, the first groups updated on the device: the
# summary says how many; auto lets ProTrain's cost model choose them.
check sim-host-groups 0 'optimizer +on the host; 2 of 6 groups updated on the device$' -- \
  simulate --model llama2 --layers 4 --seq 1024 --optimizer host:2 --steps 6 --quiet
check sim-host-groups-bad 2 'device_groups 9 is more than the 6 parameter groups' -- \
  simulate --model llama2 --layers 4 --seq 1024 --optimizer host:9 --steps 6 --quiet
auto=(simulate --model llama2 --layers 4 --seq 1024 --optimizer auto --capacity 4GiB --steps 6
      --json)
check sim-host-auto 0 '"device_groups": [0-6],' -- "${auto[@]}"
check sim-host-auto-safe 0 '"hazards": 0,' -- "${auto[@]}"

keys='"strategy".*"device".*"steps".*"oom".*"error".*"peak_device_bytes".*"capacity_bytes".*"step_time_s".*"ideal_step_time_s".*"overhead_vs_ideal".*"swapped_bytes_per_step".*"hazards": 0.*"stage_changes"'
for p in ideal native recompute chameleon capuchin vdnn; do
  out=$("$bin" "${small[@]}" --strategy $p --capacity 9GiB --json 2>&1)
  if tr -d '\n' <<<"$out" | grep -qE -- "$keys"; then echo "ok   sim-json-$p"
  else echo "FAIL sim-json-$p:"; echo "$out" | head -30; fails=$((fails + 1)); fi
done
# Three steps at half the peak never reach Stable: the step time says it is
# every step's median, not a Stable one's.
check sim-none-stable 0 'step time +[0-9.]+ s \(median over all 3 steps: none was Stable\)' -- \
  simulate --model gpt2 --layers 2 --steps 3 --capacity 50%
check sim-none-stable-json 0 '"stable_steps": 0,' -- \
  simulate --model gpt2 --layers 2 --steps 3 --capacity 50% --json
# A share of the peak needs the run with unlimited memory to finish; where
# it cannot, its reason is given, not only that it did not finish.
check sim-share-needs-ideal 1 '--capacity 30%: the run with unlimited memory, whose peak it is a share of, did not finish: optimizer auto: ProTrain.s cost model .* cannot model this job' -- \
  simulate --model llama2 --layers 1 --seq 128 --dp 2 --zero 3 --optimizer auto --capacity 30% --steps 3
# A loop that changes is timed by the mean of its last half, its bound
# over the same steps.
changing=(simulate --model gpt2 --layers 2 --steps 4 --accumulate 2 --capacity 50% --bound)
check sim-changing-mean 0 'step time +[0-9.]+ s \(mean of steps 2-3: the loop changes; median [0-9.]+ s\)' -- \
  "${changing[@]}"
check sim-changing-bound 0 'lower bound +[0-9.]+ s a step on the mean of those steps' -- \
  "${changing[@]}"
check sim-native-oom 1 'FAILED +at step 0, op [0-9]+: .*out of device memory' -- \
  "${small[@]}" --strategy native --capacity 7GiB --quiet
check sim-native-oom-json 1 '"oom_op": [1-9]' -- \
  "${small[@]}" --strategy native --capacity 7GiB --json
# The failed run has no last profile: no curve, and none from the ideal run
# made first for the comparison.
check sim-failed-no-curve 1 '"memory_curve": null' -- \
  "${small[@]}" --strategy native --capacity 7GiB --json
check sim-chameleon-fits 0 'steps +12 of 12' -- "${small[@]}" --capacity 7GiB --quiet
check sim-capuchin-changed 1 'at step 8, op [0-9]+: capuchin policy: .*the op sequence changed' -- \
  "${small[@]}" --strategy capuchin --capacity 6GiB --validate-every 8 --quiet
check sim-progress 0 'step +11 +Stable +[0-9.]+ ms +peak' -- "${small[@]}" --capacity 7GiB
dir=$(mktemp -d "${TMPDIR:-/tmp}/cham-sim-cli-XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
check sim-trace 0 'steps +12 of 12' -- "${small[@]}" --capacity 7GiB --quiet --trace "$dir/t.json"
if grep -q '"traceEvents":\[' "$dir/t.json" && tail -c 4 "$dir/t.json" | grep -q ']}'; then
  echo "ok   sim-trace-file"
else
  echo "FAIL sim-trace-file: $(head -c 200 "$dir/t.json")"; fails=$((fails + 1))
fi
# Checked before anything runs: exit 1 (a file), as in every command.
check_not sim-trace-unwritable 1 '--trace /proc/no/t\.json: cannot create: No such file or directory' \
  'summary' -- "${small[@]}" --quiet --trace /proc/no/t.json
check sim-curve 0 'steps +12 of 12' -- "${small[@]}" --capacity 7GiB --quiet --memory-curve "$dir/c"
if [ -s "$dir/c/memory_curve.svg" ] && [ -s "$dir/c/memory_curve.csv" ]; then echo "ok   sim-curve-files"
else echo "FAIL sim-curve-files"; fails=$((fails + 1)); fi

# ---- issue 14, item 7 ------------------------------------------------------------
# An unknown option is one, whether a value follows or not; a close one is
# suggested.
check_not sim-bogus 2 'unknown option --bogus \(' 'needs a value' -- simulate --bogus
check sim-typo 2 'unknown option --stpes \(did you mean --steps\?\)' -- simulate --stpes 3
check sim-value-is-option 2 'option --trace needs a value, got the option --json' -- \
  simulate --trace --json
# --heads alone on a preset with one kv head per head keeps it so.
check_not sim-gpt2-heads 0 'steps +1 of 1' 'kv-heads' -- \
  simulate --model gpt2 --heads 2 --layers 2 --seq 256 --steps 1 --quiet
check sim-gqa-heads 2 'hidden \(4096\) must be a multiple of heads \(12\) \(the values not on the command line are the llama3-8b preset.s' -- \
  simulate --model llama3-8b --heads 12
check_not sim-capacity-huge 2 '--capacity must be a size from 1 byte to 64TiB .* got "65TiB"' 'device\.capacity' -- \
  "${small[@]}" --capacity 65TiB
check sim-layers-negative 2 '--layers must be a whole number from 1 to 4294967295, got "-1"' -- \
  "${small[@]}" --layers -1
check sim-prob-nan 2 '--overflow-prob must be a probability from 0 to 1, got "nan"' -- \
  "${small[@]}" --overflow-prob nan
check sim-steps-zero 2 '--steps must be a whole number of steps from 1 to 10000000, got "0"' -- \
  "${small[@]}" --steps 0
check sim-gbs-huge 2 'gbs.*4294967295|4294967295.*micro-batch' -- \
  simulate --gbs 4294967295
: >"$dir/regular"
check_not sim-curve-is-file 1 "--memory-curve $dir/regular: not a directory \(it is a regular file\)" \
  'summary' -- "${small[@]}" --memory-curve "$dir/regular"
# A failed run draws no memory curve either.
check_not sim-failed-no-curve-files 1 'summary' 'memory curve' -- \
  "${small[@]}" --strategy native --capacity 7GiB --quiet --memory-curve "$dir/failed"
[ ! -e "$dir/failed/memory_curve.svg" ] && echo "ok   sim-failed-no-svg" ||
  { echo "FAIL sim-failed-no-svg"; fails=$((fails + 1)); }
check sim-trace-in-curve 2 "--trace $dir/c/memory_curve\.svg and --memory-curve $dir/c/memory_curve\.svg are the same file" -- \
  "${small[@]}" --memory-curve "$dir/c" --trace "$dir/c/memory_curve.svg"
check sim-trace-is-report 2 "--trace $dir/same.html and --report $dir/same.html are the same file" -- \
  "${small[@]}" --trace "$dir/same.html" --report "$dir/same.html"
check_not sim-report-is-dir 1 "--report $dir/c: cannot write: it is a directory" 'summary' -- \
  "${small[@]}" --report "$dir/c"
# The run report straight from simulate, as `chameleon report` draws it from
# --json: the summary, the memory curve and the strategy in the subtitle.
check sim-report 0 "report +$dir/sim\.html" -- "${small[@]}" --capacity 7GiB --quiet \
  --report "$dir/sim.html"
if grep -q '<h1>Chameleon run report</h1>' "$dir/sim.html" 2>/dev/null &&
   grep -q 'strategy chameleon' "$dir/sim.html" && grep -q '<svg' "$dir/sim.html"; then
  echo "ok   sim-report-page"
else
  echo "FAIL sim-report-page"; fails=$((fails + 1))
fi
# A trace inside the curve's directory, which does not exist yet: it is made
# first, then the trace is checked.
check sim-trace-in-new-curve-dir 0 'steps +12 of 12' -- \
  "${small[@]}" --capacity 7GiB --quiet --memory-curve "$dir/new" --trace "$dir/new/t.json"
[ -s "$dir/new/t.json" ] && [ -s "$dir/new/memory_curve.svg" ] && echo "ok   sim-new-dir-files" ||
  { echo "FAIL sim-new-dir-files"; fails=$((fails + 1)); }
check sim-trace-no-dir-leaves-nothing 1 "--trace $dir/nodir/x/t\.json: cannot create" -- \
  "${small[@]}" --quiet --memory-curve "$dir/made" --trace "$dir/nodir/x/t.json"
[ ! -e "$dir/made" ] && echo "ok   sim-refused-leaves-no-dir" ||
  { echo "FAIL sim-refused-leaves-no-dir"; fails=$((fails + 1)); }
# The trace failing to be written is a failure (1) here as in train.
check train-trace-unwritable 1 '--trace /proc/no/t\.json: cannot create' -- train --steps 1 --trace /proc/no/t.json
# A kernel file opens for writing as root and fails only when written:
# refused before the run, not after it.
check sim-trace-kernel-file 1 '^chameleon simulate: --trace /proc/version: cannot write: a file of the kernel' -- \
  simulate --model gpt2 --layers 2 --steps 2 --trace /proc/version
# A model state that no policy can fit is refused before any step runs.
check sim-state-too-big 1 'FAILED +at step 0, op 0: workload: the model state alone needs 13267590250496 bytes \(12\.07 TiB\) on this device, more than its capacity of 85899345920 bytes \(80\.00 GiB\) and 2\.00 TiB of pinned host memory together: .*\(4096 layers, hidden 4096, ffn 11008, vocab 32000; tp 1, pp 1, dp 1, zero 0\)' -- simulate --layers 4096 --quiet
check sim-state-too-big-native 1 'more than its capacity of 85899345920 bytes \(80\.00 GiB\): .*This strategy moves activations only' -- simulate --layers 400 --strategy native --quiet
# `chameleon infer`: the prefill and decode steps, the KV caches offloaded
# or not, the longest context, and bad values.
inf=(infer --model llama3-8b --batch 4 --prompt 32768 --generate 8 --quiet)
check infer-runs 0 'decode +[0-9.]+ ms a token' -- "${inf[@]}"
check infer-kv 0 'KV caches on the device \(16\.00 GiB\)' -- "${inf[@]}"
check infer-offload 0 'KV caches offloaded to the host' -- "${inf[@]}" --kv-offload on
check infer-json 0 '"decode_time_per_token_s": [0-9.e-]+' -- "${inf[@]}" --json
# `chameleon experiment`: a name it does not know, near one it does.
check experiment-did-you-mean 2 'unknown experiment "policy_cache"; did you mean policy-cache\? They are:' -- \
  experiment policy_cache
check experiment-unknown 2 'unknown experiment "qqqqqqqq"; they are:' -- experiment qqqqqqqq
# No token generated: no decode time (the prefill's is not one).
check infer-generate-0 0 'decode +none \(--generate 0\)' -- infer --model gpt2 --layers 2 --generate 0
check infer-generate-0-json 0 '"decode_time_per_token_s": null' -- \
  infer --model gpt2 --layers 2 --generate 0 --json
check infer-max 0 'max context +[0-9]+ tokens \(prompt in steps of 256; the model.s limit: 1048584\)' -- \
  "${inf[@]}" --find-max-context
check infer-too-long 1 'FAILED +at step 0: .*out of device memory: requested' -- \
  infer --model llama3-8b --prompt 1048576 --generate 1 --quiet
check infer-hyperoffload 0 'strategy +hyperoffload' -- "${inf[@]}" --strategy hyperoffload \
  --capacity 30GiB
check infer-log 0 'hyperoffload offloaded [0-9]+ of [0-9]+ idle tensors' -- "${inf[@]}" \
  --strategy hyperoffload --capacity 30GiB --log
check sim-hyperoffload 0 '"hazards": 0' -- "${small[@]}" --strategy hyperoffload --capacity 50% --json
check infer-unknown-model 2 '--model: unknown model "gpt5" \(known: gpt2-1.5b llama2-7b' -- \
  infer --model gpt5
check infer-bad-offload 2 '--kv-offload must be on or off, got "yes"' -- infer --kv-offload yes
check infer-bad-strategy 2 '--strategy recompute: a strategy this command does not run \(it runs chameleon, native, ideal, capuchin, vdnn, chameleon-swap, swapadvisor or hyperoffload\)' -- \
  infer --strategy recompute
check infer-old-policy 0 'note: --policy is deprecated, use --strategy' -- "${inf[@]}" --policy native
# Issue 47, item 10: one limit on the prompt (2^20 tokens), stated by
# --prompt, and --find-max-context stops there with the answer found, also
# where a large batch lowers it to 32754 (64 heads, batch 65536: the scores
# reach 9e15 bytes; docs/workloads.md), no longer exit 2 past it.
check infer-prompt-limit 2 '--prompt must be a whole number from 1 to 1048576, got "2097152"' -- \
  infer --prompt 2097152
check infer-generate-limit 2 '--generate must be a whole number from 0 to 1000000, got "1000001"' -- \
  infer --generate 1000001
tiny=(infer --model llama2 --layers 1 --hidden 64 --ffn 128 --heads 2 --kv-heads 2 --vocab 100
      --generate 2 --prompt 256 --quiet --find-max-context)
check infer-max-at-limit 0 'max context +1048578 tokens: the search stopped at the model.s limit \(prompt 1048576 tokens\)' -- \
  "${tiny[@]}"
check infer-max-at-limit-json 0 '"max_context_at_limit": true' -- "${tiny[@]}" --json
check infer-max-lowered-limit 0 'max context +32754 tokens: the search stopped at the model.s limit \(prompt 32754 tokens\)' -- \
  infer --model llama2 --layers 1 --hidden 64 --ffn 64 --heads 64 --kv-heads 1 --vocab 100 \
  --generate 0 --batch 65536 --capacity 64TiB --prompt 256 --quiet --find-max-context
# ---- issue 47 ----------------------------------------------------------------
# Item 3: a run that stops says so first, in the summary, the JSON and the
# report's banner (native runs out of memory at 7 GiB).
out=$("$bin" "${small[@]}" --strategy native --capacity 7GiB --quiet \
      --report "$dir/oom.html" 2>/dev/null); status=$?
if [ $status -eq 1 ] && grep -A1 '^summary' <<<"$out" | tail -1 | grep -qE '^  FAILED +at step 0, op [0-9]+: .*out of device memory'; then
  echo "ok   sim-failed-first"
else echo "FAIL sim-failed-first: status $status:"; echo "$out" | head -4; fails=$((fails + 1)); fi
if grep -qE '<p class="failed" id="failed"><strong>FAILED:</strong> the run did not finish\. .*out of device memory' "$dir/oom.html"; then
  echo "ok   sim-failed-report"
else echo "FAIL sim-failed-report: no banner"; fails=$((fails + 1)); fi
infer_tiny=(infer --model llama2 --layers 1 --hidden 64 --ffn 128 --heads 2 --kv-heads 2
            --vocab 100 --prompt 256 --generate 2 --quiet)
check infer-ok-error-null 0 '"error": null' -- "${infer_tiny[@]}" --json
check infer-failed-json 1 '"error": "workload: the model state alone needs' -- \
  "${infer_tiny[@]}" --capacity 64KiB --json
check infer-failed-json-no-time 1 '"decode_time_per_token_s": null' -- \
  "${infer_tiny[@]}" --capacity 64KiB --json
out=$("$bin" "${infer_tiny[@]}" --capacity 64KiB 2>/dev/null)
if [ "$(sed -n 2p <<<"$out" | cut -c1-8)" = "  FAILED" ]; then echo "ok   infer-failed-first"
else echo "FAIL infer-failed-first:"; echo "$out" | head -3; fails=$((fails + 1)); fi

# Item 7: a full disk is exit 1, naming the file and the errno; the
# summary names no file it could not write.
if [ -w /dev/full ]; then
  check sim-trace-full 1 'FAILED +at step [0-9]+, op 0: trace: /dev/full: cannot write: No space left on device' -- \
    "${small[@]}" --steps 3 --quiet --trace /dev/full
  check_not sim-report-full 1 '--report /dev/full: cannot write: No space left on device' \
    '^  report ' -- "${small[@]}" --steps 3 --quiet --report /dev/full
  for c in simulate infer; do
    if [ $c = simulate ]; then args=("${small[@]}" --steps 3 --json); else args=("${infer_tiny[@]}" --json); fi
    out=$("$bin" "${args[@]}" 2>&1 >/dev/full); status=$?
    if [ $status -eq 1 ] && grep -q '^chameleon: cannot write to standard output: No space left on device$' <<<"$out"; then
      echo "ok   $c-json-full"
    else echo "FAIL $c-json-full: status $status: $out"; fails=$((fails + 1)); fi
  done
  mkdir -p "$dir/full-curve"
  ln -sf /dev/full "$dir/full-curve/last-step-profile.json"
  check sim-profile-full 1 '--memory-curve .*last-step-profile\.json: cannot write: No space left on device' -- \
    "${small[@]}" --steps 3 --quiet --memory-curve "$dir/full-curve"
  [ -c /dev/full ] && echo "ok   sim-dev-full-kept" || { echo "FAIL sim-dev-full-kept"; fails=$((fails + 1)); }
else
  echo "skip sim-*-full: no writable /dev/full"
fi
# Item 8: outputs are renamed into place when complete: nothing else is
# left beside them, and an earlier file is replaced whole.
mkdir -p "$dir/out8"
echo stale >"$dir/out8/r.html"
check sim-outputs-renamed 0 'report +.*/out8/r\.html' -- "${small[@]}" --steps 3 --quiet \
  --report "$dir/out8/r.html" --trace "$dir/out8/t.json" --memory-curve "$dir/out8/c"
left=$(cd "$dir/out8" && find . -name '.*tmp*' | head -3)
if [ -z "$left" ] && ! grep -q stale "$dir/out8/r.html" &&
   python3 -c 'import json,sys; json.load(open(sys.argv[1])); json.load(open(sys.argv[2]))' \
     "$dir/out8/t.json" "$dir/out8/c/last-step-profile.json" 2>/dev/null; then
  echo "ok   sim-outputs-whole"
else echo "FAIL sim-outputs-whole: left $left"; fails=$((fails + 1)); fi

checks_done "chameleon simulate"
