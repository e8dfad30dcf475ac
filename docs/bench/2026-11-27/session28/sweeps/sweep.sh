#!/usr/bin/env bash
# usage: sweep.sh CYCLES VAR "v1 v2 ..." [extra compare opts]
cycles=$1 var=$2 vals=$3; shift 3
out=${OUT_DIR:-.}/$var-$(date +%H%M%S).txt
json=$(mktemp -d)
for c in $(seq 1 $cycles); do
  for v in $vals; do
    line=$(env $var=$v ${TRAM_BENCH:-target/release/tram-bench} compare --systems tram --rounds 1 --secs 3 --concurrency 256 "$@" --out $json 2>&1 | grep -E "^\| tram ")
    probe=$(python3 -c "import json;d=json.load(open('$json/compare.json'));print(d['machine']['core_to_core_ns'])" 2>/dev/null)
    echo "$c $v $line $probe" | tee -a $out
  done
done
python3 - "$out" <<'PY'
import sys,statistics,re,collections
d=collections.defaultdict(list); cpu=collections.defaultdict(list)
def num(s):
    s=s.strip(); m={'k':1e3,'M':1e6}
    return float(s[:-1])*m[s[-1]] if s[-1] in m else float(s)
for l in open(sys.argv[1]):
    p=l.split('|'); v=l.split()[1]
    d[v].append(num(p[2])); cpu[v].append(float(p[8])+float(p[9]))
for v in d: print(v, 'median %.0fk'%(statistics.median(d[v])/1e3), 'cpu %.2f'%statistics.median(cpu[v]), ' '.join('%.0f'%(x/1e3) for x in d[v]))
PY
