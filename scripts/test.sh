#!/usr/bin/env bash
# The project's one test command (README.md, .ci/run): formatting, lints, private test servers
# (PostgreSQL, MariaDB, Redis, ZooKeeper: installed if missing, started on loopback), every test,
# then the servers are stopped again.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --all-features -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -p simba -p simba-macros --all-features

eval "$(bash scripts/backends.sh start)"
trap 'bash scripts/backends.sh stop >/dev/null 2>&1 || true' EXIT

cargo test --workspace --all-features --no-fail-fast
