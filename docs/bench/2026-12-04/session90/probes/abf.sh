#!/bin/bash
# abf.sh A_BIN B_BIN PAIRS CONNS: alternated fanin runs of tram
a=$1; b=$2; n=$3; c=$4
for i in $(seq 1 $n); do
  for side in A B; do
    bin=$a; [ $side = B ] && bin=$b
    line=$($bin fanin --systems tram --connections $c --rounds 1 --secs 2 2>/dev/null | grep -E '^\| tram \|' | head -1)
    echo "$i $side $line"
  done
done
