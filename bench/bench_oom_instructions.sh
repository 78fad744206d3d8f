#!/bin/sh
# Instructions per OOM-path step of bench_oom at 2,000 to 16,000 live
# tensors, counted by callgrind: a figure the machine's load does not move
# (bench_oom's own thread-CPU times scatter by 2x on a busy 2-core machine).
# A step's count is the difference between runs of 9 and 3 repeats, less
# the same difference at the size below (bench_oom runs every size up to
# --max), divided by the 6 extra steps.
#
#   bench/bench_oom_instructions.sh [build dir, default build-rel]
#
# Prints M instructions per step per size and each doubling's ratio, with
# the verdict against issue 47's target (at most 2.2x per doubling).
set -eu
build=${1:-build-rel}
bench="$build/bench/bench_oom"
[ -x "$bench" ] || { echo "no $bench: cmake --build $build --target bench_oom" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
count() {   # allocator max repeat -> instructions
    valgrind --tool=callgrind --callgrind-out-file="$tmp/out" "$bench" --repeat "$3" \
        --max "$2" --allocator "$1" >/dev/null 2>"$tmp/err"
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$tmp/err"
}
for a in classic expandable; do
    line="$a:"
    prev_cum=0
    prev_step=
    ratios=
    worst=0
    for m in 2000 4000 8000 16000; do
        cum=$(( $(count $a $m 9) - $(count $a $m 3) ))
        step=$(( (cum - prev_cum) / 6 ))
        line="$line $m: $(awk "BEGIN { printf \"%.1f\", $step / 1e6 }") M"
        if [ -n "$prev_step" ]; then
            r=$(awk "BEGIN { printf \"%.2f\", $step / $prev_step }")
            ratios="$ratios ${r}x"
            worst=$(awk "BEGIN { print ($r > $worst) ? $r : $worst }")
        fi
        prev_cum=$cum
        prev_step=$step
    done
    verdict=$(awk "BEGIN { print ($worst <= 2.2) ? \"met\" : \"NOT met\" }")
    echo "$line; per doubling:$ratios (target <= 2.2x: $verdict)"
done
