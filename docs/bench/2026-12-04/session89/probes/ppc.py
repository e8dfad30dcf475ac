import sys,collections,subprocess
# ppc.py data pid rate secs : per-call us by DSO category for pid
def load(data,pid):
    out=subprocess.run(['perf','script','-i',data,'-F','pid,ip,sym,dso'],capture_output=True,text=True).stdout
    c=collections.Counter(); d=collections.Counter()
    for l in out.splitlines():
        p=l.split()
        if not p or p[0]!=pid: continue
        dso=p[-1]
        c[dso]+=1
    return c
data,pid,rate,secs=sys.argv[1],sys.argv[2],float(sys.argv[3]),float(sys.argv[4])
c=load(data,pid)
calls=rate*secs
for k,v in c.most_common(8): print(f"{v/4999/calls*1e6:7.3f} {k}")
