#!/usr/bin/env bash
# `chameleon train`: bad arguments give a clear message and a non-zero exit;
# the native strategy fails with the out-of-memory report at half the memory;
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
check train-unknown-preset 2 '--device: unknown device preset "nope" \(known: .*a100-80g' -- \
  "${small[@]}" --device nope
check train-missing-data 1 "$dir/missing\.txt: cannot open: No such file or directory" -- \
  "${small[@]}" --data "$dir/missing.txt"
printf 'too short' >"$dir/short.txt"
check train-short-data 1 "short\.txt: 9 bytes is too short" -- "${small[@]}" --data "$dir/short.txt"
# Found by the run (it measures the largest op first): a failure, exit 1.
check train-tiny-budget 1 'budget 1000 bytes is below the largest single op.s working set: [a-z_]+ needs [0-9]+ bytes' -- \
  "${small[@]}" --capacity 1000B
# Sizes (docs/cli.md, "Sizes"): a bare number below 4096 is refused, saying
# what it was read as; fractions and decimal units as in a config file.
check train-bare-budget 2 '--capacity must be .* got "1000" \(read as 1000 bytes; .*write 1000B for bytes' -- \
  "${small[@]}" --capacity 1000
check train-bad-unit 2 '--capacity must be .* got "64XB" \(unknown unit "XB" \(binary units: B, KiB' -- \
  "${small[@]}" --capacity 64XB
check train-fraction-budget 0 '"oom": 0' -- "${small[@]}" --json --capacity 6.85MiB
# Old names (docs/cli.md, "Option names"): the same option, with a note.
check train-old-budget 0 'note: --budget is deprecated, use --capacity' -- \
  train --steps 0 --quiet --budget 50%
check train-old-drop-prob 0 'note: --drop-prob is deprecated, use --layer-drop' -- \
  train --steps 0 --quiet --drop-prob 0.1
check train-expandable 0 'every loss and every parameter byte equal' -- \
  "${small[@]}" --verify --capacity 50% --allocator expandable
check train-old-policy 0 'note: --policy is deprecated, use --strategy' -- \
  train --steps 0 --quiet --policy native
check train-no-ideal 2 '--strategy ideal: a strategy this command does not run \(it runs chameleon, native, recompute, capuchin, vdnn, chameleon-swap, protrain, swapadvisor or hyperoffload\)' -- \
  "${small[@]}" --strategy ideal
check train-old-budget-bad 2 '--capacity must be a size .* got "lots"' -- train --budget lots
check train-help-names 0 '--capacity B .*' -- train --help
check_not train-help-no-old 0 '--layer-drop P' '--budget|--drop-prob|--policy' -- train --help
# The summary says why the overhead is large when the ideal step is
# launch-bound (the default tiny model: ~90 launches of ~5 us, kernels
# shorter); without --verify there is no ideal step and no such line.
check train-launch-bound 0 'why +launch-bound: [0-9]+ kernel launches at [0-9.]+ us dominate the [0-9.]+ ms ideal step \(its kernels compute [0-9.]+ ms\)' -- \
  train --steps 3 --quiet --verify
check_not train-no-why 0 'step time +[0-9.]+ ms simulated' 'launch-bound' -- train --steps 3 --quiet
check train-bad-budget 2 '--capacity must be a size from 1 byte to 64TiB .* got "lots"' -- "${small[@]}" --capacity lots
check train-bad-strategy 2 '--strategy must be chameleon, native, recompute, capuchin, vdnn, chameleon-swap, protrain, swapadvisor or hyperoffload, got "magic"' -- \
  "${small[@]}" --strategy magic
for p in recompute capuchin; do
  check train-$p 0 '"bit_exact": true, "hazards": 0, "oom": 0' -- \
    "${small[@]}" --strategy $p --verify --json --capacity 50%
done
# vDNN keeps the layer it computes and the one it prefetches: it needs more.
check train-vdnn 0 '"bit_exact": true, "hazards": 0, "oom": 0' -- \
  "${small[@]}" --strategy vdnn --verify --json --capacity 75%
