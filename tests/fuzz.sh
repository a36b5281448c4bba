#!/usr/bin/env bash
# Fuzzes every parser a user or a file reaches (fuzz/fuzz_targets/*.rs) for a bounded time
# each, starting from the checked-in corpus (fuzz/corpus/<target>/), and fails on any crash,
# panic, abort, memory over budget or slow input.
#
# Built on stable Rust the way cargo-fuzz does it without a sanitizer: libFuzzer's coverage
# instrumentation through RUSTFLAGS, release with debug assertions and overflow checks. The
# budgets: 256 MiB of live heap per target (counted by the targets' allocator, fuzz/src/lib.rs),
# -rss_limit_mb for the whole process, -timeout seconds per input.
#
#   SPARES_FUZZ_SECONDS=60 tests/fuzz.sh            # longer runs (default 20 s a target)
#   SPARES_FUZZ_TARGETS="hostlist protocol" tests/fuzz.sh
#
# New inputs libFuzzer finds go to fuzz/work/ (not checked in); a failing input is kept in
# fuzz/artifacts/<target>/ and its path printed: reproduce with
# fuzz/target/<triple>/release/<target> <file>.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${SPARES_FUZZ_SECONDS:-20}
per_input=${SPARES_FUZZ_TIMEOUT:-2}
rss_mb=${SPARES_FUZZ_RSS_MB:-512}
malloc_mb=${SPARES_FUZZ_MALLOC_MB:-256}
all=$(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^spares[-_]fuzz$')
targets=${SPARES_FUZZ_TARGETS:-$all}

host=$(rustc -vV | sed -n 's/^host: //p')
# --target keeps the instrumentation away from build scripts and proc macros.
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cllvm-args=-sanitizer-coverage-stack-depth \
--cfg fuzzing -Cdebug-assertions -Coverflow-checks"
echo "== fuzz: building the targets ($host)"
cargo build --manifest-path fuzz/Cargo.toml --release --target "$host" --bins --quiet
bin=fuzz/target/$host/release

# The targets that read files write them under $TMPDIR: one directory for this run, removed
# at its end.
TMPDIR=$(mktemp -d "${TMPDIR:-/tmp}/spares-fuzz.XXXXXX")
export TMPDIR
trap 'rm -rf "$TMPDIR"' EXIT

passed=0
failed=0
for t in $targets; do
    work=fuzz/work/$t
    artifacts=fuzz/artifacts/$t
    mkdir -p "$work" "$artifacts" "fuzz/corpus/$t"
    log=$work.log
    # The working corpus first: libFuzzer writes new inputs there, never into fuzz/corpus.
    set +e
    "$bin/$t" -max_total_time="$seconds" -timeout="$per_input" -rss_limit_mb="$rss_mb" \
        -malloc_limit_mb="$malloc_mb" -print_final_stats=1 -artifact_prefix="$artifacts/" \
        "$work" "fuzz/corpus/$t" >"$log" 2>&1
    rc=$?
    set -e
    stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -1; }
    runs=$(stat number_of_executed_units)
    speed=$(stat average_exec_per_sec)
    rss=$(stat peak_rss_mb)
    corpus=$(ls "$work" | wc -l)
    if [ "$rc" = 0 ]; then
        passed=$((passed + 1))
        echo "fuzz $t: ok, ${runs:-?} inputs in ${seconds} s (${speed:-?}/s), peak RSS ${rss:-?} MB, working corpus ${corpus} inputs"
    else
        failed=$((failed + 1))
        kind=$(grep -o -E 'deadly signal|panicked at|out-of-memory|timeout after|memory budget' "$log" | head -1 || true)
        found=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
        echo "fuzz $t: FAILED (exit $rc: ${kind:-see $log}), input ${found:-?}; log $log"
        grep -m3 -E 'panicked at|memory budget|ERROR: libFuzzer' "$log" | sed 's/^/    /' || true
    fi
done
echo "fuzz: $passed passed, $failed failed"
[ "$failed" = 0 ]
