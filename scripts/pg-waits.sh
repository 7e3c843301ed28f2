#!/usr/bin/env bash
# What PostgreSQL's sessions wait on, sampled: every 100 ms for SECS seconds (default 25), each
# active session of the test server's database is one sample of (wait event type, wait event,
# the statement's first 80 characters). Prints the samples counted, most frequent first, so a
# benchmark's bottleneck (a row lock, the WAL, the client's round trips) shows by name.
#
#   bash scripts/pg-waits.sh [SECS]      # with the servers of `backends.sh start` running
#
# Run it beside a measure, e.g. `bash scripts/bench.sh --only p14 --backends postgres` (start
# it once the measure prints its window). A session with no wait event is on the CPU or waiting
# for its client (`ClientRead` is the client's round trip).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-25}
[[ $secs =~ ^[0-9]+$ ]] || { echo "pg-waits.sh: SECS must be a whole number of seconds, not '$secs'" >&2; exit 2; }
port=${SIMBA_BACKENDS_POSTGRES_PORT:-$((${SIMBA_BACKENDS_PORT_OFFSET:-0} + 55432))}
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)
[[ -x $bin/psql ]] || { echo "pg-waits.sh: no psql under /usr/lib/postgresql/*/bin: run scripts/backends.sh install" >&2; exit 1; }
"$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -XtAc 'select 1' >/dev/null 2>&1 \
  || { echo "pg-waits.sh: no PostgreSQL on 127.0.0.1:$port: start it with scripts/backends.sh start" >&2; exit 1; }
query="select coalesce(wait_event_type, '-') || ' ' || coalesce(wait_event, '-') || ' | ' ||
  regexp_replace(left(query, 80), '\s+', ' ', 'g')
  from pg_stat_activity where state = 'active' and pid <> pg_backend_pid() and datname = 'simba'"
samples=$(mktemp)
trap 'rm -f "$samples"' EXIT
# One session, the query run again every 100 ms (`\watch`) until the time is up.
printf '%s\n\\watch 0.1\n' "$query" \
  | timeout "$secs" "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -XtAq 2>/dev/null \
  | grep -v '^$' >"$samples" || true
echo "$(wc -l <"$samples") active-session samples in ${secs} s (port $port):"
sort "$samples" | uniq -c | sort -rn
