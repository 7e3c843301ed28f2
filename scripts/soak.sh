#!/usr/bin/env bash
# The soak (issue 16 item 7; RELIABILITY.md, "Soak"): one node of `simba-soak-node` (release
# build) for SIMBA_SOAK_SECS (default 1800) with a cron job every second, a 16-partition group
# and a lock under a new name every 50 ms, sampling its resident memory every 10 s. Prints the
# samples and a summary; fails when the memory grew by more than SIMBA_SOAK_MAX_GROWTH_PCT
# (default 20) percent from the fifth minute (or a sixth of the run, if shorter) to the end.
#
#   bash scripts/soak.sh                                  # SQLite in a temporary directory
#   SIMBA_SOAK_URL=redis://127.0.0.1:56379 bash scripts/soak.sh   # a running server
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${SIMBA_SOAK_SECS:-1800}
max_growth=${SIMBA_SOAK_MAX_GROWTH_PCT:-20}
cargo build --release -q -p simba-tests --all-features --bin simba-soak-node
bin=$PWD/${CARGO_TARGET_DIR:-target}/release/simba-soak-node
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
url=${SIMBA_SOAK_URL:-sqlite://$dir/simba.db}
printf '[backend]\nurl = "%s"\n\n[session]\nlease_duration = "3s"\nrenew_interval = "1s"\n' "$url" >"$dir/simba.toml"
echo "soak: ${secs} s on ${url%%\?*}, samples every 10 s (elapsed_s rss_kib locks_taken cron_runs partition_terms)"
(cd "$dir" && SIMBA_CONFIG="$dir/simba.toml" SIMBA_SOAK_SECS=$secs RUST_LOG=warn "$bin") | tee "$dir/soak.log"
awk -v max="$max_growth" -v secs="$secs" '
  $1 == "soak" { t[n] = $2; r[n] = $3; l[n] = $4; n++ }
  END {
    if (n < 3) { print "soak: too few samples"; exit 1 }
    from = (secs >= 1800) ? 300 : int(secs / 6)
    for (i = 0; i < n && t[i] < from; i++) {}
    if (i >= n - 1) i = 0
    g = (r[n-1] - r[i]) * 100.0 / r[i]
    per_hour = (r[n-1] - r[i]) * 3600.0 / (t[n-1] - t[i])
    per_klock = (l[n-1] > l[i]) ? (r[n-1] - r[i]) * 1000.0 / (l[n-1] - l[i]) : 0
    printf "soak: RSS %d KiB at %d s, %d KiB at %d s: %+.1f%% (%+.0f KiB per hour, %+.1f KiB per 1000 lock names); %d locks, %d cron runs\n", r[i], t[i], r[n-1], t[n-1], g, per_hour, per_klock, l[n-1], t[n-1]
    if (g > max) { printf "soak: FAILED: memory grew more than %d%%\n", max; exit 1 }
    print "soak: ok"
  }' "$dir/soak.log"
