#!/usr/bin/env bash
# A/B of two revisions the way docs/bench-log.md takes them: both built
# once, then run in alternation, one short `tram-bench compare` each, so
# that the guest's moods fall on both. Prints tram's row of every run
# with the core-to-core probe of its round.
#
#   scripts/ab.sh REV_A REV_B PAIRS [compare options...]
#   scripts/ab.sh main HEAD 4 --concurrency 32 --payload 16384
#
# Options default to `--concurrency 256`; `--systems tram --rounds 1
# --secs 3` are always set. Builds go to target/ab/ (AB_DIR to change).
set -euo pipefail

if [ $# -lt 3 ]; then
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
rev_a=$1 rev_b=$2 pairs=$3
shift 3
[ $# -gt 0 ] || set -- --concurrency 256

root=$(git rev-parse --show-toplevel)
work=${AB_DIR:-$root/target/ab}
mkdir -p "$work"

# Builds `rev` (one shared target directory: dependencies build once)
# and prints the path of its tram-bench.
build() {
    local rev sha bin src
    rev=$1
    sha=$(git -C "$root" rev-parse --short "$rev^{commit}")
    bin="$work/tram-bench-$sha"
    if [ ! -x "$bin" ]; then
        src="$work/src-$sha"
        rm -rf "$src"
        mkdir -p "$src"
        git -C "$root" archive "$sha" | tar -x -C "$src"
        (cd "$src" && CARGO_TARGET_DIR="$work/target" cargo build --release --quiet -p tram-bench)
        cp "$work/target/release/tram-bench" "$bin"
        rm -rf "$src"
    fi
    echo "$bin"
}

echo "building $rev_a and $rev_b" >&2
bin_a=$(build "$rev_a")
bin_b=$(build "$rev_b")

run() {
    local name=$1 bin=$2 out row probe
    shift 2
    out=$("$bin" compare --systems tram --rounds 1 --secs 3 "$@" --out "$work/out" 2>&1) || true
    row=$(printf '%s\n' "$out" | grep -E '^\| tram ' | head -1 | cut -d'|' -f3,5-7,9,10)
    probe=$(printf '%s\n' "$out" | grep -oE 'round trip[^:]*: [0-9.]+ ns' | head -1 | grep -oE '[0-9.]+ ns')
    printf '%-8s probe %-9s %s\n' "$name" "${probe:-?}" "${row:-(no result)}"
}

echo "pair | build | probe | calls/s | p50 µs | p99 µs | p99.9 µs | client CPU µs | server CPU µs" >&2
for i in $(seq 1 "$pairs"); do
    run "A $i" "$bin_a" "$@"
    run "B $i" "$bin_b" "$@"
done
