#!/usr/bin/env bash
# The build enforces the layers of src/ (CMakeLists.txt, CHAM_LAYERS): each
# module compiles against build/layers/<module>, which links only its own
# headers and those of the modules below it. For every module this compiles
# one line including a header of each other module (and of each planner's
# folder) against that tree, and fails when a header outside the layer is
# reachable (a back-edge would compile) or one inside it is not (the layer
# table and the tree disagree).
# Usage: test_layers.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
cc=${CC:-cc}
layers="$build/layers"
[ -d "$layers" ] || { echo "layers test: no $layers (configure the build)" >&2; exit 1; }
# "module:allowed,..." as CMakeLists.txt lists them.
table=$(sed -n '/^set(CHAM_LAYERS/,/)/p' "$src/CMakeLists.txt" | grep -o '"[^"]*"' | tr -d '"')
[ -n "$table" ] || { echo "layers test: no CHAM_LAYERS in $src/CMakeLists.txt" >&2; exit 1; }
modules=$(echo "$table" | cut -d: -f1)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0 checked=0
# One header of a module: the first in its folder.
header_of() { (cd "$src/src" && ls "$1"/*.h 2>/dev/null | head -1) || true; }
for row in $table; do
  module=${row%%:*}
  allowed=" $module $(echo "${row#*:}" | tr ',' ' ') "
  for other in $modules; do
    h=$(header_of "$other")
    [ -n "$h" ] || continue
    printf '#include "%s"\n' "$h" > "$tmp/t.c"
    if "$cc" -fsyntax-only -I "$src/include" -I "$layers/$module" "$tmp/t.c" 2>/dev/null; then
      reached=yes
    else
      reached=no
    fi
    # A planner's folder is a module of its own: src/policy (the planners'
    # shared layer) reaches none of them, each planner only its own.
    case "$allowed" in *" $other "*) want=yes ;; *) want=no ;; esac
    checked=$((checked + 1))
    if [ "$reached" != "$want" ]; then
      echo "layers: module $module $( [ "$want" = yes ] && echo "cannot include" || echo "can include") $h" >&2
      fail=1
    fi
  done
done
[ "$checked" -gt 100 ] || { echo "layers test: only $checked pairs checked" >&2; exit 1; }
[ "$fail" = 0 ] && echo "layers: $checked module pairs as CHAM_LAYERS says"
exit "$fail"
