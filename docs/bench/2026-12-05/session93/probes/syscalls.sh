#!/bin/bash
# sc.sh BIN SYS C PAYLOAD [extra compare args]: per-1k-call syscall and switch counts of client and server over 2 s of a 6 s run
B=$1; sys=$2; c=$3; pl=$4; shift 4
$B compare --systems $sys --concurrency $c --payload $pl --rounds 1 --secs 6 "$@" > rsc.txt 2>&1 & sleep 3
cpid=$(pgrep -f "$B compare --systems $sys" | head -1); spid=$(pgrep -f "$(basename $B) serve" | head -1)
ev=syscalls:sys_enter_writev,syscalls:sys_enter_sendto,syscalls:sys_enter_recvfrom,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_write,syscalls:sys_enter_futex,sched:sched_switch,syscalls:sys_enter_sched_yield
perf stat -e $ev -p $cpid -x, -o pc.txt -- sleep 2 & perf stat -e $ev -p $spid -x, -o ps.txt -- sleep 2; wait; wait
r=$(grep -E "^\| $sys \|" rsc.txt | awk -F'|' '{print $3}' | tr -d ' k')
echo "$sys $* rate ${r}k $(grep -E "^\| $sys \|" rsc.txt | awk -F'|' '{print $9, $10, $11}')"
for f in pc ps; do echo -n "  $f per 1k calls: "; grep -v '^#' $f.txt | grep . | awk -F, -v r=$r '{split($3,a,":"); printf "%s=%.1f ", a[2], $1/(r*2)}'; echo; done
