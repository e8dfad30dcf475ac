#!/usr/bin/env bash
# usage: abm.sh ROUNDS "label|BIN|ENV ..." -- compare opts   (ENV "-" for none)
rounds=$1; shift
variants=(); while [ "$1" != "--" ]; do variants+=("$1"); shift; done; shift
for r in $(seq 1 $rounds); do
  n=${#variants[@]}
  for k in $(seq 0 $((n-1))); do
    IFS='|' read -r label bin envs <<< "${variants[$(( (k + r) % n ))]}"
    [ "$envs" = "-" ] && envs=""
    row=$(env $envs $bin compare --systems tram --rounds 1 --secs 3 "$@" --out /tmp/abn-out 2>&1 | grep -E '^\| tram \|' | head -1)
    echo "$label $r $row"
  done
done
