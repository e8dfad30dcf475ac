#!/bin/bash
# abc1.sh A_BIN B_BIN PAIRS: one-in-flight p50 of tram and the floor in one run each, alternated
a=$1; b=$2; n=$3
for i in $(seq 1 $n); do
  for side in A B; do
    bin=$a; [ $side = B ] && bin=$b
    out=$($bin compare --systems tram,floor --concurrency 1 --rounds 1 --secs 2 --out /tmp/abc1 2>/dev/null)
    t=$(echo "$out" | grep -E '^\| tram \|' | awk -F'|' '{print $5}')
    f=$(echo "$out" | grep -E '^\| floor \|' | awk -F'|' '{print $5}')
    echo "$i $side tram $t floor $f ratio $(echo "$t / $f" | bc -l | cut -c1-5)"
  done
done
