#!/bin/bash
# rot2.sh N name=BIN ... ; alternates order each rotation; prints rate p50 cpu
N=$1; shift 1
vs=("$@")
for i in $(seq 1 $N); do
  if (( i % 2 == 0 )); then order=$(printf '%s\n' "${vs[@]}" | tac); else order=$(printf '%s\n' "${vs[@]}"); fi
  while read v; do
    name=${v%%=*}; bin=${v#*=}
    out=$($bin compare --systems tram --rounds 1 --secs 3 $ABX_OPTS 2>&1 | grep -E '^\| tram ' | head -1)
    echo "$i $name $out" | awk -F'|' '{print $1, $3, $5, $9, $10, $11}'
  done <<< "$order"
done
