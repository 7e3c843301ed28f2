#!/usr/bin/env bash
# The project's benchmark command: starts the private test servers (scripts/backends.sh),
# builds simba-bench in release, runs P1-P14 (BENCHMARKS.md explains them), writes the run's
# report, target/bench/BENCHMARKS.md and target/bench/benches/*.svg, then stops the servers.
# BENCHMARKS.md at the repository root is the reference: its tables are copied from a report,
# each naming the commit it was measured at (the dated runs: docs/log/benchmarks.md).
#
#   bash scripts/bench.sh                      # full run, about 35 min on 2 cores from a fresh clone
#   SIMBA_BENCH_QUICK=1 bash scripts/bench.sh  # smoke run with small sizes, ~2 min
#   bash scripts/bench.sh --only p2,p4         # some measures only (arguments go to simba-bench)
#   bash scripts/bench.sh --only p5,p6 --out target/bench-p5p6   # P5 and P6 only; the partial
#                                              # report goes to that directory
#   ... --backends sqlite,postgres,redis       # P5 and P6 on some backends only (or SIMBA_BENCH_BACKENDS)
#   SIMBA_BENCH_P5_SLOTS=100                   # P5 slots per backend (full: 60, quick: 10)
#   SIMBA_BENCH_P6_RENEW_MS=5000,600           # P6 renewal periods (default 5000: the default timing)
#   bash scripts/bench.sh --only p14 --backends postgres,redis   # schedules at scale, ~5 min per store
#   SIMBA_BENCH_P14_SCHEDULES=100000 SIMBA_BENCH_P14_HOT=2500     # P14's sizes (quick: 2,000 and 200);
#   SIMBA_BENCH_P14_SCHEDULES_SQLITE=20000     # one store's size (the stores that cannot hold 100,000)
#   bash scripts/bench.sh --only p14-heap      # P14's node heap per schedule alone, in process, ~20 s
#   SIMBA_BENCH_P14_HEAP_SCHEDULES=20000       # its size (quick: 2,000)
#   SIMBA_BACKENDS_PORT_OFFSET=600             # a second set of servers (backends.sh), e.g. beside a
#                                              # checkout whose servers run at the default ports
#
# Servers already started with `eval "$(bash scripts/backends.sh start)"` are reused
# (backends.sh start is idempotent) and are stopped at the end only if this script started them.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS

was_running=0
if bash scripts/backends.sh status 2>/dev/null | awk 'NR > 1 && $4 == "yes" { f = 1 } END { exit !f }'; then was_running=1; fi
eval "$(bash scripts/backends.sh start)"
if (( was_running == 0 )); then
  trap 'bash scripts/backends.sh stop >/dev/null 2>&1 || true' EXIT
fi

cargo build --release -p simba-bench
bin=${CARGO_TARGET_DIR:-target}/release/simba-bench
# What the report says the command spent before the measures (servers, build).
export SIMBA_BENCH_SETUP_SECS=$((SECONDS - started))
# A hard bound on the run. The full measures took 581 s before issue 15 added P5 per backend
# (6 quiet phases of 60 s), P6 at 1,024 partitions, P8, P9 (60 s per backend), P10 and P11; on
# 3 December 2026 they reached P11, the last, after 1,800 s, the bound this line had then, and
# were cut without a report. An hour leaves room on a slower or busier machine.
timeout "${SIMBA_BENCH_TIMEOUT:-3600}" "$bin" --out target/bench "$@"
echo "bench.sh: done in $((SECONDS - started)) s (the report: target/bench/BENCHMARKS.md, or the --out given)"
