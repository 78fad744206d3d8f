#!/usr/bin/env python3
"""Keeps the command output quoted in README.md and docs/ true: each quoted
block is generated from the command that prints it, and --check fails when
a block no longer matches (tests/test_docs.sh runs it).

A block is marked by an HTML comment right above its fenced code block:

    <!-- output of: build/chameleon simulate --model llama2-7b --steps 60
         keep: 1-3 ... 9-10 21 ... 40-
         measured -->
    ```
    ...the output...
    ```

  output of:  a shell command run from the repository's root (bash); several
              lines of commands run one after another, their output joined.
              `build/` at the start of a word is the build directory
              (--build), so the test runs the build it made.
  keep:       which lines of the output the block quotes, 1-based: "a-b",
              "a-" (to the end), "a", and "..." for a line of its own
              saying lines were left out (default: all of them).
  stderr:     the block quotes the command's standard error too (2>&1).
  measured:   the output is wall-clock time (or depends on the machine):
              --check leaves the block alone; --update still writes it.
  slow:       the command takes minutes (a long run, a benchmark, an
              experiment): --check and --update leave the block alone
              unless --slow is given (`make check-docs-slow`), so
              tests/test_docs.sh stays within the suite's time.

Figures quoted in prose or in a markdown table are marked the same way,
right above the paragraph or table (the lines up to the next blank line):

    <!-- figures of: build/chameleon check
         figures: 17.244 ms; 3.2 ms -->
    ...a paragraph that quotes 17.244 ms and 3.2 ms...

  figures of: the command that prints them, as for "output of:".
  figures:    the figures, separated by ";", each as the command prints it:
              each must be in the paragraph and in the command's output
              (runs of spaces and line breaks count as one space). --check
              fails on one that is not; --update cannot rewrite prose and
              fails the same way. Measured figures are never run.

    scripts/doc-blocks.py --check [--slow] [--build DIR] FILE...
    scripts/doc-blocks.py --update [--slow] [--build DIR] FILE...
"""
import argparse
import difflib
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
MARK = re.compile(r"<!-- output of:(?P<head>.*?)-->\n(?P<fence>```[^\n]*\n)(?P<body>.*?)^```",
                  re.S | re.M)
# Several "figures of:" markers may stand above one paragraph (a measured
# and a slow one): each marker's body skips the markers below it.
FIGURES = re.compile(r"<!-- figures of:(?P<head>.*?)-->\n"
                     r"(?=(?:<!-- figures of:.*?-->\n)*(?P<body>(?:[^\n]*\S[^\n]*\n)+))", re.S)


