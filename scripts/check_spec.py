#!/usr/bin/env python3
"""Checks that the code cites only rules the specification defines (docs/SPEC.md).

Usage: python3 scripts/check_spec.py [--issue-numbers] [--verbose] [--root DIR]

What it checks (the standard library, and PyYAML for (g); no build; about a second on this tree):

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

(g) Always: the deployment files say what the code does (PyYAML reads them; without it the
    check fails, naming the package). deploy/kubernetes/simba-service.yaml: 3 replicas; the
    probes are the mount point of examples/service.rs plus the paths the dashboard router
    serves, and its test requests them; the container port is SERVICE_LISTEN's, the probes'
    and the Service's; the backend URL comes from the Secret of secret.example.yaml;
    terminationGracePeriodSeconds is longer than preStop. deploy/docker-compose.yml: 3
    replicas of deploy/Dockerfile's service on its PostgreSQL. scripts/docker-compose.yml: the
    servers of scripts/backends.sh on its default ports with its settings, and
    scripts/compose.env exports the URLs backends.sh would, under names the tests read. Every
    `SIMBA_<TABLE>__<KEY>` variable in them is a key of examples/simba.toml.

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


def line_limit(path: str, text: str, limit: int, advice: str, problems: list[str]) -> None:
    """A document longer than `limit` lines is a problem, with `advice` on where the rest goes."""
    lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    if lines > limit:
        problems.append(f"{path}:{lines}: {lines} lines, more than {limit}: {advice}")


def no_issue_numbers(path: str, text: str, where: str, problems: list[str]) -> None:
    for no, line in enumerate(text.splitlines(), 1):
        issue = ISSUE.search(line)
        if issue:
            problems.append(f"{path}:{no}: tracker issue number `{issue.group(0)}` in {where}")


def docs_shape(path: str, text: str, problems: list[str]) -> None:
    """Check (e) for README.md and the guide's chapters."""
    if path == README:
        line_limit(path, text, README_MAX_LINES,
                   "README.md is the landing page, move the details into a guide chapter (simba/src/guide/)", problems)
    for no, line in enumerate(text.splitlines(), 1):
        fence = FENCE.match(line)
        if fence and "ignore" in [w.strip() for w in fence.group(1).split(",")]:
            problems.append(
                f"{path}:{no}: a code block marked `ignore`: make it a doctest that compiles (hidden `# ` setup "
                f"lines, `no_run` where it would connect to a server or run forever)"
            )
    no_issue_numbers(path, text, "a user document", problems)


def reference_shape(path: str, text: str, problems: list[str]) -> None:
    """Check (f) for BENCHMARKS.md and RELIABILITY.md."""
    line_limit(path, text, REFERENCE_MAX_LINES,
               f"{path} is the current reference (latest figures, their commands and commits, the goals); "
               f"move dated runs to {REFERENCES[path]}", problems)
    no_issue_numbers(path, text, "a reference (the log may name it)", problems)


