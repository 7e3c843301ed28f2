#!/usr/bin/env bash
# The project's one test command (README.md, .ci/run): formatting, lints, private test servers
# (PostgreSQL, MariaDB, Redis, ZooKeeper, etcd: installed if missing, started on loopback), headless
# Chromium for the dashboard's browser tests (installed if missing), every test, then the
# servers are stopped again.
set -euo pipefail
cd "$(dirname "$0")/.."

# Before anything builds: the etcd feature's build script needs protoc (backends.sh installs it
# with the servers).
bash scripts/backends.sh install

cargo fmt --all -- --check
# Every rule id the code cites is defined in docs/SPEC.md (no build needed).
python3 scripts/check_spec.py
cargo clippy --workspace --all-targets --all-features -- -D warnings
# The packages crates.io would receive (the publishable members; `publish = false` ones are
# skipped): manifests, metadata, the files each package holds, its lockfile. Only the small
# crates are also built from their packaged sources: verifying `simba-sched` rebuilds sqlx and
# the rest with its default features, 5-6 min here (2 cores) against a ~45 min budget, so it is
# packaged with --no-verify, and so is the tool (`simba-sched-cli`, five backends by default).
# --allow-dirty: the command runs on working trees.
cargo publish --workspace --dry-run --allow-dirty --no-verify
cargo publish --dry-run --allow-dirty -p simba-sched-rules -p simba-sched-macros -p simba-sched-core
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -p simba-sched -p simba-sched-core -p simba-sched-macros -p simba-sched-cli --all-features
# The tool's default features build without protoc (only its opt-in `etcd` feature needs it):
# `cargo install simba-sched-cli` works on a machine that has none.
PROTOC=/nonexistent cargo check -q -p simba-sched-cli --bin simba

# A failed command substitution inside `eval "$(...)"` does not stop `set -e`: capture first,
# so a server that does not start stops the test command here.
trap 'bash scripts/backends.sh stop >/dev/null 2>&1 || true' EXIT
servers_env=$(bash scripts/backends.sh start)
eval "$servers_env"
# The replicated stores (a 3-member etcd cluster, a 3-server ZooKeeper ensemble; ADR 0029):
# `stop` above stops them too.
replicated_env=$(bash scripts/backends.sh start-replicated)
eval "$replicated_env"
browser_env=$(bash scripts/browser.sh install)
eval "$browser_env"
# Every backend test runs: one whose server is missing fails instead of printing SKIPPED.
export CI=true

# The fault suite's tables (faults by kind, worst time back to a leader) go to a file, printed
# at the end: cargo shows a passing test's output only with --nocapture.
report=$PWD/target/faults-report.md
mkdir -p target && rm -f "$report"
status=0
SIMBA_RELIABILITY_OUT=$report cargo test --workspace --all-features --no-fail-fast || status=$?
if [[ -f $report ]]; then
  echo "== fault suite report ($report)"
  cat "$report"
fi
exit "$status"
