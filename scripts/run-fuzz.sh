#!/usr/bin/env bash
# Runs the libFuzzer targets of fuzz/ (docs/fuzzing.md) built by `make fuzz`.
#
#   scripts/run-fuzz.sh [--runs N | --time SECONDS] [--build DIR] [TARGET...]
#
# Default (CI, `make fuzz-smoke`): each target for a fixed number of runs
# from its seed corpus with a fixed seed, about a minute for all of them on
# a 2-core machine; the seeds are read, never written, and new inputs go to
# a scratch directory. --runs N runs every target N times instead.
# --time SECONDS fuzzes each target that long, keeping what it finds in
# BUILD/fuzz-corpus/TARGET (reused by the next run) on top of the seeds.
# Targets: profile policy config report cli planners (default: all, one after another).
# Any crash, sanitizer report, leak, timeout (an input over 10 s) or
# out-of-memory (over 2 GiB) fails the run; the input is saved as
# BUILD/fuzz-artifacts/TARGET-crash-... and the log is in BUILD/fuzz-logs/.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$src/build-fuzz
runs=""
time_s=""
targets=()
while [ $# -gt 0 ]; do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --time) time_s=$2; shift 2 ;;
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "run-fuzz: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(profile policy config report cli planners)

# Runs per target in the smoke run: from the exec/s measured on a 2-core
# machine (docs/fuzzing.md), about 11 s each when it is otherwise idle.
declare -A smoke_runs=([profile]=90000 [policy]=120000 [config]=150000 [report]=200000
                       [cli]=300000 [planners]=60)   # planners: ~3 runs/s under ASan

mkdir -p "$build/fuzz-logs" "$build/fuzz-artifacts"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
for t in "${targets[@]}"; do
  bin=$build/fuzz/fuzz_$t
  seeds=$src/fuzz/corpus/$t
  if [ ! -x "$bin" ] || [ ! -d "$seeds" ]; then
    echo "run-fuzz: no target \"$t\" ($bin, $seeds): run \`make fuzz\` first" >&2
    exit 2
  fi
  args=(-dict="$src/fuzz/dict/$t.dict" -timeout=10 -rss_limit_mb=2048 -max_len=8192
        -artifact_prefix="$build/fuzz-artifacts/$t-" -print_final_stats=1)
  # The commands print usage and errors; libFuzzer keeps its own output.
  [ "$t" = cli ] && args+=(-close_fd_mask=3)
  if [ -n "$time_s" ]; then
    # The first directory is where libFuzzer writes: never the seeds.
    corpus=$build/fuzz-corpus/$t
    mkdir -p "$corpus"
    args+=(-max_total_time="$time_s")
  else
    corpus=$(mktemp -d)
    args+=(-runs="${runs:-${smoke_runs[$t]}}" -seed=1)
  fi
  log=$build/fuzz-logs/$t.log
  start=$(date +%s)
  rc=0
  "$bin" "${args[@]}" "$corpus" "$seeds" >"$log" 2>&1 || rc=$?
  [ -n "$time_s" ] || rm -rf "$corpus"
  secs=$(( $(date +%s) - start ))
  # The last status line (cov, ft, corp) and the final stats.
  status=$(grep -E '^#[0-9]+' "$log" | tail -1 | sed -E 's/^#([0-9]+)\s+[A-Z]+\s+/\1 runs  /' || true)
  if [ $rc -eq 0 ]; then
    printf 'fuzz_%-8s ok    %4ss  %s\n' "$t" "$secs" "$status"
  else
    printf 'fuzz_%-8s FAIL  %4ss  exit %s; log %s\n' "$t" "$secs" "$rc" "$log"
    grep -E 'ERROR|SUMMARY|fuzz: |runtime error|Test unit written' "$log" | head -20 || true
    failed+=("$t")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "run-fuzz: failed: ${failed[*]}" >&2
  exit 1
fi
