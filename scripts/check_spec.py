#!/usr/bin/env python3
"""Checks that the code cites only rules the specification defines (docs/SPEC.md).

Usage: python3 scripts/check_spec.py [--issue-numbers] [--verbose] [--root DIR]

What it checks (stdlib only, no build, well under a second on this tree):

(a) Every rule id used anywhere in the repository is defined in docs/SPEC.md. A rule is
    defined by a heading `### S1: ...`; the families (S, D, T, ...) are the letters of the
    defined ids, so a new family is added by defining its first rule. A use is the id as a
    word (`S1`, `K4's`, `D1-D6`, `(T7)`) in any text file of the repository, or a prefix of
    a test function's name (`fn k1_k3_attempt_...` uses K1 and K3). Not uses: ids whose
    number starts with 0 (`T0`, `T00`), a `T` id followed by `:dd` (a time of day,
    `2026-12-02T10:00`), letters outside the defined families (the benchmark rows P1-P13
    are defined in BENCHMARKS.md, not here), and lines that contain `spec-check: ignore`.
    Files left out: anything git ignores, fuzz corpora, images and plots, lock files.
(b) The names the spec gives as its tests (backticked in a `- **Tested.**` item: a test
    function such as `k4_judge_win`, a glob such as `c1_*`, a path such as
    `core::attempt::tests::k3_*`, or a CamelCase name such as a mutant) exist in the Rust
    sources, so the spec cannot point at a test that was renamed or removed.
(c) Always: no tracker issue number in the rustdoc of the published library crates
    (`///`, `//!`, `/** */`, `#[doc = "..."]` under simba/src, simba-core/src,
    simba-macros/src, simba-rules/src): users read it on docs.rs.
(d) With --issue-numbers: no tracker issue number (`issue 12`, `issues 12 and 13`,
    `issue #12`, `(issue 38 item 4)`) in a Rust comment (`//`, `///`, `//!`, `/* */`,
    `#[doc = "..."]`) or in a Markdown document, except the history records: the ADRs
    (docs/adr/) and the logs (docs/log/), which are dated records where naming the work that
    led to a decision or a measurement is provenance. String literals and
    identifiers in code, and shell or TOML comments, are not checked.

(e) Always: the landing page and the guide stay a newcomer's documents: README.md has at most
    250 lines, and no code block of README.md or of a guide chapter (simba/src/guide/*.md,
    docs/guide/*.md) is marked `ignore` (their Rust blocks are doctests: `cargo test --doc`
    compiles them, `no_run` where they would connect or run forever), and neither names a
    tracker issue.

(f) Always: the two references, BENCHMARKS.md and RELIABILITY.md, stay references: at most 300
    lines each (the dated runs go to their logs, docs/log/benchmarks.md and
    docs/log/reliability.md) and no tracker issue number.

Output: one line per problem, `path:line: ...` naming the id or the text, then the summary
`spec check: N ids used, M defined, K undefined`. Exit status 1 when there is a problem, 2
when the spec cannot be read.
"""

from __future__ import annotations

import argparse
import bisect
import os
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

SPEC = "docs/SPEC.md"

# Documents exempt from the issue-number check (c): dated history records.
HISTORY = ("docs/adr/", "docs/log/")

# Never scanned: generated or binary files, fuzz inputs.
SKIP_PREFIXES = ("target/", "fuzz/corpus/", "fuzz/artifacts/", "fuzz/target/", ".git/")
SKIP_SUFFIXES = (
    ".png", ".jpg", ".jpeg", ".gif", ".ico", ".svg", ".pdf", ".lock", ".woff", ".woff2",
    ".ttf", ".gz", ".zip", ".db", ".db-wal", ".db-shm", ".der", ".p12",
)
IGNORE_MARK = "spec-check: ignore"

DEFINITION = re.compile(r"^###\s+([A-Z])([1-9][0-9]?):\s")
RULE_ID = re.compile(r"(?<![A-Za-z0-9_])([A-Z])([1-9][0-9]?)(?![A-Za-z0-9_])")
TEST_PREFIX = re.compile(r"\bfn\s+((?:[a-z][0-9]{1,2}_)+)")
TIME_OF_DAY = re.compile(r":[0-9]{2}")
ISSUE = re.compile(r"\bissues?\s+#?[0-9]+|\bissue\s*#[0-9]+", re.IGNORECASE)

# The landing page and the guide (check (e)).
README = "README.md"
README_MAX_LINES = 250
GUIDE_PREFIXES = ("simba/src/guide/", "docs/guide/")
FENCE = re.compile(r"^\s*(?:```|~~~)+\s*([^\n`]*)$")

