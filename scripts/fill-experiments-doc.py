#!/usr/bin/env python3
"""Fills docs/experiments.md from docs/experiments.md.in: each {{NAME}} becomes
the table that `scripts/run-experiments.sh` printed into
docs/experiments/NAME.txt (in a code block)."""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
docs = root / "docs"
text = (docs / "experiments.md.in").read_text()


def table(match):
    name = match.group(1)
    path = docs / "experiments" / f"{name}.txt"
    if not path.exists():
        sys.exit(f"{path}: missing; run scripts/run-experiments.sh first")
    return "```\n" + path.read_text().strip("\n") + "\n```"


(docs / "experiments.md").write_text(re.sub(r"\{\{([a-z-]+)\}\}", table, text))
