#!/bin/bash
# wk.sh BIN SYS OUT: sched_wakeup events for 2 s of a C=1 run
bin=$1; sys=$2; out=$3
$bin compare --systems $sys --concurrency 1 --rounds 1 --secs 8 > $out.txt 2>&1 &
sleep 4
perf record -e sched:sched_wakeup -e sched:sched_switch -a -o $out.data -- sleep 2 >/dev/null 2>&1
wait
grep "^| $sys " $out.txt | cut -c1-60
