#!/usr/bin/env bash
# libchameleon.so exports exactly the public API: the functions (and data)
# that include/chameleon/*.h declares with CHAM_API, nothing else. The
# library is built with -fvisibility=hidden (CMakeLists.txt), so an internal
# function stays out of a user's symbol space, prefixed or not. Fails naming
#  - every symbol the library exports that no header declares with CHAM_API,
#  - every CHAM_API declaration the library does not export,
#  - every function a public header declares without CHAM_API (a user sees
#    it but cannot link it).
# Usage: test_exports.sh SOURCE_DIR BUILD_DIR (reads BUILD_DIR/libchameleon.so).
set -euo pipefail
export LC_ALL=C   # one collation for sort and comm
src=$1 build=$2
lib="$build/libchameleon.so"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
[ -e "$lib" ] || { echo "export test: no $lib (build the chameleon target)" >&2; exit 1; }
headers=("$src"/include/chameleon/*.h)

# The file-scope declarations of the public headers, one a line: "api NAME"
# for one marked CHAM_API, "bare NAME" for a function declared without it.
# Comments go first (block comments as a whole: one may hold "://"), then
# preprocessor lines (the macro's own definition, include guards), then
# every {...} body, innermost first, so that structs and enums drop out and
# only declarations ended by ';' remain.
declarations() {
  cat "$@" |
    sed -z -E 's:/\*([^*]|\*+[^*/])*\*+/: :g' |
    sed -E 's://.*$::' |
    grep -v '^[[:space:]]*#' |
    tr '\n' ' ' |
    sed -E 's/extern "C"[[:space:]]*\{/ /g; :a; s/\{[^{}]*\}/@/g; ta; s/\}/ /g;
            s/\)[[:space:]]*@/);/g' |
    tr ';' '\n' |
    awk '
      { sub(/^[[:space:]]+/, ""); }
      /^(typedef|static)[^A-Za-z0-9_]/ || $0 == "" { next }
      {
        api = ($0 ~ /(^|[^A-Za-z0-9_])CHAM_API([^A-Za-z0-9_]|$)/)
        fn = index($0, "(") > 0
        if (!fn && !api && $0 !~ /^extern[^A-Za-z0-9_]/) next   # struct tags
        head = $0
        if (fn) head = substr(head, 1, index(head, "(") - 1)
        else sub(/[[=].*$/, "", head)                          # data: name[] = ...
        if (!match(head, /[A-Za-z_][A-Za-z0-9_]*[[:space:]]*$/)) next
        name = substr(head, RSTART, RLENGTH); sub(/[[:space:]]+$/, "", name)
        print (api ? "api" : "bare"), name
      }'
}
declarations "${headers[@]}" > "$tmp/decls"
awk '$1 == "api" {print $2}' "$tmp/decls" | sort -u > "$tmp/api"
awk '$1 == "bare" {print $2}' "$tmp/decls" | sort -u > "$tmp/bare"
if [ ! -s "$tmp/api" ]; then
  echo "export test: no CHAM_API declaration found in $src/include/chameleon/*.h" >&2
  fail=1
fi

# The library's exported definitions, functions and data, without the
# symbols every shared object gets from the toolchain.
nm -D --defined-only "$lib" |
  awk '$2 ~ /^[TtDdBbRrVvWwiuGS]$/ {sub(/@.*/, "", $3); print $3}' |
  grep -v -x -E '_init|_fini|__bss_start|_edata|_end|_DYNAMIC|_GLOBAL_OFFSET_TABLE_' |
  sort -u > "$tmp/exported" || true

report() {   # report FILE MESSAGE: one line per name in FILE
  local n
  n=$(wc -l < "$1")
  [ "$n" -eq 0 ] && return 0
  fail=1
  echo "export test: $n $2:" >&2
  sed 's/^/  /' "$1" >&2
}
comm -23 "$tmp/exported" "$tmp/api" > "$tmp/extra"
comm -13 "$tmp/exported" "$tmp/api" > "$tmp/missing"
report "$tmp/extra" "symbols exported by $lib that no public header declares with CHAM_API"
report "$tmp/missing" "CHAM_API declarations that $lib does not export"
report "$tmp/bare" "functions declared in include/chameleon/*.h without CHAM_API (not exported)"
[ "$fail" -eq 0 ] || exit 1
echo "export test: $(wc -l < "$tmp/exported") symbols exported, each declared with CHAM_API"
