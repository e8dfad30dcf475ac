#!/usr/bin/env bash
# usage: olab.sh OUTDIR PAIRS ENV_B  -- alternating open-loop sweeps of tram, one binary
set -u
out=$1 pairs=$2 envb=$3
mkdir -p "$out"
run() { # name env
  local name=$1
  if [ "$2" = "-" ]; then /tmp/tb-relay rate --systems tram --rates 10k,25k,50k --rounds 3 --out "$out/$name" > "$out/$name.txt" 2>&1
  else env "$2" /tmp/tb-relay rate --systems tram --rates 10k,25k,50k --rounds 3 --out "$out/$name" > "$out/$name.txt" 2>&1; fi
}
for i in $(seq 1 $pairs); do
  if [ $((i % 2)) -eq 1 ]; then run A$i -; run B$i "$envb"; else run B$i "$envb"; run A$i -; fi
done
