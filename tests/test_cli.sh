#!/usr/bin/env bash
# The `chameleon` command: the demo passes with no hazards and bit-exact
# data, presets are listed, and bad usage gives a clear message and exit 2.
set -uo pipefail
build=$2
bin="$build/chameleon"
. "$1/tests/support/cli.sh" || exit 1
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
checks_done "cli"
