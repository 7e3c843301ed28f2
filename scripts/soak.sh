#!/usr/bin/env bash
# The soak (issue 16 item 7; RELIABILITY.md, "Soak"): one node of `simba-soak-node` (release
# build) for SIMBA_SOAK_SECS (default 1800): a cron job every second, a 16-partition group that
# a second runtime joins and leaves every minute, 1,000 locks held throughout and a lock under a
# new name every 15 ms (about 120,000 names in 30 minutes). Samples its resident memory and
# open file descriptors every 10 s, prints them and a summary, and fails when memory grew by
# more than SIMBA_SOAK_MAX_GROWTH_PCT (default 2) percent from the fifth minute (or a sixth of
# a shorter run, at least its first two minutes or half; SIMBA_SOAK_WARMUP_SECS sets it) to the end, when descriptors grew, or when a
# held lock was lost. It also prints the growth over the second half of that window: a leak
# keeps its rate there, a bounded cache that is still filling (SQLite's page caches, 4 MiB at
# most) levels off.
#
# Metrics and the dashboard are on (rules O4, O5): the node serves `[metrics] listen` and
# `[dashboard] listen` on free ports, scrapes its own /metrics and reads /api/state at every
# sample, and the run fails when /metrics grew by more than SIMBA_SOAK_MAX_METRICS_GROWTH_PCT
# (default 5) percent over the same window. SIMBA_SOAK_LEASE_LABELS and SIMBA_SOAK_IDLE_TIMEOUT
# set `[metrics] lease_labels` and `idle_timeout` (defaults: the library's, "jobs" and 26h);
# SIMBA_SOAK_METRICS=off runs without either listener, SIMBA_SOAK_DASHBOARD=off without the
# dashboard only.
#
#   bash scripts/soak.sh                                  # SQLite in a temporary directory
#   SIMBA_SOAK_URL=redis://127.0.0.1:56379 bash scripts/soak.sh   # a running server
#   SIMBA_SOAK_ALLOC=mimalloc bash scripts/soak.sh        # the node on mimalloc, not glibc's malloc
#   SIMBA_SOAK_ALLOC=jemalloc bash scripts/soak.sh        # the node on jemalloc
#   SIMBA_SOAK_SECS=300 SIMBA_SOAK_PROFILE=debug bash scripts/soak.sh   # five minutes, debug build
#   SIMBA_SOAK_LEASE_LABELS=all SIMBA_SOAK_IDLE_TIMEOUT=60s bash scripts/soak.sh   # every lock by name
set -euo pipefail
# One brace group: bash reads all of it before it runs, so editing this file during a soak (hours
# long) cannot break the run's summary.
{
cd "$(dirname "$0")/.."
secs=${SIMBA_SOAK_SECS:-1800}
max_growth=${SIMBA_SOAK_MAX_GROWTH_PCT:-2}
warmup=${SIMBA_SOAK_WARMUP_SECS:-}
alloc=${SIMBA_SOAK_ALLOC:-glibc}
profile=${SIMBA_SOAK_PROFILE:-release}
max_metrics_growth=${SIMBA_SOAK_MAX_METRICS_GROWTH_PCT:-5}
with_metrics=${SIMBA_SOAK_METRICS:-on}
with_dashboard=${SIMBA_SOAK_DASHBOARD:-$with_metrics}
case $alloc in
  glibc) features=() ;;
  mimalloc) features=(--features mimalloc) ;;
  jemalloc) features=(--features jemalloc) ;;
  *) echo "soak: SIMBA_SOAK_ALLOC must be glibc, mimalloc or jemalloc, not '$alloc'" >&2; exit 2 ;;
esac
case $profile in
  release) profile_flag=(--release) ;;
  debug) profile_flag=() ;;
  *) echo "soak: SIMBA_SOAK_PROFILE must be release or debug, not '$profile'" >&2; exit 2 ;;
