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
check report-missing 1 "missing.json:.*unable to open" -- report "$dir/missing.json"
echo '{"policy": "x"}' >"$dir/other.json"
check report-not-a-run 1 'no "series": is it the output of `chameleon simulate --json`' -- \
  report "$dir/other.json"
check report-usage 2 'usage: chameleon report' -- report

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
