#!/usr/bin/env bash
# The docs cannot go stale unnoticed: every command output quoted in
# README.md and docs/ under an "output of:" marker is printed again by the
# build and compared, and every figure quoted in prose or a table under a
# "figures of:" marker must still be printed by its command
# (scripts/doc-blocks.py; measured ones excepted, and slow ones, which
# `make check-docs-slow` checks), and
# every section cited and every `chameleon COMMAND` named exists
# (scripts/doc-refs.py). After a change that moves a quoted block:
# scripts/doc-blocks.py --update README.md docs/*.md
# Usage: test_docs.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
command -v python3 >/dev/null || { echo "test_docs: no python3" >&2; exit 77; }
status=0
python3 "$src/scripts/doc-refs.py" --build "$build" || status=1
python3 "$src/scripts/doc-blocks.py" --check --build "$build" "$src/README.md" "$src"/docs/*.md ||
  status=1
exit $status
