#!/bin/bash
B=/tmp/b92/head
for i in $(seq 1 $1); do
  $B compare --systems tram --concurrency 256 --payload 16384 --rounds 1 --secs 5 > r16-$i.txt 2>&1 &
  sleep 2.5
  lp=$(ss -tlnp | grep tram-bench | grep -o '127.0.0.1:[0-9]*' | head -3 | tr '\n' ' ')
  for k in 1 2 3 4 5; do
    ss -tinH state established "( sport != :22 and dport != :22 )" | paste - - | awk -v k=$k '{printf "  s%d %s %s rq=%s sq=%s ", k, $3, $4, $1, $2; for(i=5;i<=NF;i++){ if($i ~ /^(cwnd|bytes_retrans|rcv_space|rcv_ssthresh):/ ) printf "%s ", $i; if ($i=="pacing_rate") printf "pace=%s ", $(i+1)}; print ""}'
    sleep 0.3
  done > ssb-$i.txt
  wait
  echo "$i listen: $lp $(grep -E '^\| tram \|' r16-$i.txt | awk -F'|' '{print $3, $9, $10, $11}')"
  cat ssb-$i.txt
done
