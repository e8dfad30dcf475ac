import sys, statistics as st, re
def num(x):
    x=x.strip(); m={'k':1e3,'M':1e6}
    return float(x[:-1])*m[x[-1]] if x[-1] in m else float(x)
rows={}
for line in open(sys.argv[1]):
    p=line.split('|')
    if len(p)<10: continue
    lab,r=p[0].split()[:2]
    rows.setdefault(lab,{})[int(r)]=dict(rate=num(p[2]),p999=float(p[6]),cpu=float(p[8])+float(p[9]),sw=p[10].strip())
base=sys.argv[2] if len(sys.argv)>2 else 'all'
for lab,d in rows.items():
    rs=sorted(d)
    rat=[d[r]['rate']/rows[base][r]['rate'] for r in rs if r in rows[base]]
    tail=[d[r]['p999']/rows[base][r]['p999'] for r in rs if r in rows[base]]
    print(f"{lab:7} rate med {st.median([d[r]['rate'] for r in rs])/1e3:7.0f}k  vs {base} {st.median(rat):.3f} ahead {sum(x>1 for x in rat)}/{len(rat)}  p99.9 med {st.median([d[r]['p999'] for r in rs]):7.0f} ratio {st.median(tail):.2f}  cpu {st.median([d[r]['cpu'] for r in rs]):.2f}")
