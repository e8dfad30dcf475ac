#!/usr/bin/env bash
# Kernel entries per 1k calls at one in flight, by process: one system at a
# time (`compare --systems S --concurrency 1 --rounds 1 --secs 6`), with
# `perf stat` of the syscall tracepoints on each process for 3 s from 2.5 s
# in. The process whose parent is the other is the server.
#   run.sh BIN OUT SYSTEM...
set -euo pipefail
bin=$1 out=$2; shift 2
mkdir -p "$out"
ev=syscalls:sys_enter_sendto,syscalls:sys_enter_recvfrom,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_futex,syscalls:sys_enter_writev,syscalls:sys_enter_write,syscalls:sys_enter_read,syscalls:sys_enter_sched_yield,context-switches
for s in "$@"; do
    n=$(find "$out" -maxdepth 1 -name "$s-*.txt" | wc -l)
    f="$out/$s-$n"
    "$bin" compare --systems "$s" --concurrency 1 --rounds 1 --secs 6 --out "$f.d" > "$f.txt" 2>&1 &
    sleep 2.5
    for p in $(pgrep -x tram-bench); do
        role=client
        parent=$(ps -o ppid= -p "$p" | tr -d ' ')
        [ "$(ps -o comm= -p "$parent")" = tram-bench ] && role=server
        perf stat -x, -e "$ev" -p "$p" -- sleep 3 2> "$f.$role.csv" &
    done
    wait
done
