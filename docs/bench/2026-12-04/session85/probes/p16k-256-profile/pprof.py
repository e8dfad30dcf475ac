import sys,collections,subprocess
# usage: pprof.py data_a pid_a rate_a data_b pid_b rate_b  (rates in calls/s; 5 s)
def load(data,pid,rate):
    out=subprocess.run(['perf','script','-i',data,'-F','pid,ip,sym'],capture_output=True,text=True).stdout
    c=collections.Counter()
    for l in out.splitlines():
        p=l.split(None,2)
        if len(p)<3 or p[0]!=pid: continue
        c[p[2]]+=1
    calls=rate*float(sys.argv[7] if len(sys.argv)>7 else 5)
    return {k:v/4999/calls*1e6 for k,v in c.items()}
a=load(*sys.argv[1:3],float(sys.argv[3])); b=load(*sys.argv[4:6],float(sys.argv[6]))
print('total us/call A %.2f B %.2f'%(sum(a.values()),sum(b.values())))
keys=sorted(set(a)|set(b), key=lambda k: -abs(a.get(k,0)-b.get(k,0)))
for k in keys[:40]: print(f"{a.get(k,0):6.3f} {b.get(k,0):6.3f} {a.get(k,0)-b.get(k,0):+6.3f} {k}")