check train-vdnn-oom 1 'out of device memory' -- "${small[@]}" --strategy vdnn --capacity 50%
# Decoding after training: the KV caches offloaded, the tokens the
# reference chose with them on the device; lengths the model cannot hold.
check train-decode 0 'decoded tokens +equal the unconstrained run.s' -- \
  "${small[@]}" --verify --generate 8 --kv-offload on
check train-decode-json 0 '"decoded_tokens": 8, "decode_bit_exact": true' -- \
  "${small[@]}" --verify --generate 8 --kv-offload on --json
# Without --verify nothing was compared, and nothing decoded: null, not
# left out and not "differs".
check train-unverified-json 0 '"bit_exact": null,.*"decoded_tokens": 0, "decode_bit_exact": null' -- \
  "${small[@]}" --json
check train-decode-too-long 2 'prompt 120 \+ generate 10 needs 129 positions, more than the model.s seq of 128' -- \
  "${small[@]}" --prompt 120 --generate 10
check train-bad-kv-offload 2 '--kv-offload must be on or off, got "yes"' -- "${small[@]}" --kv-offload yes
check train-bad-overflow 2 '--overflow-at must be a comma-separated list' -- \
  "${small[@]}" --overflow-at 3,x
check train-unknown-option 2 'unknown option --frobnicate' -- "${small[@]}" --frobnicate
check train-stray-argument 2 'unexpected argument "fast"' -- "${small[@]}" fast
check train-native-oom 1 'step 0 \(training\): .*out of device memory' -- \
  "${small[@]}" --strategy native --capacity 50%
check train-help 0 '^usage: chameleon train' -- train --help
check train-json 0 '"bit_exact": true, "hazards": 0, "oom": 0' -- \
  "${small[@]}" --verify --json --capacity 50%
# Recomputation (issue 17): at a quarter of the peak the kept policies and
# the out-of-memory path drop tensors and run their ops again, and every
# loss and parameter byte still equals the unconstrained run's.
check train-recompute 0 'recomputation +[1-9][0-9]* tensors dropped, [1-9][0-9]* ops run again' -- \
  train --steps 12 --quiet --verify --capacity 25%
check train-recompute-exact 0 '"bit_exact": true, "hazards": 0, "oom": 0' -- \
  train --steps 12 --quiet --verify --capacity 25% --json
check train-swap-only 0 '"recomputes": 0' -- \
  train --steps 12 --quiet --strategy chameleon-swap --capacity 25% --json
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

# ---- issue 14 ----------------------------------------------------------------
# Item 2: --seq against the data. The built-in data has 200,000 tokens, the
# last tenth for validation: --seq 20000 crashed at the first validation
# (SIGFPE), 180000 and 180001 at the first step; now they are refused
# before anything runs, naming the flag and the value.
check train-seq-vs-data 2 '--seq 20000 is too long for the built-in data: its validation tenth holds 20000 tokens .* at most 19999; .*--data FILE of at least 200010 bytes' -- \
  train --seq 20000 --hidden 1 --heads 1 --layers 1 --batch 1 --steps 2 --validate-every 1 --capacity 100%
check train-seq-180000 2 '^chameleon train: --seq 180000 --batch 1: a training step needs at least [0-9.]+ GiB' -- \
  train --seq 180000 --batch 1 --steps 1
check train-seq-180001 2 '^chameleon train: --seq 180001: a training step needs' -- train --seq 180001
# The least data that works: 10 (seq + 1) bytes, validation included.
head -c 1290 /dev/zero | tr '\0' a >"$dir/1290.txt"
check train-data-least 0 '"steps": 1, .*"validations": 1' -- \
  train --steps 1 --validate-every 1 --data "$dir/1290.txt" --json
