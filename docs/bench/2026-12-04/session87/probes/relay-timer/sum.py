import collections,statistics,sys
def conv(x): return float(x[:-1])*(1e6 if x.endswith('M') else 1e3)
f=sys.argv[1]; ref=sys.argv[2]
d=collections.defaultdict(dict)
for l in open(f):
    p=l.split()
    if len(p)<6: continue
    d[int(p[0])][p[1]]=(conv(p[2]),float(p[4])+float(p[5]),float(p[3]))
names=list(d[1].keys())
for n in names:
    rates=[d[i][n][0] for i in d]; cpu=[d[i][n][1] for i in d]; p50=[d[i][n][2] for i in d]
    r=[d[i][n][0]/d[i][ref][0] for i in d]
    print(f"{n:8s} median {statistics.median(rates)/1e6:.3f}M cpu {statistics.median(cpu):.2f} p50 {statistics.median(p50):.1f}  vs {ref}: median ratio {statistics.median(r):.3f} ahead {sum(x>1 for x in r)}/{len(r)}")
