import sys,collections,subprocess
# pp.py data_a pid_a rate_a data_b pid_b rate_b secs
def load(data,pid,rate,secs):
    out=subprocess.run(['perf','script','-G','-i',data,'-F','pid,ip,sym'],capture_output=True,text=True).stdout
    c=collections.Counter()
    for l in out.splitlines():
        p=l.split(None,2)
        if len(p)<1 or p[0]!=pid: continue
        c[p[2] if len(p)>2 else '?']+=1
    calls=rate*secs
    return {k:v/4999/calls*1e6 for k,v in c.items()}
secs=float(sys.argv[7])
a=load(*sys.argv[1:3],float(sys.argv[3]),secs); b=load(*sys.argv[4:6],float(sys.argv[6]),secs)
print('total us/call A %.3f B %.3f'%(sum(a.values()),sum(b.values())))
n=int(sys.argv[8]) if len(sys.argv)>8 else 40
import os
keys=sorted(set(a)|set(b), key=(lambda k: -abs(a.get(k,0)-b.get(k,0))) if os.environ.get("DIFF") else (lambda k: -max(a.get(k,0),b.get(k,0))))
for k in keys[:n]: print(f"{a.get(k,0):6.3f} {b.get(k,0):6.3f} {a.get(k,0)-b.get(k,0):+6.3f} {k.strip()[:100]}")
