#!/usr/bin/env bash
# usage: abn.sh BIN ROUNDS "label:ENV ..." -- compare opts   (ENV "-" for none)
bin=$1 rounds=$2; shift 2
variants=(); while [ "$1" != "--" ]; do variants+=("$1"); shift; done; shift
for r in $(seq 1 $rounds); do
  n=${#variants[@]}
  for k in $(seq 0 $((n-1))); do
    v=${variants[$(( (k + r) % n ))]}
    label=${v%%:*}; envs=${v#*:}; [ "$envs" = "-" ] && envs=""
    row=$(env $envs $bin compare --systems tram --rounds 1 --secs 3 "$@" --out /tmp/abn-out 2>&1 | grep -E '^\| tram \|' | head -1)
    echo "$label $r $row"
  done
done
