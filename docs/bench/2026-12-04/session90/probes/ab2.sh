#!/bin/bash
# ab2.sh A_BIN B_BIN PAIRS [compare opts]: alternates A and B, one short compare each
a=$1; b=$2; n=$3; shift 3
for i in $(seq 1 $n); do
  for side in A B; do
    bin=$a; [ $side = B ] && bin=$b
    line=$($bin compare --systems tram --rounds 1 --secs 2 "$@" 2>/dev/null | grep -E '^\| tram \|' | head -1)
    echo "$i $side $line" | awk -F'|' '{print $1, $3, $5, $9, $10, $11}'
  done
done
