#!/usr/bin/env bash
# rotations: each arg name=BIN[:ENV...]
N=$1; shift
for i in $(seq 1 $N); do
  for v in "$@"; do
    name=${v%%=*}; rest=${v#*=}; bin=${rest%%:*}; envs=${rest#*:}; [ "$envs" = "$rest" ] && envs="X=1"
    out=$(env $envs $bin compare --systems tram --rounds 1 --secs 3 $ABX_OPTS --out /tmp/abx-out 2>&1 | grep -E '^\| tram ' | head -1)
    echo "$i $name $out" | awk -F'|' '{print $1, $3, $9, $10, $11}'
  done
done
