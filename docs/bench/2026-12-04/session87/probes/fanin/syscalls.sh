#!/bin/bash
sys=$1
timeout 120 /tmp/tb-base fanin --systems $sys --connections 64 --rounds 1 --secs 9 --out /tmp/prof/$sys-json > /tmp/prof/$sys-sc.log 2>&1 &
sleep 3.5
srv=$(pgrep -f "serve --workload unary --system $sys" | head -1)
cli=$(pgrep -f "tb-base fanin --systems $sys" | tail -1)
perf stat -e 'syscalls:sys_enter_*' -p $srv -o /tmp/prof/$sys-srv.stat -- sleep 4 &
perf stat -e 'syscalls:sys_enter_*' -p $cli -o /tmp/prof/$sys-cli.stat -- sleep 4 &
wait
grep -E '^\| '$sys /tmp/prof/$sys-sc.log
