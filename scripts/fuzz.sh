#!/usr/bin/env bash
# Runs the cargo-fuzz targets in fuzz/ (issue 16, item 6), one at a time, each for a bounded
# time, and exits non-zero on the first crash, printing where its input is.
#
#   scripts/fuzz.sh                      # every target, 60 s each
#   SIMBA_FUZZ_SECS=300 scripts/fuzz.sh  # 5 minutes each
#   scripts/fuzz.sh cron lease_name      # some targets only
#
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`). Not part of the
# test command (scripts/test.sh): fuzz/ is its own workspace.
#
# Each target starts from its committed corpus, fuzz/corpus/<target>/, which libFuzzer runs
# first (so every committed input, crashes found before included, is a regression test on
# every run); the inputs it finds go to fuzz/corpus-work/<target>/ (not committed). A crash's
# input is saved in fuzz/artifacts/<target>/. To keep new coverage, minimise into the
# committed corpus: `cargo +nightly fuzz cmin <target> ...` (see scripts/README.md).
#
# Figures per target (executions, exec/s, corpus size) are printed at the end, from
# libFuzzer's final statistics; the full logs are in fuzz/corpus-work/<target>.log.
set -euo pipefail

cd "$(dirname "$0")/../fuzz"
secs="${SIMBA_FUZZ_SECS:-60}"
all=(config url_redaction cron lease_name)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")

export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-1}"
nice -n 10 cargo +nightly fuzz build >&2

summary=()
for t in "${targets[@]}"; do
    mkdir -p "corpus-work/$t" "corpus/$t" "artifacts/$t"
    log="corpus-work/$t.log"
    echo "== $t: ${secs}s" >&2
    status=0
    nice -n 10 cargo +nightly fuzz run "$t" "corpus-work/$t" "corpus/$t" -- \
        -max_total_time="$secs" -jobs=1 -workers=1 -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 >"$log" 2>&1 || status=$?
    execs=$(grep -oP 'stat::number_of_executed_units:\s*\K\d+' "$log" | tail -1 || true)
    rate=$(grep -oP 'stat::average_exec_per_sec:\s*\K\d+' "$log" | tail -1 || true)
    cov=$(grep -oP '#\d+\s+DONE\s+cov: \K\d+' "$log" | tail -1 || true)
    corpus=$(grep -oP '#\d+\s+DONE\s+.*corp: \K\d+' "$log" | tail -1 || true)
    summary+=("$t: ${execs:-?} executions, ${rate:-?} exec/s, coverage ${cov:-?}, corpus ${corpus:-?} inputs in ${secs}s, exit $status")
    if [ "$status" -ne 0 ]; then
        tail -n 60 "$log" >&2
        crash=$(grep -oP 'Test unit written to \K\S+' "$log" | tail -1 || true)
        echo "CRASH in $t: input ${crash:-not saved}; log fuzz/$log" >&2
        echo "reproduce: cd fuzz && cargo +nightly fuzz run $t ${crash:-<input>}" >&2
        printf '%s\n' "${summary[@]}"
        exit 1
    fi
done
printf '%s\n' "${summary[@]}"