esac
case $with_metrics in on|off) ;; *) echo "soak: SIMBA_SOAK_METRICS must be on or off, not '$with_metrics'" >&2; exit 2 ;; esac
cargo build "${profile_flag[@]}" -q -p simba-tests "${features[@]}" --bin simba-soak-node
target=${CARGO_TARGET_DIR:-target}
case $target in /*) ;; *) target=$PWD/$target ;; esac
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# A copy, so that a second soak built with another allocator can start beside this one.
bin=$dir/simba-soak-node
cp "$target/$profile/simba-soak-node" "$bin"
url=${SIMBA_SOAK_URL:-sqlite://$dir/simba.db}
printf '[backend]\nurl = "%s"\n\n[session]\nlease_duration = "3s"\nrenew_interval = "1s"\n' "$url" >"$dir/simba.toml"
if [ "$with_metrics" = on ]; then
  {
    printf '\n[metrics]\nlisten = "127.0.0.1:0"\n'
    [ -n "${SIMBA_SOAK_LEASE_LABELS:-}" ] && printf 'lease_labels = "%s"\n' "$SIMBA_SOAK_LEASE_LABELS"
    [ -n "${SIMBA_SOAK_IDLE_TIMEOUT:-}" ] && printf 'idle_timeout = "%s"\n' "$SIMBA_SOAK_IDLE_TIMEOUT"
    [ "$with_dashboard" = on ] && printf '\n[dashboard]\nlisten = "127.0.0.1:0"\n'
    true
  } >>"$dir/simba.toml"
fi
echo "soak: ${secs} s on ${url%%\?*}, ${profile} build, allocator ${alloc}, metrics ${with_metrics}, dashboard ${with_dashboard} (lease_labels ${SIMBA_SOAK_LEASE_LABELS:-default}, idle_timeout ${SIMBA_SOAK_IDLE_TIMEOUT:-default}), samples every 10 s (elapsed_s rss_kib open_fds locks_taken cron_runs partition_terms group_joins metrics_bytes metrics_series state_bytes)"
(cd "$dir" && SIMBA_CONFIG="$dir/simba.toml" SIMBA_SOAK_SECS=$secs RUST_LOG=warn "$bin") | tee "$dir/soak.log"
awk -v max="$max_growth" -v secs="$secs" -v warmup="$warmup" -v mmax="$max_metrics_growth" -v metered="$with_metrics" '
  $1 == "soak" && $2 == "held" { held = $3; of = $5 }
  $1 == "soak" && $2 != "held" { t[n] = $2; r[n] = $3; f[n] = $4; l[n] = $5; c[n] = $6; j[n] = $8; mb[n] = $9; ms[n] = $10; sb[n] = $11; n++ }
  END {
    if (n < 3) { print "soak: too few samples"; exit 1 }
    # A short run skips its first two minutes too (or half of it): the group churn of the
    # first minute adds the bounded series of handovers (reasons per partition) to /metrics.
    short = int(secs / 6); if (short < 120) short = (secs / 2 < 120) ? int(secs / 2) : 120
    from = (warmup != "") ? warmup + 0 : (secs >= 1800) ? 300 : short
    for (i = 0; i < n && t[i] < from; i++) {}
    if (i >= n - 1) i = 0
    g = (r[n-1] - r[i]) * 100.0 / r[i]
    per_hour = (r[n-1] - r[i]) * 3600.0 / (t[n-1] - t[i])
    per_klock = (l[n-1] > l[i]) ? (r[n-1] - r[i]) * 1000.0 / (l[n-1] - l[i]) : 0
    # Descriptors move with the connections of the second runtime: the most open in the first and
    # in the second half of the measured window.
    mid = int((i + n - 1) / 2); f1 = 0; f2 = 0
    for (k = i; k <= mid; k++) if (f[k] > f1) f1 = f[k]
    for (k = mid + 1; k < n; k++) if (f[k] > f2) f2 = f[k]
    for (h = i; h < n && t[h] < (t[i] + t[n-1]) / 2; h++) {}
    printf "soak: second half of the window: RSS %d KiB at %d s, %d KiB at %d s: %+.2f%%\n", r[h], t[h], r[n-1], t[n-1], (r[n-1] - r[h]) * 100.0 / r[h]
    printf "soak: RSS %d KiB at %d s, %d KiB at %d s: %+.1f%% (%+.0f KiB per hour, %+.2f KiB per 1000 lock names); most open fds %d then %d; %d lock names, %d cron runs, %d group joins; held %s of %s locks to the end\n", r[i], t[i], r[n-1], t[n-1], g, per_hour, per_klock, f1, f2, l[n-1], c[n-1], j[n-1], held, of
    bad = 0
    if (metered == "on") {
      mg = (mb[i] > 0) ? (mb[n-1] - mb[i]) * 100.0 / mb[i] : 0
      most = 0; for (k = i; k < n; k++) if (mb[k] > most) most = mb[k]
      printf "soak: /metrics %d bytes (%d series) at %d s, %d bytes (%d series) at %d s: %+.2f%%, at most %d bytes; /api/state %d then %d bytes\n", mb[i], ms[i], t[i], mb[n-1], ms[n-1], t[n-1], mg, most, sb[i], sb[n-1]
      if (mb[n-1] == 0) { print "soak: FAILED: /metrics was not served"; bad = 1 }
      else if (mg > mmax) { printf "soak: FAILED: /metrics grew more than %s%%\n", mmax; bad = 1 }
    }
    if (g > max) { printf "soak: FAILED: memory grew more than %s%%\n", max; bad = 1 }
    if (f2 > f1 + 2) { print "soak: FAILED: open file descriptors grew"; bad = 1 }
    if (held == "" || held != of) { print "soak: FAILED: a held lock was lost (or the node did not finish)"; bad = 1 }
    if (bad) exit 1
    print "soak: ok"
  }' "$dir/soak.log"
exit
}
