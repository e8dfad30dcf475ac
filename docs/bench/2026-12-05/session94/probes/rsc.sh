#!/bin/bash
# rsc.sh BIN SYS RATE: per-1k-call syscall and switch counts of client and server over 2 s of a 6 s open-loop step
B=$1; sys=$2; rate=$3
$B rate --systems $sys --rates $rate --rounds 1 --secs 6 --warmup 0.5 > rr.txt 2>&1 & sleep 3
cpid=$(pgrep -f "$B rate --systems $sys" | head -1); spid=$(pgrep -f "$(basename $B) serve" | head -1)
ev=syscalls:sys_enter_writev,syscalls:sys_enter_sendto,syscalls:sys_enter_recvfrom,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_write,syscalls:sys_enter_futex,sched:sched_switch,syscalls:sys_enter_clock_nanosleep
perf stat -e $ev -p $cpid -x, -o pc.txt -- sleep 2 & perf stat -e $ev -p $spid -x, -o ps.txt -- sleep 2; wait; wait
r=$(echo $rate | sed 's/k//')
echo "$sys at $rate: $(grep -E "achieved" rr.txt | head -2 | tr -s ' ')"
for f in pc ps; do echo -n "  $f per 1k calls: "; grep -v '^#' $f.txt | grep . | awk -F, -v r=$r '{split($3,a,":"); printf "%s=%.1f ", a[2], $1/(r*2)}'; echo; done
