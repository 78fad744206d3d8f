#!/usr/bin/env bash
# The `chameleon` command: `check` passes with no hazards and bit-exact
# data, presets are listed, and bad usage gives a clear message and exit 2
# (docs/cli.md: 1 for failures, 2 for the command line).
set -uo pipefail
build=$2
bin="$build/chameleon"
. "$1/tests/support/cli.sh" || exit 1
check check 0 'check passed' -- check
check check-data 0 'every activation came back bit-exact' -- check
check check-native-oom 0 'out of device memory: requested' -- check
check check-hazards 0 'hazards +0$' -- check --layers 12
check check-device 0 'sim device v100-16g' -- check --device v100-16g
check check-bad-device 2 'chameleon check: --device: unknown device preset "nope" \(known: ' -- check --device nope
check check-bad-layers 2 'layers must be 3..64' -- check --layers 2
# `chameleon demo` is the old name of `check`, for one release, with a note.
check demo-old-name 0 'note: `chameleon demo` is now `chameleon check`' -- demo
check demo-old-name-runs 0 '^check passed$' -- demo
check_not help-no-demo 0 'check +check the swap mechanics' '^  demo ' -- --help
check devices 0 'ascend-910b' -- devices
# Without a GPU the cuda backend says why instead of crashing (no runtime to
# load, or no driver for the one it loaded); with one, what it is.
if "$bin" devices --backend cuda >/dev/null 2>&1; then
  check devices-cuda 0 '^cuda: .*GiB$' -- devices --backend cuda
else
  check devices-cuda 1 '^cuda: unavailable \(device unavailable\): .*cuda' -- devices --backend cuda
fi
check devices-bad 2 'unknown option --frobnicate' -- devices --frobnicate
check devices-bad-backend 2 '--backend must be sim or cuda, got "tpu"' -- devices --backend tpu
check devices-no-backend 2 'option --backend needs a value' -- devices --backend
check version 0 '^chameleon [0-9]+\.[0-9]+\.[0-9]+$' -- version
# Issue 14, item 7: an unknown option is an unknown option, never "needs a
# value"; a close one is suggested; version takes no arguments; the help
# states the one exit-status convention of every command.
check_not demo-unknown-option 2 'unknown option --frob \(' 'needs a value' -- check --frob
check demo-typo 2 'unknown option --layer \(did you mean --layers\?\)' -- check --layer 4
check demo-layers-suffix 2 '--layers must be 3\.\.64, got "4x"' -- check --layers 4x
check demo-empty-value 2 'option --device needs a value, got ""' -- check --device ''
check version-extra 2 'chameleon version: unexpected argument "--foo"' -- version --foo
check unknown-command-near 2 'unknown command "simulat" \(did you mean simulate\?\)' -- simulat
check help-exit-status 0 'Exit status \(every command\): 0 done; 1 failed' -- --help
check experiment-unknown-option 2 'unknown option --devcie \(did you mean --device\?\)' -- \
  experiment record-stream --devcie ascend-910b
check experiment-bad-device 2 '--device: unknown device preset "tpu"' -- \
  experiment record-stream --device tpu
dir=$(mktemp -d "${TMPDIR:-/tmp}/cham-cli-XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
: >"$dir/file"
# The output directory is checked before the experiment runs (which takes
# seconds to minutes): nothing is printed but the problem.
check_not experiment-out-file 1 "--out $dir/file: not a directory \(it is a regular file\)" \
  'experiment record-stream on' -- experiment record-stream --reduced --out "$dir/file"
# Issue 47, item 7: standard output is checked at exit like any file: a
# full disk is exit 1 with the errno, for every command.
if [ -w /dev/full ]; then
  for args in "version" "--help" "devices" "train --help"; do
    out=$("$bin" $args 2>&1 >/dev/full); status=$?
    if [ $status -eq 1 ] && [ "$out" = "chameleon: cannot write to standard output: No space left on device" ]; then
      echo "ok   stdout-full-${args// /-}"
    else echo "FAIL stdout-full-${args// /-}: status $status: $out"; fails=$((fails + 1)); fi
  done
fi
# Items 7 and 8: `plan --save` saves the policy whole or not at all: a full
# disk is exit 1 (and /dev/full stays a device), an earlier file is
# replaced whole, and no temporary file is left beside it.
"$bin" train --steps 2 --quiet --memory-curve "$dir/prof" >/dev/null 2>&1
profile="$dir/prof/last-step-profile.json"
# (Through a link: a writer that removes what it failed to write removes
# the link, never the device.)
if [ -w /dev/full ]; then
  ln -s /dev/full "$dir/full.json"
  check plan-json-full 1 "chameleon plan: $dir/full.json: cannot write: No space left on device" -- \
    plan "$profile" --save "$dir/full.json"
  [ -c /dev/full ] && [ -L "$dir/full.json" ] && echo "ok   plan-dev-full-kept" ||
    { echo "FAIL plan-dev-full-kept"; fails=$((fails + 1)); }
fi
mkdir -p "$dir/pol"
echo stale >"$dir/pol/p.json"
check plan-save-saved 0 "policy saved to $dir/pol/p.json" -- plan "$profile" --save "$dir/pol/p.json"
if python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$dir/pol/p.json" 2>/dev/null &&
   [ "$(ls -A "$dir/pol")" = "p.json" ]; then echo "ok   plan-json-whole"
else echo "FAIL plan-json-whole: $(ls -A "$dir/pol")"; fails=$((fails + 1)); fi
check unknown-command 2 'unknown command "frobnicate"' -- frobnicate
check no-command 2 'usage: chameleon' --
checks_done "cli"
