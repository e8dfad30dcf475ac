#!/usr/bin/env bash
# A/B of two revisions the way docs/bench-log.md takes them: both built
# once, then run in alternation, one short `tram-bench compare` each, so
# that the guest's moods fall on both, A first in odd pairs and B first
# in even ones. Prints tram's row of every run with the core-to-core
# probe of its round.
#
#   scripts/ab.sh REV_A REV_B PAIRS [compare options...]
#   scripts/ab.sh main HEAD 4 --concurrency 32 --payload 16384
#
# Options default to `--concurrency 256`; `--systems tram --rounds 1
# --secs 3` are always set. Builds go to target/ab/ (AB_DIR to change).
# With AB_LIFO_CAP=N, B is built against a copy of tokio whose workers
# poll up to N tasks in a row from their LIFO slot instead of 3 (REV_A
# and REV_B may then be the same): the instrument of the bench log's
# eighteenth entry. With AB_ENV_B=NAME=VALUE, B's runs have that
# variable set (an experiment switched in one binary: REV_A and REV_B
# may then be the same). With AB_BIN=PATH, both runs use that binary,
# built beforehand (REV_A and REV_B are then only labels), for an
# experiment switched by AB_ENV_B.
# Ends with each build's median and B/A per pair, and how often B was
# ahead, with a sign test's p: on a guest whose moods move calls/s by 2x,
# a difference of a few percent needs many pairs to tell from noise.
set -euo pipefail

