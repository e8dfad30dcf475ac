import sys,statistics,collections
d=collections.defaultdict(list); p=collections.defaultdict(list); cpu=collections.defaultdict(list)
for line in open(sys.argv[1]):
    f=line.split()
    if len(f)<4: continue
    cols=[c.strip() for c in line.split('|')]
    rate=cols[2]; v=float(rate[:-1])*(1e6 if rate.endswith('M') else 1e3)
    d[f[0]].append(v); p[f[0]].append(float(cols[6])); cpu[f[0]].append(float(cols[8])+float(cols[9]))
for k in d: print(k, 'n',len(d[k]),'median %.0fk'%(statistics.median(d[k])/1e3), 'p99.9 med %.0f'%statistics.median(p[k]), 'cpu %.2f'%statistics.median(cpu[k]))
