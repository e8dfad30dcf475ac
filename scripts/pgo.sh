#!/usr/bin/env bash
# Builds tram-bench with profile-guided optimisation, the way a service
# that cares about latency per call can build itself (docs/building.md):
# an instrumented build, a training run of the bench's own workloads,
# then a build that uses the profile. Every system in the bench is in the
# one binary and is trained and optimised alike, so its ratios stay fair.
#
#   scripts/pgo.sh            # then: target/pgo/use/release/tram-bench compare
#
# Needs rustup's llvm-tools (installed here if missing) for llvm-profdata
# of the same LLVM as rustc. Builds go to target/pgo/ (PGO_DIR to
# change); the training takes about two minutes.
set -euo pipefail

root=$(git rev-parse --show-toplevel)
work=${PGO_DIR:-$root/target/pgo}
cd "$root"

sysroot=$(rustc --print sysroot)
host=$(rustc -vV | awk '$1 == "host:" { print $2 }')
profdata=$sysroot/lib/rustlib/$host/bin/llvm-profdata
if [ ! -x "$profdata" ]; then
    rustup component add llvm-tools
fi

rm -rf "$work/data"
mkdir -p "$work/data"
echo "== instrumented build"
RUSTFLAGS="-Cprofile-generate=$work/data" \
    cargo build --release -p tram-bench --target-dir "$work/gen"

echo "== training (every system, unary at 1, 32 and 256 in flight, streams)"
bench=$work/gen/release/tram-bench
# One file per process: the servers are processes of their own.
export LLVM_PROFILE_FILE="$work/data/%p-%m.profraw"
"$bench" compare --systems tram,tonic,protosocket,floor,floor-tasks \
    --concurrency 1,32,256 --rounds 1 --out "$work/train" >/dev/null
"$bench" stream --rounds 1 --out "$work/train" >/dev/null
unset LLVM_PROFILE_FILE

"$profdata" merge -o "$work/merged.profdata" "$work/data"
echo "== optimised build"
RUSTFLAGS="-Cprofile-use=$work/merged.profdata" \
    cargo build --release -p tram-bench --target-dir "$work/use"
echo "built $work/use/release/tram-bench"