if [ $# -lt 3 ]; then
    # The comment block above, whatever its length.
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    exit 2
fi
rev_a=$1 rev_b=$2 pairs=$3
shift 3
[ $# -gt 0 ] || set -- --concurrency 256

root=$(git rev-parse --show-toplevel)
work=${AB_DIR:-$root/target/ab}
mkdir -p "$work"

# Points the workspace at `src` to a copy of tokio with its LIFO cap at
# `cap` (the copy is made once, from the version in Cargo.lock).
patch_tokio() {
    local src=$1 cap=$2 ver reg copy
    ver=$(awk '$1 == "name" && $3 == "\"tokio\"" { getline; gsub(/"/, "", $3); print $3; exit }' "$src/Cargo.lock")
    copy="$work/tokio-$ver-lifo-$cap"
    if [ ! -d "$copy" ]; then
        (cd "$src" && cargo fetch --quiet)
        reg=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"tokio-$ver" | head -1)
        # Made aside and moved in place once patched, so that a failed
        # run leaves no half-made copy to be taken for a good one.
        rm -rf "$copy.tmp"
        cp -r "$reg" "$copy.tmp"
        sed -i "s/^const MAX_LIFO_POLLS_PER_TICK: usize = 3;/const MAX_LIFO_POLLS_PER_TICK: usize = $cap;/" \
            "$copy.tmp/src/runtime/scheduler/multi_thread/worker.rs"
        if ! grep -q "MAX_LIFO_POLLS_PER_TICK: usize = $cap;" "$copy.tmp/src/runtime/scheduler/multi_thread/worker.rs"; then
            rm -rf "$copy.tmp"
            echo "tokio $ver has no LIFO cap of 3 to change" >&2
            exit 1
        fi
        mv "$copy.tmp" "$copy"
    fi
    printf '\n[patch.crates-io]\ntokio = { path = "%s" }\n' "$copy" >>"$src/Cargo.toml"
}

# Builds `rev` (one shared target directory: dependencies build once),
# against tokio with a LIFO cap of `cap` if one is given, and prints the
# path of its tram-bench.
build() {
    local rev cap sha bin src
    rev=$1 cap=${2:-}
    sha=$(git -C "$root" rev-parse --short "$rev^{commit}")
    bin="$work/tram-bench-$sha${cap:+-lifo-$cap}"
    if [ ! -x "$bin" ]; then
        src="$work/src-$sha"
        rm -rf "$src"
        mkdir -p "$src"
        # `-m`: the files dated now, not at their commit. The target
        # directory is shared and cargo keys a workspace crate by its path
        # inside the workspace, so a tree dated earlier than the last build
        # there would count as built already, and this revision would get
        # the last build's binary.
        git -C "$root" archive "$sha" | tar -x -m -C "$src"
        [ -z "$cap" ] || patch_tokio "$src" "$cap"
        # Explicit: errexit does not reach into the command substitution
        # this runs in, and a failed build would leave the last build's
        # binary to be copied under this revision's name.
        if ! (cd "$src" && CARGO_TARGET_DIR="$work/target" cargo build --release --quiet -p tram-bench); then
            echo "build of $rev ($sha) failed" >&2
            rm -rf "$src"
            return 1
        fi
        cp "$work/target/release/tram-bench" "$bin"
        rm -rf "$src"
    fi
    echo "$bin"
}

if [ -n "${AB_BIN:-}" ]; then
    # A LIFO cap needs a build of its own; a prebuilt binary has none.
    if [ -n "${AB_LIFO_CAP:-}" ] || [ ! -x "$AB_BIN" ]; then
        echo "AB_BIN must name an executable, and cannot go with AB_LIFO_CAP" >&2
        exit 2
    fi
    bin_a=$AB_BIN bin_b=$AB_BIN
else
    echo "building $rev_a and $rev_b${AB_LIFO_CAP:+ (B against tokio with a LIFO cap of $AB_LIFO_CAP)}${AB_ENV_B:+ (B run with $AB_ENV_B)}" >&2
    bin_a=$(build "$rev_a")
    bin_b=$(build "$rev_b" "${AB_LIFO_CAP:-}")
fi
if [ -z "${AB_BIN:-}${AB_LIFO_CAP:-}${AB_ENV_B:-}" ] &&
    [ "$(git -C "$root" rev-parse "$rev_a^{tree}")" != "$(git -C "$root" rev-parse "$rev_b^{tree}")" ] && cmp -s "$bin_a" "$bin_b"; then
    echo "warning: $rev_a and $rev_b built to the same binary (only docs differ?)" >&2
fi

rates=$(mktemp)
trap 'rm -f "$rates"' EXIT

run() {
    local name=$1 bin=$2 out row probe
    shift 2
    out=$("$bin" compare --systems tram --rounds 1 --secs 3 "$@" --out "$work/out" 2>&1) || true
    row=$(printf '%s\n' "$out" | grep -E '^\| tram ' | head -1 | cut -d'|' -f3,5-7,9,10)
    probe=$(printf '%s\n' "$out" | grep -oE 'round trip[^:]*: [0-9.]+ ns' | head -1 | grep -oE '[0-9.]+ ns')
    printf '%-8s probe %-9s %s\n' "$name" "${probe:-?}" "${row:-(no result)}"
    # calls/s as a number, for the summary ("1.23M", "987k").
    printf '%s\n' "$row" | cut -d'|' -f1 | awk -v n="${name%% *}" '
        { v = $1; m = 1; if (v ~ /M$/) m = 1e6; else if (v ~ /k$/) m = 1e3
          sub(/[Mk]$/, "", v); if (v != "") print n, v * m }' >>"$rates"
}

# Medians of A and B, B/A per pair, and a two-sided sign test of B/A > 1.
summary() {
    awk '
        function median(a, n,   i, j, t) {
            for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
            return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
        }
        $1 == "A" { a[++na] = $2 } $1 == "B" { b[++nb] = $2 }
        END {
            n = na < nb ? na : nb
            if (n == 0) { print "no pairs with results"; exit }
            for (i = 1; i <= n; i++) { r[i] = b[i] / a[i]; if (r[i] > 1) up++; else if (r[i] < 1) down++ }
            k = up < down ? up : down; m = up + down; p = 0
            # P(X <= k) for X ~ Binomial(m, 1/2), doubled.
            for (i = 0; i <= k; i++) { c = 1; for (j = 1; j <= i; j++) c = c * (m - j + 1) / j; p += c / 2 ^ m }
            p = 2 * p > 1 ? 1 : 2 * p
            printf "A median %.0f, B median %.0f calls/s; B/A per pair: median %.3f, B ahead in %d of %d (sign test p = %.2f)\n",
                median(a, n), median(b, n), median(r, n), up, n, p
        }' "$rates"
}

echo "pair | build | probe | calls/s | p50 µs | p99 µs | p99.9 µs | client CPU µs | server CPU µs" >&2
run_b() {
    if [ -n "${AB_ENV_B:-}" ]; then
        (export "$AB_ENV_B" && run "B $1" "$bin_b" "${@:2}")
    else
        run "B $1" "$bin_b" "${@:2}"
    fi
}
# The order swaps from pair to pair: the first run of a pair is often
# the faster (the guest's moods last longer than one run), and a fixed
# order would hand that to one build.
for i in $(seq 1 "$pairs"); do
    if [ $((i % 2)) -eq 1 ]; then
        run "A $i" "$bin_a" "$@"
        run_b "$i" "$@"
    else
        run_b "$i" "$@"
        run "A $i" "$bin_a" "$@"
    fi
done
summary
