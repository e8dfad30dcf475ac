#!/usr/bin/env bash
# The suite behind docs/performance.md's "Current results": six runs of
# tram-bench on the default setting (two workers a process, unpinned),
# every system interleaved in each, and one at one call in flight with
# every process on CPU 0 (`--one-cpu`: each system's own path, which
# `targets` lists as off the default setting), then `tram-bench targets`
# reading them against tram's performance targets. About eleven minutes
# on a 2-vCPU guest; run it on a quiet machine.
#
#   scripts/suite.sh [OUT_DIR]
#
# OUT_DIR defaults to target/tram-bench/suite-<date and time>; it gets
# one directory of result files per run and suite-log.txt, every table
# the runs printed. Runs of other builds: TRAM_BENCH=path/to/tram-bench.
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:-target/tram-bench/suite-$(date -u +%Y%m%d-%H%M%S)}
if [ -z "${TRAM_BENCH:-}" ]; then
    cargo build --release -p tram-bench
    TRAM_BENCH=target/release/tram-bench
fi
mkdir -p "$out"

run() {
    local name=$1
    shift
    echo "== $name: tram-bench $*"
    "$TRAM_BENCH" "$@" --out "$out/$name"
}

{
    run compare compare --rounds 5
    run compare-2 compare --concurrency 1,256 --rounds 5
    run stream stream --rounds 5
    run payload-16k compare --payload 16384 --concurrency 32,256 \
        --systems tram,protosocket,floor --rounds 3
    run fanin fanin --rounds 2
    run rate rate --rounds 5
    run c1-one-cpu compare --concurrency 1 --one-cpu \
        --systems tram,floor-tasks,protosocket,floor --rounds 3
    echo
    "$TRAM_BENCH" targets "$out"
} 2>&1 | tee "$out/suite-log.txt"
