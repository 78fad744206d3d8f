#!/usr/bin/env bash
# `chameleon report`: an HTML page from `chameleon simulate --json` or
# `chameleon train --json` (and `train --report`), judged by its content:
# the summary's labels in words with units, the charts' SVG with drawn
# lines, bytes axes from 0, the loss chart for train, every stage change;
# bad input gives a clear error. Where Chromium is installed (CI installs
# Debian's), the page is opened headless and the same is checked in the DOM
# it parsed; where it is not, the rest runs and the test exits 77 (skipped).
set -uo pipefail
build=$2
bin="$build/chameleon"
. "$1/tests/support/cli.sh" || exit 1
dir=$(mktemp -d "${TMPDIR:-/tmp}/cham-report-XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT

ok() { echo "ok   $1"; }
fail() { echo "FAIL $1"; fails=$((fails + 1)); }
# has NAME TEXT PATTERN: the extended regex occurs in TEXT.
has() { if grep -qE -- "$3" <<<"$2"; then ok "$1"; else fail "$1: no /$3/"; fi; }
hasnt() { if grep -qE -- "$3" <<<"$2"; then fail "$1: /$3/ found"; else ok "$1"; fi; }
# figure ID HTML: the figure's markup (one line each element, as written).
figure() { sed -n "/<figure id=\"$1\">/,/<\/figure>/p" <<<"$2"; }
# lines NAME HTML ID MIN: figure ID holds an <svg> with at least MIN
# polylines of two or more points, all numbers finite.
lines() {
  local fig n
  fig=$(figure "$3" "$2")
  n=$(grep -oE '<polyline[^>]* points="-?[0-9.]+,-?[0-9.]+( -?[0-9.]+,-?[0-9.]+)+"' <<<"$fig" | wc -l)
  if grep -q '<svg' <<<"$fig" && [ "$n" -ge "$4" ] && ! grep -qiE 'nan|inf' <<<"$(grep -o 'points="[^"]*"' <<<"$fig")"; then
    ok "$1 ($n lines)"
  else
    fail "$1: $n lines drawn in #$3 (want $4 or more)"
  fi
}
# zero NAME HTML ID: figure ID's y axis has a tick labelled 0 (bytes and
# times start at 0).
zero() {
  if grep -qE '<text [^>]*text-anchor="end"[^>]*>0</text>' <<<"$(figure "$3" "$2")"; then ok "$1"
  else fail "$1: the y axis of #$3 does not start at 0"; fi
}
# checks_page PREFIX HTML KIND: what a page of a simulate (sim) or train run holds.
checks_page() {
  local p=$1 html=$2 kind=$3 summary
  summary=$(sed -n '/<table class="summary">/,/<\/table>/p' <<<"$html")
  has "$p-title" "$html" 'Chameleon run report'
  lines "$p-memory-curve" "$html" memory-curve 3
  lines "$p-step-time" "$html" step-time 1
  lines "$p-swapped" "$html" swapped 1
  zero "$p-memory-axis-0" "$html" memory-curve
  zero "$p-swapped-axis-0" "$html" swapped
  zero "$p-step-time-axis-0" "$html" step-time
  has "$p-step-time-ms" "$html" 'simulated time \(ms\)'
  has "$p-summary-peak" "$summary" '<th>Peak device memory</th><td>[0-9]+\.[0-9]{2} (MiB|GiB)</td>'
  has "$p-summary-steps" "$summary" '<th>Training steps completed</th><td>[0-9,]+</td>'
  has "$p-summary-stages" "$summary" '<th>Stage changes</th><td>[0-9]+</td>'
  has "$p-summary-policies" "$summary" '<th>Policies generated</th><td>[0-9]+</td>'
  # No raw JSON key or bare number of bytes or seconds in the summary.
  hasnt "$p-summary-no-keys" "$summary" '<code>|_bytes|_s<|_ratio|[0-9]{7,}<'
  has "$p-policy" "$html" 'Planner chameleon: [0-9]+ tensors swapped per step; peak [0-9.]+ (MiB|GiB) without swaps'
  has "$p-policy-table" "$html" '<table class="policy">'
  # Every stage change the runtime counted is in the table: its rows
  # after the start are as many as the summary's count.
  local counted rows
  counted=$(grep -oE '<th>Stage changes</th><td>[0-9]+' <<<"$summary" | grep -oE '[0-9]+$')
  rows=$(sed -n '/<table class="stages">/,/<\/table>/p' <<<"$html" | grep -c '<tr><td>[0-9]')
  if [ -n "$counted" ] && [ "$rows" -eq $((counted + 1)) ]; then ok "$p-stage-table ($counted changes)"
  else fail "$p-stage-table: $rows rows for ${counted:-?} changes"; fi
  if [ "$kind" = sim ]; then
    has "$p-summary-capacity" "$summary" '<th>Device capacity</th><td>7\.00 GiB</td>'
    has "$p-summary-time" "$summary" '<th>Step time \(median over Stable steps\)</th><td>[0-9]+\.[0-9]{3} ms</td>'
    has "$p-summary-slowdown" "$summary" '<th>Slowdown against unlimited memory</th><td>[+-][0-9]+\.[0-9] %</td>'
    has "$p-summary-swapped" "$summary" '<th>Swapped per step \(out and in\)</th><td>[0-9.]+ (MiB|GiB)</td>'
    has "$p-memory-capacity" "$(figure memory-curve "$html")" '>capacity</text>'
    has "$p-stage-validation" "$html" '<td>10</td><td>training, with validation</td>'
    hasnt "$p-no-loss" "$html" '<figure id="loss">'
  else
    has "$p-summary-val-loss" "$summary" '<th>Final validation loss</th><td>[0-9]+\.[0-9]{4}</td>'
    has "$p-summary-time" "$summary" '<th>Step time \(mean, simulated\)</th><td>[0-9]+\.[0-9]{3} ms</td>'
    has "$p-summary-host" "$summary" "<th>Host CPU time in Chameleon's calls</th><td>[0-9.]+ %</td>"
    lines "$p-loss" "$html" loss 2
    has "$p-loss-series" "$(figure loss "$html")" '>validation</text>'
    has "$p-memory-budget" "$(figure memory-curve "$html")" '>budget</text>'
    hasnt "$p-memory-no-capacity" "$(figure memory-curve "$html")" '>capacity</text>'
    has "$p-stage-validation" "$html" '<td>[0-9]+</td><td>validation</td><td>[A-Za-z]+</td><td>[A-Za-z]+</td>'
  fi
}

# simulate, as the JSON the report reads; its exit status counts.
"$bin" simulate --model llama2 --layers 4 --seq 2048 --mbs 4 --dp 8 --zero 3 \
  --device a100-80g --steps 12 --capacity 7GiB --validate-every 10 --json >"$dir/run.json"
st=$?
[ "$st" -eq 0 ] && ok "simulate-json-status" || fail "simulate-json-status: $st"
check report-writes 0 "report written to $dir/page.html" -- report "$dir/run.json" --out "$dir/page.html"
sim_html=$(cat "$dir/page.html")
checks_page sim "$sim_html" sim

# train --json, read by `report` like simulate's.
small=(train --layers 2 --hidden 16 --seq 32 --batch 2 --steps 40 --validate-every 15 --quiet)
"$bin" "${small[@]}" --json >"$dir/train.json"
st=$?
[ "$st" -eq 0 ] && ok "train-json-status" || fail "train-json-status: $st"
for key in '"series": \{' '"validation": \{"after_step": \[14, 29\]' '"memory_curve": \{' \
           '"policy_applied": (\{|null)' '"loss": \['; do
  has "train-json-has $key" "$(cat "$dir/train.json")" "$key"
done
check report-train 0 "report written to $dir/train.html" -- report "$dir/train.json"
train_html=$(cat "$dir/train.html")
checks_page train "$train_html" train
# The budget is shown as the JSON's bytes in MiB (computed here, not by the report).
budget=$(grep -oE '"budget_bytes": [0-9]+' "$dir/train.json" | head -1 | grep -oE '[0-9]+$')
want=$(awk -v b="$budget" 'BEGIN { printf "%.2f MiB", b / 1048576 }')
has train-budget-value "$train_html" "<th>Device memory budget</th><td>$want \\([0-9]+ % of the unconstrained peak\\)</td>"
# train --report writes the same page itself, with no temporary files.
check train-report 0 "report +$dir/direct.html" -- "${small[@]}" --report "$dir/direct.html"
checks_page direct "$(cat "$dir/direct.html" 2>/dev/null)" train
# --memory-curve's picture names its line as what it is: train's budget,
# simulate's capacity.
check train-curve 0 'memory curve' -- "${small[@]}" --steps 3 --memory-curve "$dir/tc"
has train-curve-budget "$(cat "$dir/tc/memory_curve.svg" 2>/dev/null)" '>budget</text>'
check sim-curve 0 'summary' -- simulate --model gpt2 --layers 2 --steps 2 --memory-curve "$dir/sc"
has sim-curve-capacity "$(cat "$dir/sc/memory_curve.svg" 2>/dev/null)" '>capacity</text>'

check report-default-name 0 "report written to $dir/run.html" -- report "$dir/run.json"
check report-missing 1 "missing\.json: cannot open: No such file or directory" -- report "$dir/missing.json"
echo '{"policy": "x"}' >"$dir/other.json"
check report-not-a-run 1 'no "series": is it the output of `chameleon simulate --json` or `chameleon train --json`' -- \
  report "$dir/other.json"
check report-usage 2 'no RUN.json given' -- report
check report-unknown-option 2 'unknown option --ot \(did you mean --out\?\)' -- report "$dir/run.json" --ot x.html

# Issue 14. Item 3: two step times an ulp apart made the axis step fall under
# one ulp and the page grow without end; now the page is written at once.
printf '{"series":{"step_time_s":[1,1.0000000000000002]}}' >"$dir/ulp.json"
check report-ulp 0 "report written to $dir/ulp.html" -- report "$dir/ulp.json"
size=$(stat -c %s "$dir/ulp.html" 2>/dev/null || echo 0)
if [ "$size" -gt 0 ] && [ "$size" -lt 100000 ]; then ok "report-ulp-size ($size bytes)"
else fail "report-ulp-size: $size bytes"; fi
printf '{"series":{"step_time_s":[1.7e308,0,5e-324],"swapped_bytes":[1e308,5e-324,0]}}' >"$dir/huge.json"
check report-huge-values 0 "report written to $dir/huge.html" -- report "$dir/huge.json"
# Item 7: a directory is named as one; an output that is the input is refused.
check report-dir 1 "$dir: cannot read: Is a directory" -- report "$dir"
: >"$dir/empty.json"
check report-empty 1 'empty\.json: empty file \(expected the JSON object of `chameleon simulate --json` or `chameleon train --json`\)' -- \
  report "$dir/empty.json"
cp "$dir/run.json" "$dir/run-copy.json"
check report-out-is-input 2 "--out $dir/\./run\.json is the run being read .* it would be overwritten" -- \
  report "$dir/run.json" --out "$dir/./run.json"
if cmp -s "$dir/run.json" "$dir/run-copy.json"; then ok "report-input-untouched"
else fail "report-input-untouched"; fi
check report-out-is-dir 1 "--out $dir: cannot write: it is a directory" -- report "$dir/run.json" --out "$dir"
# A policy without a planner's name prints no "(null)".
printf '{"series":{},"policy_applied":{"items":[]}}' >"$dir/nameless.json"
check report-nameless-policy 0 'report written' -- report "$dir/nameless.json"
if grep -q '(null)' "$dir/nameless.html"; then fail "report-no-null"; else ok "report-no-null"; fi
# A key the report does not know is still shown, under its JSON name.
printf '{"series":{},"new_value":3}' >"$dir/unknown.json"
check report-unknown-key 0 'report written' -- report "$dir/unknown.json"
has report-unknown-key-shown "$(cat "$dir/unknown.html")" '<th><code>new_value</code></th><td>3</td>'
# Negative control for the lines check: a run without steps draws no line.
printf '{"series":{}}' >"$dir/nosteps.json"
check report-no-steps 0 'report written' -- report "$dir/nosteps.json"
n=$(grep -c '<polyline' <<<"$(figure step-time "$(cat "$dir/nosteps.html")")")
[ "$n" -eq 0 ] && ok "report-no-steps-no-line" || fail "report-no-steps-no-line: $n"

# Issue 47, item 11: a run JSON the page would misdraw is refused (exit 1)
# with the file, the path of the value and the value, and no page is
# written: series of different lengths, unknown stages, negative byte
# counts, times and op numbers, numbers JSON cannot hold.
# refused NAME JSON PATTERN: report exits 1 naming the file and matching
# PATTERN, and writes no page.
refused() {
  printf '%s' "$2" >"$dir/bad-$1.json"
  check "report-refuses-$1" 1 "^chameleon report: $dir/bad-$1\\.json:( |[0-9]+:[0-9]+: )$3" -- \
    report "$dir/bad-$1.json" --out "$dir/bad-$1.html"
  if [ -e "$dir/bad-$1.html" ]; then fail "report-refuses-$1-no-page"; else ok "report-refuses-$1-no-page"; fi
}
refused lengths '{"series":{"step_time_s":[1,2,3],"swapped_bytes":[1,2]}}' \
  'series\.swapped_bytes has 2 value\(s\) but series\.step_time_s has 3: each series needs one value per step'
refused stage '{"series":{"step_time_s":[1,2,3],"stage":["WarmUp","GenPolicy","Warmup"]}}' \
  'series\.stage\[2\]: expected a stage \(WarmUp, GenPolicy or Stable\), got "Warmup"'
refused stage-null '{"series":{"stage":["Stable",null]}}' 'series\.stage\[1\]: expected a stage .*, got null'
refused bytes '{"series":{"step_time_s":[1,2],"swapped_bytes":[0,-4096]}}' \
  'series\.swapped_bytes\[1\]: expected a byte count \(a number, 0 or more, or null\), got -4096'
refused summary-bytes '{"series":{},"peak_device_bytes":-1}' 'peak_device_bytes: expected a byte count .*, got -1'
refused time '{"series":{"step_time_s":[-1.7e308,1]}}' 'series\.step_time_s\[0\]: expected a time in seconds .*, got -1\.[0-9]+e\+?308'
refused validation '{"series":{"step_time_s":[1,2],"validation":{"after_step":[0,1],"loss":[2.5]}}}' \
  'series\.validation\.loss has 1 value\(s\) but series\.validation\.after_step has 2'
refused after-step '{"series":{"validation":{"after_step":[-1]}}}' \
  'series\.validation\.after_step\[0\]: expected a whole number \(0 or more, or null\), got -1'
refused curve '{"series":{},"memory_curve":{"ops":["a"],"in_use_bytes":[1,2],"without_swaps_bytes":[1]}}' \
  'memory_curve\.in_use_bytes and memory_curve\.without_swaps_bytes must be arrays of one length, got 2 and 1'
refused curve-ops '{"series":{},"memory_curve":{"ops":["a","b"],"in_use_bytes":[1,2],"without_swaps_bytes":[1,2]}}' \
  'memory_curve\.ops has 2 op\(s\) but memory_curve\.in_use_bytes has 2 value\(s\)'
refused curve-bytes '{"series":{},"memory_curve":{"in_use_bytes":[1,-2],"without_swaps_bytes":[1,2]}}' \
  'memory_curve\.in_use_bytes\[1\]: expected a byte count'
refused policy-item '{"series":{},"policy_applied":{"items":[{"bytes":-5}]}}' \
  'policy_applied\.items\[0\]\.bytes: expected a byte count .*, got -5'
refused policy-op '{"series":{},"policy_applied":{"items":[{"bytes":5,"swap_in_before_op":2.5}]}}' \
  'policy_applied\.items\[0\]\.swap_in_before_op: expected a whole number .*, got 2\.5'
refused not-series '{"series":{"step_time_s":3}}' 'series\.step_time_s: expected an array with one value per step, got 3'
refused overflow '{"series":{"step_time_s":[1e400]}}' 'real number overflow'
# A key with a control character is shown without it (no forged lines).
refused key '{"series":{"x\ny_bytes":[-1]}}' 'series\.x\?y_bytes\[0\]: expected a byte count'
# Nulls (what the commands write for a value they do not have) pass.
printf '{"series":{"step_time_s":[null,0.5],"stage":["WarmUp","Stable"]},"memory_curve":null,"oom_step":null}' >"$dir/nulls.json"
check report-nulls 0 'report written' -- report "$dir/nulls.json"

# Issue 47, item 3: a run that did not finish opens with a FAILED banner
# naming its error, and one whose verification differs with DIFFERS; a
# finished, equal run has neither (the negative control).
printf '{"series":{},"steps":4,"bit_exact":null,"error":"step 4 (training): <no policy>"}' >"$dir/failed.json"
check report-failed 0 'report written' -- report "$dir/failed.json"
has report-failed-banner "$(cat "$dir/failed.html")" \
  '<p class="failed" id="failed"><strong>FAILED:</strong> the run did not finish\. step 4 \(training\): &lt;no policy&gt;'
hasnt report-failed-no-claim "$(cat "$dir/failed.html")" 'bit for bit</th><td>yes'
printf '{"series":{},"bit_exact":false,"error":null}' >"$dir/differs.json"
check report-differs 0 'report written' -- report "$dir/differs.json"
has report-differs-banner "$(cat "$dir/differs.html")" '<p class="failed" id="differs"><strong>DIFFERS:</strong>'
printf '{"series":{},"bit_exact":true,"error":null}' >"$dir/equal.json"
check report-equal 0 'report written' -- report "$dir/equal.json"
hasnt report-equal-no-banner "$(cat "$dir/equal.html")" 'class="failed"'
# Item 7: a page that cannot be written whole is exit 1 with the errno.
if [ -w /dev/full ]; then
  check report-out-full 1 'chameleon report: /dev/full: cannot write: No space left on device' -- \
    report "$dir/equal.json" --out /dev/full
fi

browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then
  echo "skip report-browser: no Chromium installed"
  checks_done "chameleon report"
  exit 77
fi
flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$dir/profile")
# The DOM Chromium built from each page: the same content checks on what
# the browser parsed (an SVG it could not parse would not be there).
for kind in sim train; do
  page="$dir/page.html"
  [ "$kind" = train ] && page="$dir/train.html"
  dom=$(timeout 120 "$browser" "${flags[@]}" --dump-dom "file://$page" 2>/dev/null)
  if grep -q '</svg>' <<<"$dom"; then
    checks_page "dom-$kind" "$dom" "$kind"
  else
    fail "dom-$kind: Chromium gave no DOM with SVG (status of the dump: ${#dom} bytes)"
  fi
done
# A smoke check that Chromium rendered the page to an image at all.
timeout 120 "$browser" "${flags[@]}" --window-size=1100,2600 \
  --screenshot="$dir/shot.png" "file://$dir/train.html" >/dev/null 2>&1
if [ -s "$dir/shot.png" ] && [ "$(head -c 8 "$dir/shot.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; then
  ok "report-browser-screenshot (a PNG)"
else
  fail "report-browser-screenshot: no PNG written"
fi
checks_done "chameleon report"
