#!/usr/bin/env bash
# For each system: 16 KiB calls at 256 in flight over one connection, and
# the kernel's view of that connection (`ss -tin`) sampled mid-run, twice.
# usage: ss.sh BIN SYSTEM...
bin=$1; shift
for s in "$@"; do
  $bin compare --systems "$s" --payload 16384 --concurrency 256 --rounds 1 --secs 4 --out /tmp/ss-out > /tmp/ss-$s.txt 2>&1 &
  for t in 2 3.5; do
    sleep $([ "$t" = 2 ] && echo 2 || echo 1.5)
    echo "== $s at ${t}s"
    ss -tin state established '( sport > :1024 and dport > :1024 )' | grep -A1 '127.0.0.1' | grep -oE 'cwnd:[0-9]+|bytes_retrans:[0-9]+|retrans:[0-9/]+|dsack_dups:[0-9]+|reordering:[0-9]+|reord_seen:[0-9]+|rcv_ooopack:[0-9]+|bytes_acked:[0-9]+|mrtt:[0-9.]+|rtt:[0-9.]+/[0-9.]+|notsent:[0-9]+|bbr:\(bw:[0-9]+bps' | tr '\n' ' '
    echo
  done
  wait
  grep -E "^\| $s \|" /tmp/ss-$s.txt
done
