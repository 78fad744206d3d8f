#!/usr/bin/env bash
# Mutation testing (issue 49; docs/testing.md, "Mutation testing"): applies
# one-line mutations to a copy of the source tree, one at a time, rebuilds
# and runs a selection of the tests, and prints which mutants the tests
# killed. Run by hand; it is not part of `make test` or CI.
#
# The copy holds the working tree's files that git knows or would add
# (tracked, plus untracked files not ignored: build directories and .git
# stay out), or with -g a commit's tree (plus the files -a names, from the
# working tree); the repository and its .git are never touched. One scratch
# build (plain, -DCHAM_DEBUG_CHECKS=ON, as `make test`'s plain run) is made
# once; each mutant rebuilds incrementally, and its file is put back after.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: scripts/mutate.sh [options]

Applies each mutation of a list to a scratch copy of the source tree, one at
a time, rebuilds, runs the tests and prints a table: id, killed/survived
(or build-failed), the first failing test.

options:
  -l FILE    the list of mutations (default: scripts/mutations.txt; its
             header says the format)
  -g REV     copy the tree of commit REV instead of the working tree
  -a FILES   with -g: also copy these files (comma-separated, from the
             repository's root) from the working tree, e.g. new tests
  -m IDS     only these mutations (comma-separated ids)
  -R REGEX   run only the CTest tests matching REGEX (ctest -R)
  -E REGEX   also leave out the tests matching REGEX (ctest -E; test_python*
             is always left out, as is the label `long`)
  -j N       build and CTest jobs (default 2)
  -n         no baseline: skip running the selection on the unmutated tree
             first (by default a failure there stops the script)
  -k         keep the scratch directory (its path is printed), with each
             mutant's CTest log
  -c         only check the list against the tree (each original found
             exactly once), build nothing
  -h         this help

Default selection: the plain build's whole ctest minus the label `long` and
minus test_python*. Each mutant runs it in two rounds (the tests the baseline
ran in under 3 s, then the others if those passed), each stopping at its
first failing test. Exit status: 0 when every mutant was killed, 1 when one
survived or did not build, 2 on a bad list, option or set-up.
EOF
}

