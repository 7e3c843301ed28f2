#!/usr/bin/env bash
# The soak (issue 16 item 7; RELIABILITY.md, "Soak"): one node of `simba-soak-node` (release
# build) for SIMBA_SOAK_SECS (default 1800): a cron job every second, a 16-partition group that
# a second runtime joins and leaves every minute, 1,000 locks held throughout and a lock under a
# new name every 15 ms (about 120,000 names in 30 minutes). Samples its resident memory and
# open file descriptors every 10 s, prints them and a summary, and fails when memory grew by
# more than SIMBA_SOAK_MAX_GROWTH_PCT (default 2) percent from the fifth minute (or a sixth of
# a shorter run; SIMBA_SOAK_WARMUP_SECS sets it) to the end, when descriptors grew, or when a
# held lock was lost. It also prints the growth over the second half of that window: a leak
# keeps its rate there, a bounded cache that is still filling (SQLite's page caches, 4 MiB at
# most) levels off.
#
#   bash scripts/soak.sh                                  # SQLite in a temporary directory
#   SIMBA_SOAK_URL=redis://127.0.0.1:56379 bash scripts/soak.sh   # a running server
#   SIMBA_SOAK_ALLOC=mimalloc bash scripts/soak.sh        # the node on mimalloc, not glibc's malloc
#   SIMBA_SOAK_ALLOC=jemalloc bash scripts/soak.sh        # the node on jemalloc
set -euo pipefail
# One brace group: bash reads all of it before it runs, so editing this file during a soak (hours
# long) cannot break the run's summary.
{
cd "$(dirname "$0")/.."
secs=${SIMBA_SOAK_SECS:-1800}
max_growth=${SIMBA_SOAK_MAX_GROWTH_PCT:-2}
warmup=${SIMBA_SOAK_WARMUP_SECS:-}
alloc=${SIMBA_SOAK_ALLOC:-glibc}
case $alloc in
  glibc) features=() ;;
  mimalloc) features=(--features mimalloc) ;;
  jemalloc) features=(--features jemalloc) ;;
  *) echo "soak: SIMBA_SOAK_ALLOC must be glibc, mimalloc or jemalloc, not '$alloc'" >&2; exit 2 ;;
esac
cargo build --release -q -p simba-tests "${features[@]}" --bin simba-soak-node
target=${CARGO_TARGET_DIR:-target}
case $target in /*) ;; *) target=$PWD/$target ;; esac
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# A copy, so that a second soak built with another allocator can start beside this one.
bin=$dir/simba-soak-node
cp "$target/release/simba-soak-node" "$bin"
url=${SIMBA_SOAK_URL:-sqlite://$dir/simba.db}
printf '[backend]\nurl = "%s"\n\n[session]\nlease_duration = "3s"\nrenew_interval = "1s"\n' "$url" >"$dir/simba.toml"
echo "soak: ${secs} s on ${url%%\?*}, allocator ${alloc}, samples every 10 s (elapsed_s rss_kib open_fds locks_taken cron_runs partition_terms group_joins)"
(cd "$dir" && SIMBA_CONFIG="$dir/simba.toml" SIMBA_SOAK_SECS=$secs RUST_LOG=warn "$bin") | tee "$dir/soak.log"
awk -v max="$max_growth" -v secs="$secs" -v warmup="$warmup" '
  $1 == "soak" && $2 == "held" { held = $3; of = $5 }
  $1 == "soak" && $2 != "held" { t[n] = $2; r[n] = $3; f[n] = $4; l[n] = $5; c[n] = $6; j[n] = $8; n++ }
  END {
    if (n < 3) { print "soak: too few samples"; exit 1 }
    from = (warmup != "") ? warmup + 0 : (secs >= 1800) ? 300 : int(secs / 6)
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
    if (g > max) { printf "soak: FAILED: memory grew more than %s%%\n", max; bad = 1 }
    if (f2 > f1 + 2) { print "soak: FAILED: open file descriptors grew"; bad = 1 }
    if (held == "" || held != of) { print "soak: FAILED: a held lock was lost (or the node did not finish)"; bad = 1 }
    if (bad) exit 1
    print "soak: ok"
  }' "$dir/soak.log"
exit
}
