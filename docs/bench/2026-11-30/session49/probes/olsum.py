import json, sys, os, statistics as S
d = sys.argv[1]
rows = {}
for name in sorted(os.listdir(d)):
    p = os.path.join(d, name, 'rate.json')
    if not os.path.exists(p): continue
    j = json.load(open(p))
    for st in j['systems'][0]['steps']:
        r = st['rate']; m = S.median(st['p999_rounds_us'])
        rows.setdefault(r, {})[name] = (m, st['latency']['p99_us'], st['latency']['p50_us'], st['dispatched_late_p999_us']['median'])
for r, v in sorted(rows.items()):
    pairs = sorted({k[1:] for k in v})
    lower = 0; n = 0; ra=[]; rb=[]
    print(f"{r//1000}k/s: pair: A p99.9 med-round / B (p99 A/B, dispatcher p99.9 A/B)")
    for i in sorted(pairs, key=int):
        a = v.get('A'+i); b = v.get('B'+i)
        if not a or not b: continue
        n += 1; lower += b[0] < a[0]; ra.append(a[0]); rb.append(b[0])
        print(f"  {i}: {a[0]:8.0f} / {b[0]:8.0f}   p99 {a[1]:7.0f} / {b[1]:7.0f}   disp {a[3]:6.0f} / {b[3]:6.0f}")
    if n: print(f"  B lower in {lower} of {n}; medians A {S.median(ra):.0f} B {S.median(rb):.0f} µs")