head -c 1289 /dev/zero | tr '\0' a >"$dir/1289.txt"
check train-data-seq 1 "1289\.txt: 1289 bytes is too short for --seq 128: each split must hold seq \+ 1 = 129 tokens and the validation tenth has 128; it needs at least 1290 bytes" -- \
  "${small[@]}" --data "$dir/1289.txt"

# Item 4: JSON has null for what is not a number; the text says nothing of
# a validation that did not run.
check_not train-steps0-json 0 '"steps": 0, "final_train_loss": null, "final_val_loss": null.*"sim_step_time_s": null, "ideal_step_time_s": null, "overhead_vs_ideal": null' \
  '[^a-z_"](nan|inf)' -- train --steps 0 --json --verify
check_not train-diverged-json 0 '"final_train_loss": null, "final_val_loss": null' \
  '[^a-z_"](nan|inf)' -- train --lr 10 --no-loss-scaling --steps 3 --validate-every 2 --json
check train-diverged-text 0 'loss +4\.1641 -> (inf|nan) \(validation (inf|nan)\): diverged' -- \
  train --lr 10 --no-loss-scaling --steps 3 --validate-every 2 --quiet
check_not train-no-validation-text 0 'loss +4\.1641 -> [0-9.]+$' '\(validation|nan' -- \
  "${small[@]}" --validate-every 0
# --steps 0 measures the model and trains nothing, and says so.
check train-steps0 0 'steps +0 \(--steps 0: .*nothing was trained\)' -- train --steps 0
check train-steps0-curve 2 '--memory-curve draws the last training step: it needs --steps 1 or more' -- \
  train --steps 0 --memory-curve "$dir/c0"

# Item 6: no endless reads; the memory a shape needs is checked up front.
mkdir -p "$dir/a-dir"
check train-data-dir 1 "--data $dir/a-dir: cannot read: Is a directory" -- "${small[@]}" --data "$dir/a-dir"
check train-data-device 1 '--data /dev/zero: cannot read: it is a character device, not a regular file' -- \
  "${small[@]}" --data /dev/zero
truncate -s $((1024 * 1024 * 1024 + 1)) "$dir/huge.txt"
check train-data-too-large 1 'huge\.txt: file too large: 1073741825 bytes, over the limit of 1073741824 bytes \(1 GiB\) for training data' -- \
  "${small[@]}" --data "$dir/huge.txt"
rm -f "$dir/huge.txt"
check train-layers-100000 2 '^chameleon train: --layers 100000: a training step needs at least 313\.[0-9]+ GiB' -- \
  train --layers 100000
check train-layers-device 2 '^chameleon train: --layers 100000 --seq 1024: a training step needs at least [0-9.]+ TiB .* more than the 80\.00 GiB of the a100-80g' -- \
  train --layers 100000 --seq 1024
# More than the machine's whole memory (MemTotal, so that what happens to be
# available does not matter), less than the device's 80 GiB: 3.37 MB a
# layer at the default shape, twice with --verify.
total_kib=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo 2>/dev/null)
if [ -n "$total_kib" ] && [ "$total_kib" -lt $((120 * 1024 * 1024)) ]; then
  layers=$((total_kib * 1024 / 3365376 * 6 / 10 + 1))
  check train-layers-host 2 "^chameleon train: --layers $layers: the run needs at least [0-9.]+ GiB of host memory .*twice with --verify.*, more than the [0-9.]+ GiB available" -- \
    train --layers "$layers" --verify --steps 1
else
  echo "skip train-layers-host: MemTotal is unknown or 120 GiB or more"
fi
check train-batch-seq 2 '--batch 1000000 x --seq 1000000 = 1000000000000 tokens a step, more than' -- \
  train --batch 1000000 --seq 1000000

# Item 7: messages name the problem, the flag and the value.
check_not train-budget-huge 2 '--capacity must be a size from 1 byte to 64TiB .* got "65TiB"' 'device\.capacity' -- \
  "${small[@]}" --capacity 65TiB
