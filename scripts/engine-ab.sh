#!/usr/bin/env bash
# The engine's own cost per lock acquire + release, A/B: `scripts/engine_ab/main.rs` built in
# release against simba at revision A and at revision B (default: the working tree), run
# alternately PAIRS times (default 3), 5 repetitions of 2 s each; prints every repetition and
# the medians (cycles per second, process CPU in microseconds per cycle). The in-memory
# backend takes the server and the network out, so what differs is the engine's code;
# SIMBA_AB_URL=redis://... (or postgres://...) runs the same loop against that store.
#
#   bash scripts/engine-ab.sh 3f4c1fd            # that revision against the working tree
#   bash scripts/engine-ab.sh 3f4c1fd HEAD 5     # two revisions, five pairs
set -euo pipefail
cd "$(dirname "$0")/.."
a=${1:?usage: engine-ab.sh REV_A [REV_B|worktree] [PAIRS]}
b=${2:-worktree}
pairs=${3:-3}
root=$PWD
work=${CARGO_TARGET_DIR:-$root/target}/engine-ab
mkdir -p "$work"
side() { # side NAME REV: a crate at $work/NAME building main.rs against simba at REV
  local name=$1 rev=$2 src
  if [[ $rev == worktree ]]; then
    src=$root
  else
    src=$work/src-$name
    git worktree remove --force "$src" 2>/dev/null || true
    rm -rf "$src"
    git worktree prune
    git worktree add -q --detach "$src" "$rev"
  fi
  mkdir -p "$work/$name/src"
  cp scripts/engine_ab/main.rs "$work/$name/src/main.rs"
  # The package is `simba` before the rename to `simba-sched` and `simba-sched` after it: the
  # dependency takes the revision's own package name, and keeps the key (and import) `simba`.
  local pkg
  pkg=$(sed -n 's/^name = "\(.*\)"$/\1/p' "$src/simba/Cargo.toml" | head -n 1)
  printf '[package]\nname = "engine-ab-%s"\nversion = "0.0.0"\nedition = "2024"\npublish = false\n\n[workspace]\n\n[dependencies]\nsimba = { package = "%s", path = "%s/simba", default-features = false, features = ["redis", "postgres"] }\ntokio = { version = "1", features = ["macros", "rt-multi-thread", "time"] }\n' \
    "$name" "$pkg" "$src" >"$work/$name/Cargo.toml"
  (cd "$work/$name" && CARGO_TARGET_DIR=$work/target-$name cargo build --release -q)
}
side a "$a"
side b "$b"
out=$work/runs.txt
: >"$out"
for ((i = 1; i <= pairs; i++)); do
  "$work/target-a/release/engine-ab-a" A | tee -a "$out"
  "$work/target-b/release/engine-ab-b" B | tee -a "$out"
done
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
for s in A B; do
  rev=$([[ $s == A ]] && echo "$a" || echo "$b")
  n=$(awk -v s=$s '$1 == s' "$out" | wc -l)
  printf 'engine-ab: %s (%s): median %s cycles/s, %s us CPU per cycle, over %d repetitions\n' "$s" "$rev" \
    "$(awk -v s=$s '$1 == s { print $2 }' "$out" | median)" "$(awk -v s=$s '$1 == s { print $3 }' "$out" | median)" "$n"
done
for name in a b; do
  if [[ -d $work/src-$name ]]; then git worktree remove --force "$work/src-$name"; fi
done
