#!/usr/bin/env bash
# `chameleon report`: an HTML page from `chameleon simulate --json`, with
# the summary and the three charts; bad input gives a clear error. Where
# Chromium is installed (CI installs Debian's), the page is opened headless:
# it must load, hold the charts in its DOM, and render to a non-trivial
# screenshot.
set -uo pipefail
build=$2
bin="$build/chameleon"
. "$1/tests/support/cli.sh" || exit 1
dir=$(mktemp -d "${TMPDIR:-/tmp}/cham-report-XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT

"$bin" simulate --model llama2 --layers 4 --seq 2048 --mbs 4 --dp 8 --zero 3 \
  --device a100-80g --steps 12 --capacity 7GiB --validate-every 10 --json >"$dir/run.json"
check report-writes 0 "report written to $dir/page.html" -- report "$dir/run.json" --out "$dir/page.html"
html=$(cat "$dir/page.html")
for want in '<!DOCTYPE html>' '<figure id="memory-curve">' '<figure id="step-time">' \
            '<figure id="swapped">' '<th>policy_regenerations</th>' 'GenPolicy' \
            'Planner chameleon: [0-9]+ tensors swapped per step' '<table class="policy">' '</html>'; do
  if grep -qE -- "$want" <<<"$html"; then echo "ok   report-has $want"
  else echo "FAIL report-has $want"; fails=$((fails + 1)); fi
done
n=$(grep -o '<svg' <<<"$html" | wc -l)
[ "$n" -eq 3 ] && echo "ok   report-three-charts" || { echo "FAIL report-three-charts: $n"; fails=$((fails + 1)); }
check report-default-name 0 "report written to $dir/run.html" -- report "$dir/run.json"
check report-missing 1 "missing\.json: cannot open: No such file or directory" -- report "$dir/missing.json"
echo '{"policy": "x"}' >"$dir/other.json"
check report-not-a-run 1 'no "series": is it the output of `chameleon simulate --json`' -- \
  report "$dir/other.json"
check report-usage 2 'no RUN.json given' -- report
check report-unknown-option 2 'unknown option --ot \(did you mean --out\?\)' -- report "$dir/run.json" --ot x.html

# Issue 14. Item 3: two step times an ulp apart made the axis step fall under
# one ulp and the page grow without end; now the page is written at once.
printf '{"series":{"step_time_s":[1,1.0000000000000002]}}' >"$dir/ulp.json"
check report-ulp 0 "report written to $dir/ulp.html" -- report "$dir/ulp.json"
size=$(stat -c %s "$dir/ulp.html" 2>/dev/null || echo 0)
if [ "$size" -gt 0 ] && [ "$size" -lt 100000 ]; then echo "ok   report-ulp-size ($size bytes)"
else echo "FAIL report-ulp-size: $size bytes"; fails=$((fails + 1)); fi
printf '{"series":{"step_time_s":[-1.7e308,1.7e308,0],"swapped_bytes":[1e308,5e-324]}}' >"$dir/huge.json"
check report-huge-values 0 "report written to $dir/huge.html" -- report "$dir/huge.json"
# Item 7: a directory is named as one; an output that is the input is refused.
check report-dir 1 "$dir: cannot read: Is a directory" -- report "$dir"
: >"$dir/empty.json"
check report-empty 1 'empty\.json: empty file \(expected the JSON object of `chameleon simulate --json`\)' -- \
  report "$dir/empty.json"
cp "$dir/run.json" "$dir/run-copy.json"
check report-out-is-input 2 "--out $dir/\./run\.json is the run being read .* it would be overwritten" -- \
  report "$dir/run.json" --out "$dir/./run.json"
if cmp -s "$dir/run.json" "$dir/run-copy.json"; then echo "ok   report-input-untouched"
else echo "FAIL report-input-untouched"; fails=$((fails + 1)); fi
check report-out-is-dir 1 "--out $dir: cannot write: it is a directory" -- report "$dir/run.json" --out "$dir"
# A policy without a planner's name prints no "(null)".
printf '{"series":{},"policy_applied":{"items":[]}}' >"$dir/nameless.json"
check report-nameless-policy 0 'report written' -- report "$dir/nameless.json"
if grep -q '(null)' "$dir/nameless.html"; then echo "FAIL report-no-null"; fails=$((fails + 1))
else echo "ok   report-no-null"; fi

browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then
  echo "skip report-browser: no Chromium installed"
else
  flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$dir/profile")
  dom=$(timeout 120 "$browser" "${flags[@]}" --dump-dom "file://$dir/page.html" 2>/dev/null)
  n=$(grep -o '<svg' <<<"$dom" | wc -l)
  if grep -q 'Chameleon run report' <<<"$dom" && [ "$n" -eq 3 ]; then
    echo "ok   report-browser-dom"
  else
    echo "FAIL report-browser-dom: $n charts"; fails=$((fails + 1))
  fi
  timeout 120 "$browser" "${flags[@]}" --window-size=1100,2600 \
    --screenshot="$dir/shot.png" "file://$dir/page.html" >/dev/null 2>&1
  size=$(stat -c %s "$dir/shot.png" 2>/dev/null || echo 0)
  # A blank page of that size compresses to a few kilobytes; charts do not.
  if [ "$size" -gt 40000 ]; then echo "ok   report-browser-screenshot ($size bytes)"
  else echo "FAIL report-browser-screenshot: $size bytes"; fails=$((fails + 1)); fi
fi
checks_done "chameleon report"
