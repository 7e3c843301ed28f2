#!/usr/bin/env bash
# The million-name soak (issue 35 item 5; docs/adr/0030): one client of `simba-names-soak`
# (release build) takes and releases SIMBA_NAMES_SOAK_NAMES (default 1,000,000) distinct lock
# names, each once (`soak.names.{run}.{i}`), from SIMBA_NAMES_SOAK_TASKS (default 8) tasks at
# once, with a 3 s lease (renewal every second) and `remove_idle_leases_after` 5 s: the client's
# own sweeper (every 60 renewal intervals, then back to back while it removes full batches of
# 1,000) removes the idle lease records; the soak never does. Every 10 s, at the 10% mark and at
# the end it samples the names done, its resident memory (VmRSS) and the store's lease records
# and bytes (SQLite: pages in use; PostgreSQL: pg_total_relation_size('simba_lease');
# MySQL/MariaDB: data_length + index_length; Redis: the `simba:lease:*` keys of the URL's
# database and the server's used_memory). After the last name it waits for the sweeper to catch
# up (no more records than at the start, or SIMBA_NAMES_SOAK_DRAIN_SECS, default 180), then takes
# the first SIMBA_NAMES_SOAK_CHECK (default 100) names again and checks each token is above its
# first one (T3 across removal).
#
# It prints the samples and a summary, writes the JSON summary to SIMBA_NAMES_SOAK_OUT (default
# target/names-soak/<store>.json), and fails when the records after the drain exceed
# 2 x (names/s x 5 s + 1,000), when the most records at any sample exceed
# 2 x (names/s x (60 s + 5 s) + 1,000) (the sweeper did not keep up), when resident memory grew
# by more than SIMBA_NAMES_SOAK_MAX_RSS_GROWTH_PCT (default 10) percent from the 10% mark to the
# end, when a token did not rise across the removal, or when a name could not be taken.
#
# Removal is store-wide: give the soak a store (database) of its own, not the one other tests
# use. For PostgreSQL and MySQL/MariaDB URLs the node creates the URL's database when it is
# missing; for Redis, pick a database number nothing else uses (`/9` below).
#
#   bash scripts/names-soak.sh                                        # SQLite in a temporary directory
#   eval "$(bash scripts/backends.sh env)"                            # the test servers' URLs
#   SIMBA_NAMES_SOAK_URL=${SIMBA_TEST_POSTGRES_URL%/*}/simba_names_soak bash scripts/names-soak.sh
#   SIMBA_NAMES_SOAK_URL=${SIMBA_TEST_MYSQL_URL%/*}/simba_names_soak bash scripts/names-soak.sh
#   SIMBA_NAMES_SOAK_URL=$SIMBA_TEST_REDIS_URL/9 bash scripts/names-soak.sh
#   SIMBA_NAMES_SOAK_NAMES=100000 SIMBA_NAMES_SOAK_PROFILE=debug bash scripts/names-soak.sh   # smaller, debug build
#
# SIMBA_NAMES_SOAK_RUN names the run (default: the Unix time); SIMBA_NODE_TRACING=1 with RUST_LOG
# (e.g. simba=debug) logs the client on stderr, the sweeper's removals included.
set -euo pipefail
{
cd "$(dirname "$0")/.."
profile=${SIMBA_NAMES_SOAK_PROFILE:-release}
case $profile in
  release) profile_flag=(--release) ;;
  debug) profile_flag=() ;;
  *) echo "names-soak: SIMBA_NAMES_SOAK_PROFILE must be release or debug, not '$profile'" >&2; exit 2 ;;
esac
cargo build "${profile_flag[@]}" -q -p simba-tests --bin simba-names-soak
target=${CARGO_TARGET_DIR:-target}
case $target in /*) ;; *) target=$PWD/$target ;; esac
echo "names-soak: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- 2>/dev/null || echo ' (with uncommitted changes)'), ${profile} build"
RUST_LOG=${RUST_LOG:-warn} "$target/$profile/simba-names-soak"
exit
}