# The references (check (f)): current figures and goals; their dated runs are in docs/log/.
REFERENCES = {"BENCHMARKS.md": "docs/log/benchmarks.md", "RELIABILITY.md": "docs/log/reliability.md"}
REFERENCE_MAX_LINES = 300

# Rust lexing, just enough to tell comments from code and strings.
RUST_TOKEN = re.compile(
    r"""(?P<line>//[^\n]*)"""
    r"""|(?P<block>/\*)"""
    r"""|(?P<raw>\bb?r(?P<hashes>\#*)")"""
    r"""|(?P<str>\bb?"|")"""
    r"""|(?P<chr>'(?:\\(?:u\{[0-9A-Fa-f]{1,6}\}|x[0-9A-Fa-f]{2}|.)|[^'\\\n])')"""
)
STRING_BODY = re.compile(r'(?:[^"\\]|\\.)*"', re.DOTALL)
DOC_ATTR = re.compile(r"#!?\[\s*doc\s*=\s*$")

# What the spec's "Tested" items may name.
TESTED_ITEM = re.compile(r"^\s*[-*]\s+\*\*Tested\.?\*\*")
BACKTICKED = re.compile(r"`([^`\n]+)`")
SNAKE = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*::)*([a-z][a-z0-9]*(?:_[a-z0-9]+)+)(\*?)$|^(?:[A-Za-z_][A-Za-z0-9_]*::)*([a-z][a-z0-9]*_)\*$")
CAMEL = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*::)*([A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+)$")
FN_NAME = re.compile(r"\b(?:fn|macro_rules!)\s+([a-z_][a-z0-9_]*)")


def repo_files(root: Path) -> list[str]:
    """Every file git tracks or would track (not ignored), sorted; a walk without git."""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            check=True, capture_output=True,
        ).stdout
        names = {n for n in out.decode("utf-8", "replace").split("\0") if n}
    except (OSError, subprocess.CalledProcessError):
        names = set()
        for dirpath, dirnames, filenames in os.walk(root):
            rel = os.path.relpath(dirpath, root).replace(os.sep, "/")
            rel = "" if rel == "." else rel + "/"
            dirnames[:] = [d for d in dirnames if not (rel + d + "/").startswith(SKIP_PREFIXES) and not d.startswith(".")]
            names.update(rel + f for f in filenames)
    return sorted(n for n in names if not n.startswith(SKIP_PREFIXES) and not n.lower().endswith(SKIP_SUFFIXES))