die() {
    echo "mutate.sh: $*" >&2
    exit 2
}

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
list="$repo/scripts/mutations.txt"
only="" include="" exclude="" jobs=2 baseline=1 keep=0 check_only=0 rev="" add=""
while getopts "l:g:a:m:R:E:j:nkch" opt; do
    case $opt in
    l) list=$OPTARG ;;
    g) rev=$OPTARG ;;
    a) add=$OPTARG ;;
    m) only=$OPTARG ;;
    R) include=$OPTARG ;;
    E) exclude=$OPTARG ;;
    j) jobs=$OPTARG ;;
    n) baseline=0 ;;
    k) keep=1 ;;
    c) check_only=1 ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[[ $# -eq 0 ]] || { usage >&2; die "unexpected argument: $1"; }
[[ $jobs =~ ^[1-9][0-9]*$ ]] || die "-j needs a whole number above 0, got \"$jobs\""
[[ -f $list ]] || die "no list of mutations at $list"
[[ -z $add || -n $rev ]] || die "-a needs -g (without -g the whole working tree is copied)"
if [[ -n $rev ]]; then
    commit=$(git -C "$repo" rev-parse --verify --quiet "$rev^{commit}") || die "-g: no commit $rev"
fi
added=()
[[ -z $add ]] || IFS=, read -ra added <<<"$add"
for f in "${added[@]+"${added[@]}"}"; do
    [[ -f $repo/$f ]] || die "-a: no file $f in $repo"
done
python=python3
[[ -x /usr/bin/python3 ]] && python=/usr/bin/python3
command -v "$python" >/dev/null || die "needs python3 (to apply the mutations)"

# ---- the list -----------------------------------------------------------------
ids=() files=() origs=() repls=() descs=()
lineno=0
while IFS= read -r line || [[ -n $line ]]; do
    lineno=$((lineno + 1))
    [[ -z ${line//[[:space:]]/} || $line =~ ^[[:space:]]*# ]] && continue
    rest=$line fields=()
    while [[ $rest == *" @@ "* ]]; do
        fields+=("${rest%% @@ *}")
        rest=${rest#* @@ }
    done
    fields+=("$rest")
    [[ ${#fields[@]} -eq 5 ]] ||
        die "$list:$lineno: needs 5 fields separated by \" @@ \", has ${#fields[@]}"
    id=${fields[0]}
    [[ $id =~ ^[a-z0-9-]+$ ]] || die "$list:$lineno: bad id \"$id\" (a-z, 0-9, -)"
    for seen in "${ids[@]+"${ids[@]}"}"; do
        [[ $seen != "$id" ]] || die "$list:$lineno: id $id twice"
    done
    if [[ -n $only && ",$only," != *",$id,"* ]]; then
        continue
    fi
    ids+=("$id") files+=("${fields[1]}") origs+=("${fields[2]}") repls+=("${fields[3]}")
    descs+=("${fields[4]}")
done <"$list"
[[ ${#ids[@]} -gt 0 ]] || die "no mutations selected from $list"
if [[ -n $only ]]; then
    IFS=, read -ra wanted <<<"$only"
    for w in "${wanted[@]}"; do
        [[ " ${ids[*]} " == *" $w "* ]] || die "-m: no mutation $w in $list"
    done
fi

# Replaces the original by the replacement in a file (mode apply), or only
# checks that the original occurs exactly once (mode check).
mutate_file() {  # mode file original replacement
    "$python" - "$@" <<'PY'
import sys
mode, path, orig, repl = sys.argv[1:5]
try:
    text = open(path, encoding="utf-8").read()
except OSError as e:
    sys.exit(f"mutate.sh: {path}: {e.strerror}")
n = text.count(orig)
if n != 1:
    sys.exit(f"mutate.sh: {path}: the original text occurs {n} times, not once: {orig}")
if "\n" in orig:
    sys.exit(f"mutate.sh: {path}: the original text spans lines")
if mode == "apply":
    open(path, "w", encoding="utf-8").write(text.replace(orig, repl))
PY
}

check_list() {  # root
    for i in "${!ids[@]}"; do
        mutate_file check "$1/${files[$i]}" "${origs[$i]}" "${repls[$i]}" ||
            die "mutation ${ids[$i]}: its original text is not in ${files[$i]} exactly once"
    done
}
if [[ $check_only -eq 1 ]]; then
    check_list "$repo"
    echo "mutate.sh: ${#ids[@]} mutations, each original found exactly once"
    exit 0
fi

# ---- the scratch copy and build ------------------------------------------------
scratch=$(mktemp -d "${TMPDIR:-/tmp}/cham-mutate.XXXXXX")
cleanup() {
    if [[ $keep -eq 1 ]]; then
        echo "mutate.sh: scratch directory kept: $scratch" >&2
    else
        rm -rf "$scratch"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
src=$scratch/src build=$scratch/build logs=$scratch/logs
mkdir -p "$src" "$logs"
if [[ -n $rev ]]; then
    echo "mutate.sh: copying commit ${commit:0:7}'s tree to $src" >&2
    git -C "$repo" archive "$commit" | tar -C "$src" -xf -
    for f in "${added[@]+"${added[@]}"}"; do
        mkdir -p "$src/$(dirname "$f")"
        cp "$repo/$f" "$src/$f"
    done
else
    echo "mutate.sh: copying the working tree to $src" >&2
    git -C "$repo" ls-files -z --cached --others --exclude-standard |
        (cd "$repo" && tar --null --ignore-failed-read -T - -cf - 2>/dev/null) |
        tar -C "$src" -xf -
fi
for f in CMakeLists.txt "${files[@]}"; do
    [[ -f $src/$f ]] || die "the copy has no $f"
done
check_list "$src"

echo "mutate.sh: configuring and building $build (-j$jobs)" >&2
cmake -S "$src" -B "$build" -DCHAM_DEBUG_CHECKS=ON >"$logs/configure.log" 2>&1 ||
    die "configure failed: $(tail -5 "$logs/configure.log")"
cmake --build "$build" -j "$jobs" >"$logs/build.log" 2>&1 ||
    die "the unmutated tree does not build: $(tail -20 "$logs/build.log")"

exclude_re='^test_python'
[[ -z $exclude ]] || exclude_re="$exclude_re|$exclude"
base_args=(--test-dir "$build" -j "$jobs" -LE long -E "$exclude_re" --stop-on-failure
           --output-on-failure)
ctest_args=("${base_args[@]}")
[[ -z $include ]] || ctest_args+=(-R "$include")

# The first test that failed in a CTest log, or nothing (a skipped test,
# ***Skipped, is no failure).
first_failure() {  # log
    sed -En 's/^ *[0-9]+\/[0-9]+ +Test +#[0-9]+: ([^ ]+) .*\*\*\*(Failed|Exception|Timeout|Not Run).*/\1/p' \
        "$1" | head -1
}

count=$(ctest "${ctest_args[@]}" -N 2>/dev/null | sed -n 's/^Total Tests: //p')
[[ ${count:-0} -gt 0 ]] || die "the selection holds no tests"
echo "mutate.sh: $count tests selected: ctest ${ctest_args[*]:2}" >&2
if [[ $baseline -eq 1 ]]; then
    echo "mutate.sh: baseline (no mutation)" >&2
    if ! ctest "${ctest_args[@]}" >"$logs/baseline.log" 2>&1; then
        die "the unmutated tree fails $(first_failure "$logs/baseline.log"): fix that first (-k keeps the log)"
    fi
fi

# Each mutant runs the selection in two rounds: first the tests the
# baseline ran in under 3 s, then, only if they all passed, the others. A
# mutant is killed exactly when one round would have failed, as in one
# run of the whole selection, but most are killed by a unit test in the
# first round, in a minute instead of the whole suite's time. Without a
# baseline (-n) there are no times: one round.
quick=() slow=()
cost=$build/Testing/Temporary/CTestCostData.txt
while IFS= read -r name; do
    t=$(awk -v n="$name" 'NF == 3 && $1 == n { print $3 }' "$cost" 2>/dev/null || true)
    if [[ -n $t ]] && awk -v t="$t" 'BEGIN { exit !(t < 3) }'; then
        quick+=("$name")
    else
        slow+=("$name")
    fi
done < <(ctest "${ctest_args[@]}" -N | sed -n 's/^ *Test *#[0-9]*: //p')
as_regex() {  # names...: ^(a|b)$ with the dots escaped
    local IFS='|'
    printf '^(%s)$' "$(printf '%s\n' "$*" | sed 's/\./\\./g')"
}
rounds=()
[[ ${#quick[@]} -eq 0 ]] || rounds+=("$(as_regex "${quick[@]}")")
[[ ${#slow[@]} -eq 0 ]] || rounds+=("$(as_regex "${slow[@]}")")
echo "mutate.sh: per mutant, ${#quick[@]} quick tests first, then ${#slow[@]} others" >&2

# Runs the selection's rounds on the build; fails at the first failing round.
run_rounds() {  # log
    local r
    : >"$1"
    for r in "${rounds[@]}"; do
        ctest "${base_args[@]}" -R "$r" >>"$1" 2>&1 || return 1
    done
}

# ---- the mutants ----------------------------------------------------------------
results=() failures=()
killed=0 survived=0 broken=0
for i in "${!ids[@]}"; do
    id=${ids[$i]} file=$src/${files[$i]}
    echo "mutate.sh: [$((i + 1))/${#ids[@]}] $id (${files[$i]})" >&2
    cp -p "$file" "$scratch/original"
    mutate_file apply "$file" "${origs[$i]}" "${repls[$i]}"
    if ! cmake --build "$build" -j "$jobs" >"$logs/$id.build.log" 2>&1; then
        results+=("build-failed") failures+=("-")
        broken=$((broken + 1))
    elif run_rounds "$logs/$id.log"; then
        results+=("survived") failures+=("-")
        survived=$((survived + 1))
    else
        first=$(first_failure "$logs/$id.log")
        results+=("killed") failures+=("${first:-"(ctest failed: see $id.log)"}")
        killed=$((killed + 1))
    fi
    cp "$scratch/original" "$file"     # a new mtime: the next build recompiles it
    touch "$file"
done
# The copy is back to the unmutated tree; a last build proves it compiles.
cmake --build "$build" -j "$jobs" >"$logs/final.build.log" 2>&1 ||
    die "the restored tree does not build (see the logs with -k)"

printf '\n| %s | %s | %s |\n|---|---|---|\n' "mutation" "result" "first failing test"
for i in "${!ids[@]}"; do
    printf '| `%s` | %s | %s |\n' "${ids[$i]}" "${results[$i]}" \
        "$([[ ${failures[$i]} == - ]] && echo - || echo "\`${failures[$i]}\`")"
done
printf '\n%d mutants: %d killed, %d survived, %d did not build. Selection: ctest %s\n' \
    "${#ids[@]}" "$killed" "$survived" "$broken" "${ctest_args[*]:2}"
[[ $survived -eq 0 && $broken -eq 0 ]]
