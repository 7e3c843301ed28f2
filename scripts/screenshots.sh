#!/usr/bin/env bash
# Regenerates the dashboard screenshots shown in the README (docs/images/dashboard-*.png):
# the browser test starts three nodes, opens the dashboard in headless Chromium and saves the
# overview, the groups page (after a node was killed: the moved partitions outlined) and the
# leases page; the jobs test saves the jobs page (a job just paused from the page) and a job
# page (resumed and run now, its history).
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(bash scripts/browser.sh install)"
SIMBA_SCREENSHOTS=$PWD/docs/images cargo test -p simba-tests --all-features --test dashboard \
  -- --nocapture three_nodes_overview_and_rebalance_without_reload jobs_page_bar_grows_and_pause_from_the_page_needs_the_token \
  2>&1 | grep -E '^(screenshot|test result)'
ls -l docs/images/dashboard-*.png
