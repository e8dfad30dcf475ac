import sys,collections,statistics
# pair.py FILE A B : per-round B/A of calls/s and of p99.9
f,a,b=sys.argv[1:4]
d=collections.defaultdict(dict)
for line in open(f):
    x=line.split()
    if len(x)<4: continue
    cols=[c.strip() for c in line.split('|')]
    r=cols[2]; v=float(r[:-1])*(1e6 if r.endswith('M') else 1e3)
    d[x[1]][x[0]]=(v,float(cols[6]))
rs=[];ps=[]
for k in sorted(d,key=int):
    if a in d[k] and b in d[k]:
        rs.append(d[k][b][0]/d[k][a][0]); ps.append(d[k][b][1]/d[k][a][1])
print(f"{b}/{a}: calls/s median {statistics.median(rs):.3f}, ahead {sum(r>1 for r in rs)} of {len(rs)}; p99.9 median ratio {statistics.median(ps):.3f}, lower {sum(p<1 for p in ps)} of {len(ps)}")