check train-budget-zero-pct 2 '--capacity must be a percentage above 0' -- "${small[@]}" --capacity 0%
check train-overflow-negative 2 '--overflow-at must be a comma-separated list of step numbers .* got "-1"' -- \
  "${small[@]}" --overflow-at -1
check train-overflow-trailing 2 '--overflow-at must be .* got "1,"' -- "${small[@]}" --overflow-at 1,
check train-overflow-empty-item 2 '--overflow-at must be .* got "1,,2"' -- "${small[@]}" --overflow-at 1,,2
check train-overflow-huge 2 '--overflow-at must be .* got "18446744073709551616"' -- \
  "${small[@]}" --overflow-at 18446744073709551616
check train-steps-suffix 2 '--steps must be an integer from 0 to 1000000, got "3x"' -- train --steps 3x
check train-steps-space 2 '--steps must be .* got " 3"' -- train --steps ' 3'
check train-lr-inf 2 '--lr must be a number from 0 to 10, got "inf"' -- "${small[@]}" --lr inf
check train-lr-hex 2 '--lr must be .* got "0x1p-3"' -- "${small[@]}" --lr 0x1p-3
check train-typo 2 'unknown option --stpes \(did you mean --steps\?\)' -- train --stpes 3
check train-value-is-option 2 'option --data needs a value, got the option --steps' -- \
  train --data --steps 3
check train-empty-value 2 'option --trace needs a value, got ""' -- "${small[@]}" --trace ''
# Output paths are checked before the run: nothing runs, no summary.
: >"$dir/regular"
check_not train-curve-is-file 1 "--memory-curve $dir/regular: not a directory \(it is a regular file\)" \
  'summary|step ' -- "${small[@]}" --memory-curve "$dir/regular"
check_not train-trace-no-dir 1 "--trace $dir/no/such/t\.json: cannot create: No such file or directory" \
  'summary|step ' -- "${small[@]}" --trace "$dir/no/such/t.json"
check_not train-report-is-dir 1 "--report $dir/a-dir: cannot write: it is a directory" 'summary' -- \
  "${small[@]}" --report "$dir/a-dir"
check train-trace-is-data 2 "--trace $dir/\./text\.txt is the input \(--data $dir/text\.txt\): it would be overwritten" -- \
  "${small[@]}" --data "$dir/text.txt" --trace "$dir/./text.txt"
check train-trace-is-report 2 "--trace $dir/same.html and --report $dir/same.html are the same file" -- \
  "${small[@]}" --trace "$dir/same.html" --report "$dir/same.html"
if [ -e "$dir/same.html" ]; then echo "FAIL train-check-leaves-nothing"; fails=$((fails + 1))
else echo "ok   train-check-leaves-nothing"; fi
# ---- issue 47 ----------------------------------------------------------------
# Item 3: a run that stops says so in every output. capuchin's static policy
# cannot follow the op sequence of the first validation-free GenPolicy step
# and stops at step 4 of 60: the summary starts with FAILED and makes no
# verification claim, the JSON has the error and no bit-exact verdict, the
# report opens with a banner. Exit 1.
failing=(train --steps 60 --verify --strategy capuchin --quiet)
check_not train-failed-summary 1 '^summary$' 'every loss and every parameter byte equal' -- \
  "${failing[@]}"
out=$("$bin" "${failing[@]}" 2>/dev/null)
if [ "$(grep -A1 '^summary$' <<<"$out" | tail -1)" = "$(grep -m1 'FAILED' <<<"$out")" ] &&
   grep -qE '^  FAILED +after 4 of 60 steps: step 4 \(training\): capuchin policy' <<<"$out"; then
  echo "ok   train-failed-first"
else
  echo "FAIL train-failed-first: the summary does not start with FAILED:"; echo "$out" | head -5
  fails=$((fails + 1))
fi
check train-failed-json 1 '"bit_exact": null.*"decode_bit_exact": null.*"error": "step 4 \(training\): capuchin policy' -- \
  "${failing[@]}" --json
