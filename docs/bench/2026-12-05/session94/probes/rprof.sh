#!/bin/bash
B=$1; sys=$2; rate=$3
$B rate --systems $sys --rates $rate --rounds 1 --secs 6 --warmup 0.5 > rr-$sys.txt 2>&1 & sleep 3
cpid=$(pgrep -f "$B rate --systems $sys" | head -1)
perf record -g -F 4000 -e cpu-clock -p $cpid -o prof-$sys.data -- sleep 2 2>/dev/null >/dev/null; wait
