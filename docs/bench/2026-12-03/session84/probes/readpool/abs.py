import sys,statistics
rows=[l.split() for l in open(sys.argv[1]) if l.strip()]
d={}
def num(s):
    m={'k':1e3,'M':1e6}
    return float(s[:-1])*m[s[-1]] if s[-1] in m else float(s)
for r in rows:
    d.setdefault(r[1],{})[int(r[0])]=(num(r[2]),float(r[3])+float(r[4]))
names=list(d)
b=d[names[0]]
for n in names:
    x=d[n]
    print(n,'calls med',statistics.median(v[0] for v in x.values()),'cpu med',round(statistics.median(v[1] for v in x.values()),2), end=' ')
    if n!=names[0]:
        rat=[x[i][0]/b[i][0] for i in x if i in b]
        print('ratio med',round(statistics.median(rat),3),'ahead',sum(r>1 for r in rat),'of',len(rat),end='')
    print()
