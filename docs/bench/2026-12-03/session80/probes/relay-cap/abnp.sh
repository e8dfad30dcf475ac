#!/usr/bin/env bash
# abn.sh with a count of tokio's local-queue overflows per run (a uprobe
# probe_tram:ovf_wx on Local::push_overflow in BIN, added beforehand:
#   addr=$(nm BIN | grep push_overflow | awk '{print $1}' | head -1)
#   set -- $(readelf -lW BIN | awk '/R E/{print $2, $3}')
#   perf probe -x BIN -a "ovf_wx=$(printf '0x%x' $((0x$addr - $2 + $1)))"
# perf probe takes the address as a file offset, hence the segment's shift).
# usage: abnp.sh BIN ROUNDS "label:ENV ..." -- compare opts
bin=$1 rounds=$2; shift 2
variants=(); while [ "$1" != "--" ]; do variants+=("$1"); shift; done; shift
for r in $(seq 1 $rounds); do
  n=${#variants[@]}
  for k in $(seq 0 $((n-1))); do
    v=${variants[$(( (k + r) % n ))]}
    label=${v%%:*}; envs=${v#*:}
    row=$(env $envs perf stat -e probe_tram:ovf_wx -a -x, -o /tmp/abnp-stat.txt -- $bin compare --systems tram --rounds 1 --secs 3 "$@" --out /tmp/abn-out 2>&1 | grep -E '^\| tram \|' | head -1)
    echo "$label $r $row ovf $(cut -d, -f1 /tmp/abnp-stat.txt | grep -E '^[0-9]+$')"
  done
done