def read_text(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except OSError:  # listed but deleted in the work tree
        return None
    if b"\0" in data:
        return None
    return data.decode("utf-8", "replace")


class Lines:
    """Line numbers of offsets in one text."""

    def __init__(self, text: str):
        self.starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def of(self, offset: int) -> int:
        return bisect.bisect_right(self.starts, offset)


def rust_comments(text: str):
    """(offset, text) of every comment of a Rust file, and of `#[doc = "..."]` strings."""
    pos, n = 0, len(text)
    while pos < n:
        m = RUST_TOKEN.search(text, pos)
        if not m:
            return
        kind, start = m.lastgroup, m.start()
        if kind == "line":
            yield start, m.group()
            pos = m.end()
        elif kind == "block":
            depth, i = 1, m.end()
            while depth and i < n:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
            yield start, text[start:i]
            pos = i
        elif kind in ("raw", "hashes"):
            close = '"' + (m.group("hashes") or "")
            end = text.find(close, m.end())
            end = n if end < 0 else end + len(close)
            if DOC_ATTR.search(text, max(0, start - 40), start):
                yield start, text[start:end]
            pos = end
        elif kind == "str":
            body = STRING_BODY.match(text, m.end())
            end = body.end() if body else n
            if DOC_ATTR.search(text, max(0, start - 40), start):
                yield start, text[start:end]
            pos = end
        else:  # a char literal
            pos = m.end()


def spec_definitions(spec_text: str, problems: list[str]) -> dict[str, int]:
    defined: dict[str, int] = {}
    for no, line in enumerate(spec_text.splitlines(), 1):
        m = DEFINITION.match(line)
        if m:
            rid = m.group(1) + m.group(2)
            if rid in defined:
                problems.append(f"{SPEC}:{no}: rule id {rid} defined twice (first at line {defined[rid]})")
            else:
                defined[rid] = no
    return defined


def id_uses(path: str, text: str, families: set[str], uses: dict[str, list[tuple[str, int]]]) -> None:
    lines = text.splitlines()
    for no, line in enumerate(lines, 1):
        if IGNORE_MARK in line:
            continue
        for m in RULE_ID.finditer(line):
            fam = m.group(1)
            if fam not in families:
                continue
            if fam == "T" and TIME_OF_DAY.match(line, m.end()):
                continue
            uses[fam + m.group(2)].append((path, no))
        if path.endswith(".rs"):
            for m in TEST_PREFIX.finditer(line):
                for part in m.group(1).rstrip("_").split("_"):
                    if part[0].upper() in families and part[1] != "0":
                        uses[part.upper()].append((path, no))


def tested_names(spec_text: str):
    """(line, name) of every backticked name in the spec's `- **Tested.**` items."""
    inside = False
    for no, line in enumerate(spec_text.splitlines(), 1):
        if TESTED_ITEM.match(line):
            inside = True
        elif not line.strip() or re.match(r"^\s*[-*]\s|^#", line):
            inside = False
        if inside:
            for m in BACKTICKED.finditer(line):
                yield no, m.group(1).strip()


def check_tested(spec_text: str, rust_texts: list[str], problems: list[str]) -> int:
    fns: set[str] = set()
    for t in rust_texts:
        fns.update(FN_NAME.findall(t))
    words: set[str] | None = None
    checked = 0
    for no, name in tested_names(spec_text):
        snake, camel = SNAKE.match(name), CAMEL.match(name)
        if snake:
            checked += 1
            if snake.group(3):  # `k3_*` : a prefix
                base, glob = snake.group(3), True
            else:
                base, glob = snake.group(1), bool(snake.group(2))
            found = any(f.startswith(base) for f in fns) if glob else base in fns
            if not found:
                what = "no test function starts with" if glob else "no function named"
                problems.append(f"{SPEC}:{no}: `{name}` is given as a test, but {what} `{base}` in the Rust sources")
        elif camel:
            checked += 1
            if words is None:
                words = set()
                for t in rust_texts:
                    words.update(re.findall(r"\b[A-Z][A-Za-z0-9]+\b", t))
            if camel.group(1) not in words:
                problems.append(f"{SPEC}:{no}: `{name}` is given as a test, but `{camel.group(1)}` is not in the Rust sources")
    return checked


def issue_numbers(path: str, text: str, found: list[tuple[str, int, str]]) -> None:
    if path.endswith(".rs"):
        lines = Lines(text)
        for offset, comment in rust_comments(text):
            for m in ISSUE.finditer(comment):
                found.append((path, lines.of(offset + m.start()), m.group()))
    else:
        for no, line in enumerate(text.splitlines(), 1):
            for m in ISSUE.finditer(line):
                found.append((path, no, m.group()))


#: The published library crates: their rustdoc (`///`, `//!`, `/** */`, `#[doc]`) names no tracker
#: issue number, always (the users read it on docs.rs; the tracker is not theirs).
LIBRARY_SOURCES = ("simba/src/", "simba-core/src/", "simba-macros/src/", "simba-rules/src/")


def rustdoc_issue_numbers(path: str, text: str, problems: list[str]) -> None:
    lines = Lines(text)
    for offset, comment in rust_comments(text):
        is_doc = comment.startswith(("///", "//!", "/**", "/*!")) or not comment.startswith("/")
        if not is_doc:
            continue
        for m in ISSUE.finditer(comment):
            problems.append(
                f"{path}:{lines.of(offset + m.start())}: tracker issue number `{m.group()}` in rustdoc: "
                "say what it stood for, or cite a rule of docs/SPEC.md or an ADR"
            )


def docs_shape(path: str, text: str, problems: list[str]) -> None:
    """Check (e) for README.md and the guide's chapters."""
    if path == README:
        lines = text.count("\n") + (0 if text.endswith("\n") else 1)
        if lines > README_MAX_LINES:
            problems.append(
                f"{path}:{lines}: {lines} lines, more than {README_MAX_LINES}: README.md is the landing page, "
                f"move the details into a guide chapter (simba/src/guide/)"
            )
    for no, line in enumerate(text.splitlines(), 1):
        fence = FENCE.match(line)
        if fence and "ignore" in [w.strip() for w in fence.group(1).split(",")]:
            problems.append(
                f"{path}:{no}: a code block marked `ignore`: make it a doctest that compiles (hidden `# ` setup "
                f"lines, `no_run` where it would connect to a server or run forever)"
            )
        issue = ISSUE.search(line)
        if issue:
            problems.append(f"{path}:{no}: tracker issue number `{issue.group(0)}` in a user document")


def reference_shape(path: str, text: str, problems: list[str]) -> None:
    """Check (f) for BENCHMARKS.md and RELIABILITY.md."""
    lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    if lines > REFERENCE_MAX_LINES:
        problems.append(
            f"{path}:{lines}: {lines} lines, more than {REFERENCE_MAX_LINES}: {path} is the current reference "
            f"(latest figures, their commands and commits, the goals); move dated runs to {REFERENCES[path]}"
        )
    for no, line in enumerate(text.splitlines(), 1):
        issue = ISSUE.search(line)
        if issue:
            problems.append(f"{path}:{no}: tracker issue number `{issue.group(0)}` in a reference (the log may name it)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--issue-numbers", action="store_true",
                    help="also fail on tracker issue numbers in Rust comments and Markdown docs (history records exempt)")
    ap.add_argument("--verbose", action="store_true", help="list every id with its number of citations")
    ap.add_argument("--root", default=str(Path(__file__).resolve().parent.parent), help="the repository (default: this script's)")
    args = ap.parse_args()
    root = Path(args.root)

    spec_text = read_text(root / SPEC)
    if spec_text is None:
        print(f"spec check: cannot read {SPEC} under {root}", file=sys.stderr)
        return 2
    problems: list[str] = []
    defined = spec_definitions(spec_text, problems)
    families = {rid[0] for rid in defined}

    uses: dict[str, list[tuple[str, int]]] = defaultdict(list)
    spec_refs: dict[str, list[tuple[str, int]]] = defaultdict(list)  # the spec citing itself
    rust_texts: list[str] = []
    issues: list[tuple[str, int, str]] = []
    exempt: Counter[str] = Counter()
    for path in repo_files(root):
        text = read_text(root / path)
        if text is None:
            continue
        id_uses(path, text, families, spec_refs if path == SPEC else uses)
        if path == README or (path.startswith(GUIDE_PREFIXES) and path.endswith(".md")):
            docs_shape(path, text, problems)
        if path in REFERENCES:
            reference_shape(path, text, problems)
        if path.endswith(".rs"):
            rust_texts.append(text)
            if path.startswith(LIBRARY_SOURCES):
                rustdoc_issue_numbers(path, text, problems)
        if args.issue_numbers and path.endswith((".rs", ".md")):
            if path.startswith(HISTORY):
                exempt[path] += len(ISSUE.findall(text))
            else:
                issue_numbers(path, text, issues)

    undefined = sorted((rid for rid in uses if rid not in defined), key=lambda r: (r[0], int(r[1:])))
    for rid in undefined:
        for path, no in uses[rid]:
            problems.append(f"{path}:{no}: rule id {rid} is used but not defined in {SPEC}")
    for rid in sorted(set(spec_refs) - set(defined), key=lambda r: (r[0], int(r[1:]))):
        for path, no in spec_refs[rid]:
            problems.append(f"{path}:{no}: rule id {rid} is cited by the spec but not defined in it")
    tested = check_tested(spec_text, rust_texts, problems)

    for p in problems:
        print(p)
    if args.issue_numbers:
        for path, no, text in issues:
            print(f"{path}:{no}: tracker issue number `{text}` in a comment or doc")
        if issues:
            print(f"(say what the number stood for, or point at a rule of {SPEC} or an ADR: the tracker is not in the repository)")
            per_file = Counter(path for path, _, _ in issues)
            print(f"issue numbers by file ({len(issues)} in {len(per_file)} files):")
            for path, count in sorted(per_file.items(), key=lambda kv: (-kv[1], kv[0])):
                print(f"  {count:4}  {path}")
        print(f"(not checked: {sum(exempt.values())} issue numbers in the history records {', '.join(HISTORY)})")

    if args.verbose:
        for rid in sorted(set(defined) | set(uses), key=lambda r: (r[0], int(r[1:]))):
            files = len({p for p, _ in uses.get(rid, [])})
            state = "" if rid in defined else "  UNDEFINED"
            print(f"  {rid:4} {len(uses.get(rid, [])):4} citations in {files:3} files{state}")
        unused = [rid for rid in defined if rid not in uses]
        print(f"defined, cited only by the spec itself or not at all: {' '.join(unused) or 'none'}")
        print(f"names given as tests and found: {tested}")

    used = set(uses)
    print(f"spec check: {len(used)} ids used, {len(defined)} defined, {len(undefined)} undefined")
    if args.issue_numbers:
        print(f"spec check: {len(issues)} tracker issue numbers in comments and docs")
    return 1 if problems or (args.issue_numbers and issues) else 0


if __name__ == "__main__":
    sys.exit(main())
