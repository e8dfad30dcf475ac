#!/usr/bin/env bash
# Where one call in flight's time goes between system calls: runs
# `tram-bench compare --concurrency 1` of tram, protosocket-rpc and the
# floor (or SYSTEMS) under `perf record -a` of the epoll_wait, recvfrom
# and sendto tracepoints, then prints, per system and side, the median
# time of each step from one system call to the next
# (scripts/c1-segments.py). A
# call's cycle is the client's and the server's steps in turn; a step
# that differs from the floor's in the same run is where a system's
# code costs latency (kernel steps are inside a call; user-space steps
# lie between them). Then, per system and side, how often a side woke on
# the CPU of the peer that woke it and how long each kind of wake-up took
# (scripts/c1-wakes.py).
#
#   scripts/c1-segments.sh OUT_DIR [TRAM_BENCH] [SYSTEMS]
#
# Needs perf and root (or perf_event_paranoid at -1). protosocket-rpc
# writes with writev, which is not traced: its write steps are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$1
bench=${2:-target/release/tram-bench}
systems=${3:-tram,protosocket,floor}
mkdir -p "$out"
# The servers' pids, to tell their events from the client's.
(for _ in $(seq 1 60); do
    ps -eo pid,args | grep "[s]erve --workload unary --system" || true
    sleep 0.5
done | sort -u >"$out/servers.txt") &
watcher=$!
perf record -q -a -o "$out/perf.data" \
    -e 'syscalls:sys_enter_epoll_wait,syscalls:sys_exit_epoll_wait' \
    -e 'syscalls:sys_enter_recvfrom,syscalls:sys_exit_recvfrom' \
    -e 'syscalls:sys_enter_sendto,syscalls:sys_exit_sendto' \
    -- "$bench" compare --systems "$systems" --concurrency 1 \
    --rounds 2 --secs 3 --out "$out/compare" | tee "$out/compare.txt"
wait "$watcher"
perf script --ns -i "$out/perf.data" -F comm,pid,tid,cpu,time,event,trace 2>/dev/null \
    >"$out/script.txt"
python3 scripts/c1-segments.py "$out/servers.txt" <"$out/script.txt" | tee "$out/segments.txt"
python3 scripts/c1-wakes.py "$out/servers.txt" <"$out/script.txt" | tee "$out/wakes.txt"
rm -f "$out/perf.data" "$out/script.txt"
