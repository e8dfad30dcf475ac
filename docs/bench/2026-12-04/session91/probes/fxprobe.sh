#!/bin/bash
# fxprobe.sh ENV: counts the server's futex wakes by origin over 1.5 s at 256 in flight
env $1 /tmp/bin/tram-bench compare --systems tram --concurrency 256 --rounds 3 --secs 3 --out /tmp/pw > /tmp/pw.log 2>&1 &
sleep 4; CP=$(pgrep -f 'compare --systems tram --concurrency 256 --rounds 3 --secs 3' | head -1); SP=$(cat /proc/$CP/task/$CP/children | awk '{print $1}')
perf record -e syscalls:sys_enter_futex --call-graph dwarf,16384 -p $SP -o /tmp/fx.data -- sleep 1.5 >/dev/null 2>&1
wait
perf script -i /tmp/fx.data -F tid,trace,ip,sym 2>/dev/null > /tmp/fx.txt
python3 - <<'P'
import collections,re
evs=open('/tmp/fx.txt').read().split('\n\n')
c=collections.Counter()
for e in evs:
    L=[l.strip() for l in e.strip().split('\n') if l.strip()]
    if len(L)<2: continue
    op=re.search(r'op: (0x[0-9a-f]+)',L[0]).group(1)
    names=[l.split(' ',1)[1] if ' ' in l else l for l in L[1:]]
    fn=[n for n in names if '(inlined)' not in n][1:4]
    c[(op,' < '.join(f[:60] for f in fn))]+=1
for k,v in c.most_common(6): print(v,k)
P
grep -E '^\| tram' /tmp/pw.log
