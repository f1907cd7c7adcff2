#!/usr/bin/env bash
# Fuzzing: builds the libFuzzer targets in fuzz/ with coverage
# instrumentation, then runs each for SECONDS (default 20).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     all targets when none is named
#   FUZZ_RUNS=10000000 scripts/fuzz.sh 0 steps   a number of inputs instead (SECONDS 0: no time bound)
#
# Needs only the stable toolchain and a C++ compiler (libfuzzer-sys builds
# libFuzzer itself); `cargo fuzz` is not used. The flags are the ones
# cargo-fuzz passes, without AddressSanitizer (safe Rust, and twice the
# speed). `--target` keeps them off build scripts and proc macros.
#
# Corpora grow in target/fuzz/corpus/TARGET, seeded from fuzz/corpus/TARGET
# (committed: real agent output, request bodies, a real shepherd.toml).
# Prints each target's executions and executions per second; on a crash,
# the reproducer's path (re-run it with: target/fuzz/HOST/release/TARGET PATH)
# and a non-zero exit.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-20}
[ $# -gt 0 ] && shift
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    for f in fuzz/fuzz_targets/*.rs; do
        targets+=("$(basename "$f" .rs)")
    done
fi

host=$(rustc -vV | sed -n 's/^host: //p')
out=target/fuzz
bin="$out/$host/release"

started=$SECONDS
export RUSTFLAGS="-Cpasses=sancov-module \
-Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
-Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares \
--cfg fuzzing -Cdebug-assertions -Coverflow-checks"
cargo build --release --locked --manifest-path fuzz/Cargo.toml --target-dir "$out" \
    --target "$host" $(printf -- '--bin %s ' "${targets[@]}")
unset RUSTFLAGS
echo "fuzz: built ${#targets[@]} targets in $((SECONDS - started)) s"

limit=(-max_total_time="$secs")
if [ -n "${FUZZ_RUNS:-}" ]; then
    # A number of inputs; SECONDS, when not 0, still bounds the time.
    limit=(-runs="$FUZZ_RUNS")
    [ "$secs" -gt 0 ] && limit+=(-max_total_time="$secs")
fi

failed=()
for t in "${targets[@]}"; do
    corpus="$out/corpus/$t"
    artifacts="$out/artifacts/$t"
    log="$out/logs/$t.log"
    mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
    seeds=()
    [ -d "fuzz/corpus/$t" ] && seeds=("fuzz/corpus/$t")
    t0=$SECONDS
    status=0
    "$bin/$t" "${limit[@]}" -print_final_stats=1 -timeout=10 \
        -artifact_prefix="$artifacts/" "$corpus" "${seeds[@]}" >"$log" 2>&1 || status=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    units=$(find "$corpus" -type f | wc -l)
    printf 'fuzz: %-10s %12s executions %9s exec/s %6s corpus  %4s s\n' \
        "$t" "${execs:-?}" "${rate:-?}" "$units" "$((SECONDS - t0))"
    if [ "$status" -ne 0 ]; then
        echo "fuzz: $t FAILED (exit $status); its log: $log"
        grep -E 'panicked at|ERROR: libFuzzer|SUMMARY' "$log" | head -5 || true
        grep -o 'Test unit written to .*' "$log" | sed 's/^/fuzz: reproducer: /' || true
        failed+=("$t")
    fi
done

echo "fuzz: done in $((SECONDS - started)) s"
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: crashes in: ${failed[*]}"
    exit 1
fi
