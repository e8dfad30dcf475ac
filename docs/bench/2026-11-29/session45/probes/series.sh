#!/bin/bash
# usage: series.sh SECS OUT  (a tram-only C=256 round sampled every 0.5 s)
/tmp/tb-main compare --systems ${3:-tram} --concurrency 256 --rounds 1 --secs $1 --warmup 1 --out /tmp/c256-long > $2.log 2>&1 &
sleep 2.5; SP=$(pgrep -f '^/tmp/tb-main serve' | head -1)
PORT=$(ss -tlnp | grep "pid=$SP," | awk '{print $4}' | sed 's/.*://')
rx() { ss -tin "sport = :$PORT" | grep -o 'bytes_received:[0-9]*' | cut -d: -f2 | sort -n | tail -1; }
prev=$(rx)
n=$(( ($1 - 2) * 2 ))
for i in $(seq 1 $n); do sleep 0.5; cur=$(rx); echo "$i $(( (cur-prev)*2 ))"; prev=$cur; done > $2
wait; grep -A2 '^| system' $2.log | tail -1
awk '{printf "%3d:%6.1f  ", $1, $2/1e6; if(NR%8==0) print ""}' $2
