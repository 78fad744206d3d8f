#!/usr/bin/env python3
"""Checks that what the docs and the code point a reader to exists
(tests/test_doc_blocks.sh runs it):

  - every section cited as `NAME.md, "Section"` (or `NAME.md "Section"`) in
    README.md, docs/, the CLI's sources and messages, the library's and the
    Python package's sources is a heading of docs/NAME.md (or the README);
  - every `chameleon COMMAND` in a doc's code (an inline code span or a
    fenced block) and in each command's --help names a command that
    `chameleon --help` lists;
  - each command's --help lists under --strategy the strategies the
    command runs, no more and no fewer (the ones it names when given an
    unknown one: tools/args.c reads them from the strategies' table).

    scripts/doc-refs.py [--build DIR]

Prints each broken reference with its file and line; exit status 1 if any.
"""
import argparse
import functools
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CITE = re.compile(r"\b([a-z][a-z-]*)\.md,? \"([^\"\n]{2,80})\"")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
# An invocation: code that starts with the command (after a prompt or a
# path); not a strategy named in a table's row.
COMMAND = re.compile(r"^\s*(?:\$ )?(?:[\w./-]*/)?chameleon ([a-z][a-z-]*)\b")
# Names that are not commands on purpose: cli.md's example of a misspelt
# one, and `demo`, the old name of `check`, kept for one release.
NOT_COMMANDS = {"simulat", "demo"}
SOURCES = ("README.md", "docs/*.md", "docs/*.md.in", "tools/*.c", "tools/*.h", "src/**/*.c",
           "src/**/*.h", "include/chameleon/*.h", "python/chameleon/*.py", "python/chameleon/*.c",
           "examples/**/*.c", "bench/*.c", "bench/*.py", "scripts/*.sh", "scripts/*.py", "Makefile")


def headings(name):
    path = ROOT / ("README.md" if name == "README" else f"docs/{name}.md")
    if not path.exists():
        return None
    found = set()
    for line in path.read_text().splitlines():
        # A heading, or a paragraph's run-in title: "**Title.** ..." or
        # "- *Title* (...)".
        m = re.match(r"#+\s+(?P<t>.*?)\s*$", line) or \
            re.match(r"\s*(?:[-*] )?(\*\*?)(?P<t>[^*]+?)\.?\1", line)
        if m:
            found.add(re.sub(r"[`*]", "", m.group("t")))
    return found


def cited(text, heads):
    """A citation names a heading, or its first words ("Cosine similarity"
    for "## Cosine similarity of two token sequences")."""
    return any(re.match(re.escape(text) + r"(?![\w'])", h) for h in heads)


def check_citations(fails):
    cache = {}
    for pattern in SOURCES:
        for path in sorted(ROOT.glob(pattern)):
            if path.name == "doc-refs.py":
                continue
            for no, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                for name, section in CITE.findall(line):
                    if name not in cache:
                        cache[name] = headings(name)
                    heads = cache[name]
                    where = f"{path.relative_to(ROOT)}:{no}"
                    if heads is None:
                        fails.append(f"{where}: cites {name}.md, which does not exist")
                    elif not cited(section, heads):
                        fails.append(f"{where}: cites {name}.md, \"{section}\": no such section")


@functools.lru_cache(maxsize=None)
def printed(build, *args):
    """(stdout, stderr) of `chameleon ARGS`, run once per arguments."""
    r = subprocess.run([f"{build}/chameleon", *args], text=True, capture_output=True)
    return r.stdout, r.stderr


def commands(build):
    listed = set(re.findall(r"^  ([a-z][a-z-]*)\s", "".join(printed(build, "--help")), re.M))
    if not listed:
        sys.exit(f"doc-refs: `{build}/chameleon --help` listed no commands")
    return listed


def code_of(text):
    """(line number, code) of a markdown text's code spans and fenced lines."""
    fenced = False
    for no, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            yield no, line
        else:
            for span in CODE_SPAN.findall(line):
                yield no, span


def check_commands(build, fails):
    known = commands(build)
    for path in [ROOT / "README.md"] + sorted(ROOT.glob("docs/*.md")):
        for no, code in code_of(path.read_text()):
            for word in COMMAND.findall(code):
                if word not in known and word not in NOT_COMMANDS:
                    fails.append(f"{path.relative_to(ROOT)}:{no}: `chameleon {word}`: no such "
                                 f"command (chameleon --help lists {', '.join(sorted(known))})")
    for cmd in sorted(known):
        for no, line in enumerate("".join(printed(build, cmd, "--help")).splitlines(), 1):
            for word in COMMAND.findall(line):
                if word not in known:
                    fails.append(f"chameleon {cmd} --help, line {no}: `chameleon {word}`: no "
                                 "such command")


def strategies_of(build, cmd):
    """(what `--strategy` runs, per the message for an unknown name; the
    names of known strategies in --help's --strategy paragraph), or None
    when the command has no --strategy."""
    m = re.search(r"--strategy must be (.*), got", printed(build, cmd, "--strategy", "?")[1])
    if not m:
        return None
    runs = set(re.split(r", | or ", m.group(1)))
    text = printed(build, cmd, "--help")[0]
    para = re.search(r"^ +--strategy NAME(.*?)(?=^ +--|\Z)", text, re.S | re.M)
    return runs, set(re.findall(r"[a-z][a-z-]*", para.group(1) if para else ""))


def check_strategies(build, fails):
    found = {c: strategies_of(build, c) for c in sorted(commands(build))}
    every = set().union(*(runs for runs, _ in filter(None, found.values())))
    for cmd, got in found.items():
        if got is None:
            continue
        runs, listed = got
        listed &= every
        for name in sorted(runs - listed):
            fails.append(f"chameleon {cmd} --help: --strategy does not list {name}, which "
                         "the command runs")
        for name in sorted(listed - runs):
            fails.append(f"chameleon {cmd} --help: --strategy lists {name}, which the "
                         "command refuses")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=str(ROOT / "build"))
    a = ap.parse_args()
    fails = []
    check_citations(fails)
    check_commands(a.build, fails)
    check_strategies(a.build, fails)
    for f in fails:
        print(f)
    print(f"doc-refs: {len(fails)} broken references")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