"$bin" "${failing[@]}" --report "$dir/failed.html" >/dev/null 2>&1
if grep -qE '<p class="failed" id="failed"><strong>FAILED:</strong> the run did not finish\. step 4 \(training\)' "$dir/failed.html" &&
   ! grep -q 'bit for bit</th><td>yes' "$dir/failed.html"; then
  echo "ok   train-failed-report"
else
  echo "FAIL train-failed-report: no banner, or a bit-exact claim"; fails=$((fails + 1))
fi
# The negative control: the same run, finished, claims it and has no banner.
check train-finished-json 0 '"bit_exact": true.*"error": null' -- \
  train --steps 3 --verify --strategy capuchin --quiet --json
"$bin" train --steps 3 --quiet --report "$dir/fine.html" >/dev/null 2>&1
if grep -q 'class="failed"' "$dir/fine.html"; then
  echo "FAIL train-finished-report: a banner on a finished run"; fails=$((fails + 1))
else echo "ok   train-finished-report"; fi

# Item 7: every write is checked, stdout included: a full disk is exit 1
# with the path and the errno, and the summary names no file it could not
# write.
if [ -w /dev/full ]; then
  check_not train-report-full 1 '--report /dev/full: cannot write: No space left on device' \
    '^  report ' -- "${small[@]}" --report /dev/full
  check_not train-trace-full 1 'trace: /dev/full: cannot write: No space left on device' \
    '^  timeline ' -- "${small[@]}" --trace /dev/full
  out=$("$bin" "${small[@]}" --json 2>&1 >/dev/full); status=$?
  if [ $status -eq 1 ] && grep -q '^chameleon: cannot write to standard output: No space left on device$' <<<"$out"; then
    echo "ok   train-json-full"
  else echo "FAIL train-json-full: status $status: $out"; fails=$((fails + 1)); fi
  mkdir -p "$dir/full-curve"
  ln -sf /dev/full "$dir/full-curve/memory_curve.csv"
  check train-curve-full 1 '--memory-curve .*memory_curve\.csv: cannot write: No space left on device' -- \
    "${small[@]}" --memory-curve "$dir/full-curve"
  [ -c /dev/full ] && echo "ok   train-dev-full-kept" || { echo "FAIL train-dev-full-kept"; fails=$((fails + 1)); }
else
  echo "skip train-*-full: no writable /dev/full"
fi

# Item 8: an interrupted run leaves nothing under the final name (the
# trace is written under a temporary name and renamed when complete) and
# no temporary file: SIGINT removes it. Job control gives the background
# run SIGINT back (a script's background jobs ignore it).
mkdir -p "$dir/int"
set -m
"$bin" train --steps 100000 --quiet --trace "$dir/int/t.json" >/dev/null 2>&1 &
pid=$!
set +m
for _ in $(seq 1 300); do
  tmp=$(ls -A "$dir/int")
  [ -n "$tmp" ] && [ "$(stat -c %s "$dir/int/$tmp" 2>/dev/null || echo 0)" -gt 0 ] && break
  sleep 0.1
done
kill -INT "$pid" 2>/dev/null
for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -KILL "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
left=$(ls -A "$dir/int")
if [ -n "${tmp:-}" ] && [ -z "$left" ]; then echo "ok   train-sigint-trace"
else echo "FAIL train-sigint-trace: written as \"${tmp:-nothing}\", left: $left"; fails=$((fails + 1)); fi
# A finished run's trace is complete JSON under its name, nothing beside it.
check train-trace-complete 0 'timeline +.*/int/t\.json' -- "${small[@]}" --trace "$dir/int/t.json"
if python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$dir/int/t.json" 2>/dev/null &&
   [ "$(ls -A "$dir/int")" = "t.json" ]; then echo "ok   train-trace-renamed"
else echo "FAIL train-trace-renamed: $(ls -A "$dir/int")"; fails=$((fails + 1)); fi

checks_done "train cli"