def yaml_docs(root: Path, path: str, problems: list[str]) -> list:
    try:
        import yaml  # PyYAML: Debian python3-yaml, or pip install pyyaml
    except ImportError:
        problems.append(f"{path}:1: cannot check it: PyYAML is missing (Debian: apt-get install python3-yaml)")
        return []
    text = read_text(root / path)
    if text is None:
        problems.append(f"{path}:1: missing")
        return []
    try:
        return [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as e:
        problems.append(f"{path}:1: not valid YAML: {e}")
        return []


def config_keys(root: Path) -> dict:
    import tomllib
    with open(root / "examples/simba.toml", "rb") as f:
        return tomllib.load(f)


def env_names_known(root: Path, path: str, names, problems: list[str]) -> None:
    """Every `SIMBA_<TABLE>__<KEY>` name is a key of examples/simba.toml (which lists every key)."""
    keys = config_keys(root)
    for name in names:
        if not (name.startswith("SIMBA_") and "__" in name) or name.startswith("SIMBA_TEST_"):
            continue
        node = keys
        for part in name[len("SIMBA_"):].lower().split("__"):
            node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            problems.append(f"{path}:1: {name} names no key of examples/simba.toml: the runtime would refuse it")


def listen_port(value: str) -> int:
    return int(value.rsplit(":", 1)[1])


def k8s_container(docs, problems: list[str], path: str):
    kinds = {d.get("kind"): d for d in docs}
    for kind in ("Deployment", "Service", "PodDisruptionBudget"):
        if kind not in kinds:
            problems.append(f"{path}:1: no {kind}")
    dep = kinds.get("Deployment") or {}
    if dep.get("spec", {}).get("replicas") != 3:
        problems.append(f"{path}:1: the Deployment runs {dep.get('spec', {}).get('replicas')} replicas, not 3")
    pod = dep.get("spec", {}).get("template", {}).get("spec", {})
    containers = pod.get("containers") or [{}]
    return kinds, pod, containers[0]


def check_k8s(root: Path, problems: list[str]) -> None:
    path = "deploy/kubernetes/simba-service.yaml"
    docs = yaml_docs(root, path, problems)
    if not docs:
        return
    kinds, pod, c = k8s_container(docs, problems, path)
    env = {e["name"]: e for e in c.get("env", [])}
    env_names_known(root, path, env, problems)
    service_rs = read_text(root / "examples/service.rs") or ""
    mount = re.search(r'\.nest\("(/[^"]*)"', service_rs)
    router = read_text(root / "simba/src/dashboard/http.rs") or ""
    for probe, route in (("livenessProbe", "/livez"), ("readinessProbe", "/readyz")):
        got = c.get(probe, {}).get("httpGet", {}).get("path")
        want = (mount.group(1) if mount else "?") + route
        if got != want or f'.route("{route}"' not in router or f'"GET", "{want}"' not in service_rs:
            problems.append(f"{path}:1: {probe} path {got}: want {want}, served by the dashboard router and requested by the service example's test")
    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
    listen = env.get("SERVICE_LISTEN", {}).get("value", ":0")
    if ports.get("http") != listen_port(listen) or '"SERVICE_LISTEN"' not in service_rs:
        problems.append(f"{path}:1: containerPort http {ports.get('http')} is not SERVICE_LISTEN's ({listen})")
    for probe in ("livenessProbe", "readinessProbe"):
        if c.get(probe, {}).get("httpGet", {}).get("port") not in ("http", ports.get("http")):
            problems.append(f"{path}:1: {probe} asks another port than the container's")
    svc_ports = kinds.get("Service", {}).get("spec", {}).get("ports", [{}])
    if any(p.get("targetPort") not in ("http", ports.get("http")) for p in svc_ports):
        problems.append(f"{path}:1: the Service targets another port than the container's")
    check_k8s_secret(root, path, env, problems)
    stop = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    pre = int(stop[1]) if len(stop) == 2 and stop[0] == "sleep" else 0
    if not pre or pod.get("terminationGracePeriodSeconds", 30) <= pre:
        problems.append(f"{path}:1: terminationGracePeriodSeconds must leave time after a preStop sleep")
    dockerfile = read_text(root / "deploy/Dockerfile") or ""
    if f"ENV SERVICE_LISTEN=0.0.0.0:{ports.get('http')}" not in dockerfile or f"EXPOSE {ports.get('http')}" not in dockerfile:
        problems.append(f"deploy/Dockerfile:1: SERVICE_LISTEN and EXPOSE are not the manifest's port {ports.get('http')}")


def check_k8s_secret(root: Path, path: str, env: dict, problems: list[str]) -> None:
    ref = env.get("SIMBA_BACKEND__URL", {}).get("valueFrom", {}).get("secretKeyRef", {})
    secrets = yaml_docs(root, "deploy/kubernetes/secret.example.yaml", problems)
    names = {(d.get("metadata", {}).get("name"), k) for d in secrets if d.get("kind") == "Secret" for k in d.get("stringData", {})}
    if (ref.get("name"), ref.get("key")) not in names:
        problems.append(f"{path}:1: SIMBA_BACKEND__URL does not come from the Secret of secret.example.yaml: {ref}")


def check_deploy_compose(root: Path, problems: list[str]) -> None:
    path = "deploy/docker-compose.yml"
    docs = yaml_docs(root, path, problems)
    services = docs[0].get("services", {}) if docs else {}
    replicas = {n: s for n, s in services.items() if s.get("build", {}).get("dockerfile") == "deploy/Dockerfile"}
    if docs and len(replicas) != 3:
        problems.append(f"{path}:1: {len(replicas)} replicas of deploy/Dockerfile's service, not 3")
    pg = services.get("postgres", {}).get("environment", {})
    want = f"postgres://{pg.get('POSTGRES_USER')}:{pg.get('POSTGRES_PASSWORD')}@postgres:5432/{pg.get('POSTGRES_DB')}"
    nodes, host_ports = set(), set()
    for name, s in replicas.items():
        env = s.get("environment", {})
        env_names_known(root, path, env, problems)
        if env.get("SIMBA_BACKEND__URL") != want:
            problems.append(f"{path}:1: {name}: SIMBA_BACKEND__URL is not the compose PostgreSQL ({want})")
        for mapping in s.get("ports", []):
            host, _, container = str(mapping).rpartition(":")
            host_ports.add(host)
            if int(container) != listen_port(env.get("SERVICE_LISTEN", ":0")):
                problems.append(f"{path}:1: {name} publishes {container}, not SERVICE_LISTEN's port")
        nodes.add(env.get("SIMBA_NODE"))
    if len(nodes) != len(replicas) or len(host_ports) != len(replicas):
        problems.append(f"{path}:1: the replicas need distinct SIMBA_NODE names and host ports")
    dockerfile = read_text(root / "deploy/Dockerfile") or ""
    if not re.search(r"--example service --features [a-z,]*\bpostgres\b", dockerfile):
        problems.append("deploy/Dockerfile:1: does not build the service example with the postgres feature")


def backends_defaults(text: str) -> tuple[dict, dict]:
    """backends.sh's default ports (by variable stem) and URL templates (by server name)."""
    ports = {m.group(1): int(m.group(2)) for m in re.finditer(r"^([A-Z_]+)_PORT=\$\{SIMBA_BACKENDS_\1_PORT:-\$\(\(OFF \+ (\d+)\)\)\}", text, re.M)}
    urls = {}
    for m in re.finditer(r'^\s+([a-z| -]+)\) echo "([a-z]+://[^"$]*\$p[^"]*)" ;;', text, re.M):
        for name in m.group(1).split("|"):
            urls[name.strip()] = m.group(2)
    return ports, urls


#: scripts/docker-compose.yml's settings that must be backends.sh's too (the flags as written there).
COMPOSE_SETTINGS = {
    "postgres": ["fsync=off", "synchronous_commit=off"],
    "redis": ["--maxmemory-policy noeviction"],
    "redis-evicting": ["--maxmemory 64mb --maxmemory-policy allkeys-lru"],
    "redis-persistent": ["--appendonly yes --appendfsync always"],
    "etcd": ["--heartbeat-interval=50 --election-timeout=500", "--unsafe-no-fsync"],
}


def check_test_compose(root: Path, problems: list[str]) -> None:
    path = "scripts/docker-compose.yml"
    docs = yaml_docs(root, path, problems)
    services = docs[0].get("services", {}) if docs else {}
    script = read_text(root / "scripts/backends.sh") or ""
    ports, urls = backends_defaults(script)
    exports = dict(re.findall(r"^export (\w+)=(\S+)$", read_text(root / "scripts/compose.env") or "", re.M))
    tests = "".join(read_text(root / p) or "" for p in repo_files(root) if p.startswith("tests/") and p.endswith(".rs"))
    for name, s in services.items():
        stem = name.upper().replace("-", "_")
        mapped = [str(m).split(":") for m in s.get("ports", [])]
        if not mapped or mapped[0][:2] != ["127.0.0.1", str(ports.get(stem))]:
            problems.append(f"{path}:1: {name} is published on {mapped}, not 127.0.0.1:{ports.get(stem)} as in backends.sh")
        text = str(s.get("command", "")) + str(s.get("environment", ""))
        for flag in COMPOSE_SETTINGS.get(name, []):
            if flag not in text or flag.split(" ")[0] not in script:
                problems.append(f"{path}:1: {name} lacks backends.sh's `{flag}`")
        var, url = f"SIMBA_TEST_{stem}_URL", urls.get(name, "?").replace("$p", str(ports.get(stem)))
        if exports.get(var) != url or var not in tests:
            problems.append(f"scripts/compose.env:1: {var} should be {url} (as backends.sh prints), read by a test")
    for zk, cap in (("zk", "ZK_MAX_SESSION_MS"), ("zk-capped", "ZK_CAPPED_MAX_SESSION_MS")):
        ms = re.search(rf"^{cap}=(?:\$\{{\w+:-)?(\d+)", script, re.M)
        extra = str(services.get(zk, {}).get("environment", {}).get("ZOO_CFG_EXTRA", ""))
        if not ms or f"maxSessionTimeout={ms.group(1)}" not in extra or exports.get(f"SIMBA_TEST_{cap}") != ms.group(1):
            problems.append(f"{path}:1: {zk}'s maxSessionTimeout and SIMBA_TEST_{cap} are not backends.sh's")


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
    check_k8s(root, problems)
    check_deploy_compose(root, problems)
    check_test_compose(root, problems)

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