class Block:
    def __init__(self, path, match):
        self.path, self.match = path, match
        self.line = match.string.count("\n", 0, match.start()) + 1
        self.commands, self.keep, self.stderr, self.measured = [], None, False, False
        self.slow = False
        self.figures = None
        for raw in match.group("head").strip().split("\n"):
            text = raw.strip()
            if text.startswith("figures:"):
                self.figures = [f.strip() for f in text[len("figures:"):].split(";")
                                if f.strip()]
            elif text.startswith("keep:"):
                self.keep = text[len("keep:"):].split()
            elif text == "stderr":
                self.stderr = True
            elif text == "measured":
                self.measured = True
            elif text == "slow":
                self.slow = True
            elif self.commands and self.commands[-1].endswith("\\"):
                self.commands[-1] = self.commands[-1][:-1].rstrip() + " " + text
            else:
                self.commands.append(text)
        if not self.commands:
            self.fail("the marker names no command")
        if (self.figures is not None) != (match.re is FIGURES) or self.figures == []:
            self.fail("a \"figures of:\" marker lists its figures (figures: A; B), an "
                      "\"output of:\" marker none")

    def where(self):
        return f"{self.path}:{self.line}"

    def fail(self, why):
        sys.exit(f"{self.where()}: {why}")

    printed = {}          # (command, stderr) -> its output: a command runs once

    def run(self, build):
        out = []
        for cmd in self.commands:
            cmd = re.sub(r"(?<![\w/.-])build/", build.rstrip("/") + "/", cmd)
            key = (cmd, self.stderr)
            if key not in Block.printed:
                r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=ROOT, text=True,
                                   stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT if self.stderr else subprocess.PIPE)
                if r.returncode != 0 and not self.stderr:
                    self.fail(f"`{cmd}` exited with {r.returncode}:\n{r.stderr}")
                # Paths in the build directory print as the doc's build/.
                Block.printed[key] = r.stdout.replace(build.rstrip("/") + "/", "build/")
            out.extend(Block.printed[key].splitlines())
        return "".join(line.rstrip() + "\n" for line in self.kept(out))

    def kept(self, lines):
        if self.keep is None:
            return lines
        picked = []
        for spec in self.keep:
            if spec == "...":
                picked.append("...")
                continue
            m = re.fullmatch(r"(\d+)(-(\d*))?", spec)
            if not m:
                self.fail(f"keep: {spec!r} is not a line, a range a-b or a-, or ...")
            first = int(m.group(1))
            last = first if m.group(2) is None else int(m.group(3) or len(lines))
            if first < 1 or last > len(lines) or first > last:
                self.fail(f"keep: {spec} is outside the output's {len(lines)} lines")
            picked.extend(lines[first - 1:last])
        return picked

    def missing_figures(self, build):
        """The figures the paragraph or the command's output no longer has."""
        def flat(text):
            return " ".join(text.split())

        def has(text, figure):       # whole: 3.2 is not in 13.2, 3.25 or 3.2.1
            return re.search(r"(?<![\w.])" + re.escape(flat(figure)) + r"(?!\w|\.\d)", text)
        said, printed = flat(self.match.group("body")), flat(self.run(build))
        return [f"{f!r} is not in the {'paragraph' if not has(said, f) else 'output'}"
                for f in self.figures if not has(said, f) or not has(printed, f)]


def blocks(path, mark=MARK):
    text = path.read_text()
    return text, [Block(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path, m)
                  for m in mark.finditer(text)]


def check_figures(path, build, slow):
    """(figure blocks checked, stale), printing what no longer holds. Measured
    figures are not checked, by --update either: it cannot rewrite prose."""
    checked = stale = 0
    for b in blocks(path, FIGURES)[1]:
        if b.measured or b.slow and not slow:
            continue
        checked += 1
        missing = b.missing_figures(build)
        if missing:
            stale += 1
            print(f"{b.where()}: figures no longer quoted as the command prints them:\n  " +
                  "\n  ".join(missing))
    return checked, stale


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true")
    mode.add_argument("--update", action="store_true")
    ap.add_argument("--build", default=str(ROOT / "build"),
                    help="the build directory `build/` in a command means")
    ap.add_argument("--slow", action="store_true",
                    help="also the blocks marked slow (commands that take minutes)")
    ap.add_argument("files", nargs="+", type=pathlib.Path)
    a = ap.parse_args()
    stale = checked = figures = wrong = 0
    for path in a.files:
        path = path.resolve()
        text, found = blocks(path)
        pieces, at = [], 0
        for b in found:
            if a.check and b.measured or b.slow and not a.slow:
                pieces.append(text[at:b.match.end("body")])
                at = b.match.end("body")
                continue
            want = b.run(a.build)
            have = b.match.group("body")
            checked += 1
            if want != have:
                stale += 1
                if a.check:
                    diff = difflib.unified_diff(have.splitlines(), want.splitlines(),
                                                "quoted", "printed now", lineterm="", n=1)
                    print(f"{b.where()}: the block no longer matches its command:\n  " +
                          "\n  ".join(diff))
            pieces.append(text[at:b.match.start("body")] + want)
            at = b.match.end("body")
        if a.update and found:
            path.write_text("".join(pieces) + text[at:])
        checked_f, stale_f = check_figures(path, a.build, a.slow)
        figures, wrong = figures + checked_f, wrong + stale_f
    verb = "stale" if a.check else "rewritten"
    print(f"doc-blocks: {checked} blocks, {stale} {verb}; {figures} paragraphs of figures, "
          f"{wrong} stale")
    return 1 if (a.check and stale) or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
