#!/usr/bin/env bash
# The project's one test command (README.md, .ci/run): formatting, lints, and every test.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --all-features -- -D warnings
cargo test --workspace --all-features --no-fail-fast
