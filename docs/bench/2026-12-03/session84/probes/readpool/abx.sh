#!/usr/bin/env bash
# rotations of variants: name=ENV pairs; prints calls/s and CPU
BIN=$1; N=$2; shift 2
for i in $(seq 1 $N); do
  for v in "$@"; do
    name=${v%%:*}; envs=${v#*:}
    out=$(env $envs $BIN compare --systems tram --rounds 1 --secs 3 $ABX_OPTS 2>&1 | grep -E '^\| tram ' | head -1)
    echo "$i $name $out" | awk -F'|' '{print $1, $3, $9, $10, $11}'
  done
done
