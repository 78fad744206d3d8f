#!/usr/bin/env bash
# The `chameleon` command: the demo passes with no hazards and bit-exact
# data, presets are listed, and bad usage gives a clear message and exit 2.
set -uo pipefail
build=$2
bin="$build/chameleon"
fails=0
check() {  # check NAME EXPECTED_STATUS PATTERN -- ARGS...
  local name=$1 want=$2 pattern=$3; shift 4
  local out status
  out=$("$bin" "$@" 2>&1); status=$?
  if [ "$status" -ne "$want" ] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL $name: status $status (want $want), output:"; echo "$out" | head -40
    fails=$((fails + 1))
  else
    echo "ok   $name"
  fi
}
check demo 0 'demo passed' -- demo
check demo-data 0 'every activation came back bit-exact' -- demo
check demo-native-oom 0 'out of device memory: requested' -- demo
check demo-hazards 0 'hazards +0$' -- demo --layers 12
check demo-device 0 'sim device v100-16g' -- demo --device v100-16g
check demo-bad-device 1 'unknown device preset "nope"' -- demo --device nope
check demo-bad-layers 2 'layers must be 3..64' -- demo --layers 2
check devices 0 'ascend-910b' -- devices
# Without a GPU the cuda backend says why instead of crashing (or, in a build
# without the toolkit, that it is not built in); with one, what it is.
if "$bin" devices --backend cuda >/dev/null 2>&1; then
  check devices-cuda 0 '^cuda: .*GiB$' -- devices --backend cuda
else
  check devices-cuda 1 '^cuda: unavailable \((device unavailable|unsupported)\): .*cuda' -- devices --backend cuda
fi
check devices-bad 2 'unexpected argument "--frobnicate"' -- devices --frobnicate
check version 0 '^chameleon [0-9]+\.[0-9]+\.[0-9]+$' -- version
check unknown-command 2 'unknown command "frobnicate"' -- frobnicate
check no-command 2 'usage: chameleon' --
[ "$fails" -eq 0 ] && echo "cli: all checks passed" || { echo "cli: $fails checks failed"; exit 1; }
