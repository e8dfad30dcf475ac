#!/bin/bash
# abn.sh BIN ROUNDS "ENV1" "ENV2" ... -- [compare opts]: rotates the settings, one short compare each
bin=$1; n=$2; shift 2
envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
for i in $(seq 1 $n); do
  for e in "${envs[@]}"; do
    line=$(env $e $bin compare --systems tram --rounds 1 --secs 2 "$@" 2>/dev/null | grep -E '^\| tram \|' | head -1)
    echo "$i $e $line" | awk -F'|' '{print $1, $3, $5, $9, $10, $11}'
  done
done
