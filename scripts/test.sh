#!/usr/bin/env bash
# The project's one test command (README.md, .ci/run): formatting, lints, private test servers
# (PostgreSQL, MariaDB, Redis, ZooKeeper, etcd: installed if missing, started on loopback), headless
# Chromium for the dashboard's browser tests (installed if missing), every test, then the
# servers are stopped again.
#
# For the test command's own test (tests/tests/test_command/); unset in normal use:
#   SIMBA_TEST_BACKENDS_SCRIPT  the script run for the servers (default scripts/backends.sh)
#   SIMBA_TEST_BROWSER_SCRIPT   the script run for the browser (default scripts/browser.sh)
#   SIMBA_TEST_OUT_DIR          where the fault lane's log and report go (default target/), so
#                               that test, run by this command, leaves this run's files alone
set -euo pipefail
cd "$(dirname "$0")/.."
backends=${SIMBA_TEST_BACKENDS_SCRIPT:-scripts/backends.sh}
browser=${SIMBA_TEST_BROWSER_SCRIPT:-scripts/browser.sh}
out_dir=${SIMBA_TEST_OUT_DIR:-$PWD/target}

# Before anything builds: the etcd feature's build script needs protoc (backends.sh installs it
# with the servers).
bash "$backends" install

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

# Every test target is built once, before the servers start, so that both lanes below find it
# fresh.
cargo test --workspace --all-features --no-run

# Two lanes run at once, each against its own set of private servers (scripts/README.md):
# - the fault lane: the `faults` test binary (node processes, servers killed and paused, timed
#   failovers), on the default set and the replicated stores, at normal priority;
# - the other lane: every other test target and the doc tests, on a second set shifted 200
#   ports further, under `nice` with its servers, so the fault lane's timings keep the CPU they
#   had when it ran alone.
# The fault lane is the longest (about 23 of the 31 minutes the tests took one after the
# other); the other lane fits in its shadow.
others_offset=$((${SIMBA_BACKENDS_PORT_OFFSET:-0} + 200))
others_dir=$PWD/.backends-others
stop_servers() {
  bash "$backends" stop >/dev/null 2>&1 || true
  SIMBA_BACKENDS_PORT_OFFSET=$others_offset SIMBA_BACKENDS_DIR=$others_dir \
    bash "$backends" stop >/dev/null 2>&1 || true
}
# A failed command substitution inside `eval "$(...)"` does not stop `set -e`: capture first,
# so a server that does not start stops the test command here.
trap stop_servers EXIT
servers_env=$(bash "$backends" start)
# The replicated stores (a 3-member etcd cluster, a 3-server ZooKeeper ensemble; ADR 0029):
# `stop` above stops them too.
replicated_env=$(bash "$backends" start-replicated)
others_env=$(SIMBA_BACKENDS_PORT_OFFSET=$others_offset SIMBA_BACKENDS_DIR=$others_dir \
  nice -n 10 bash "$backends" start)
browser_env=$(bash "$browser" install)
eval "$browser_env"
# Every backend test runs: one whose server is missing fails instead of printing SKIPPED.
export CI=true

# The other lane's targets: what `cargo test` selects by default (every library, binary and
# test target whose `test` flag is on), but the `faults` test target.
other_targets=$(cargo metadata --no-deps --format-version 1 | python3 -c '
import json, sys
flags, tests = {"--lib"}, set()
for p in json.load(sys.stdin)["packages"]:
    for t in p["targets"]:
        if not t.get("test"):
            continue
        if "bin" in t["kind"]:
            flags.add("--bin " + t["name"])
        elif "test" in t["kind"]:
            tests.add(t["name"])
assert "faults" in tests, "the fault lane has no faults test target"
flags |= {"--test " + n for n in tests - {"faults"}}
print(" ".join(sorted(flags)))')

# The fault suite's tables (faults by kind, worst time back to a leader) go to a file, printed
# at the end: cargo shows a passing test's output only with --nocapture.
report=$out_dir/faults-report.md
fault_log=$out_dir/fault-lane.log
mkdir -p "$out_dir" && rm -f "$report" "$fault_log"
(
  eval "$servers_env"
  eval "$replicated_env"
  SIMBA_RELIABILITY_OUT=$report cargo test --workspace --all-features --no-fail-fast --test faults
) >"$fault_log" 2>&1 &
fault_pid=$!

status=0
(
  eval "$others_env"
  rc=0
  # shellcheck disable=SC2086 # one word per flag
  nice -n 10 cargo test --workspace --all-features --no-fail-fast $other_targets || rc=$?
  nice -n 10 cargo test --workspace --all-features --no-fail-fast --doc || rc=$?
  exit "$rc"
) || status=$?
echo "== the fault lane ($fault_log)"
tail -n +1 --pid="$fault_pid" -f "$fault_log"
wait "$fault_pid" || status=$?
if [[ -f $report ]]; then
  echo "== fault suite report ($report)"
  cat "$report"
fi
exit "$status"
