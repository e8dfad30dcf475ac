import sys,statistics,collections
d=collections.defaultdict(lambda:collections.defaultdict(list))
for l in open(sys.argv[1]):
    x=l.split()
    if 'tram' not in l: continue
    c=[y.strip() for y in l.split('|')]
    r=c[2]; v=float(r[:-1])*(1e6 if r.endswith('M') else 1e3)
    d[x[0]]['rate'].append(v); d[x[0]]['p999'].append(float(c[6])); d[x[0]]['cpu'].append(float(c[8])+float(c[9]))
    if x[-2]=='ovf': d[x[0]]['ovf'].append(int(x[-1]))
for k in d: print(k, 'n', len(d[k]['rate']), 'median %.0fk'%(statistics.median(d[k]['rate'])/1e3), 'p99.9 %.0f'%statistics.median(d[k]['p999']), 'cpu %.2f'%statistics.median(d[k]['cpu']), 'ovf', sorted(d[k]['ovf']))
