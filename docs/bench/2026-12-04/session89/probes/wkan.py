import re,subprocess,sys,collections
out=subprocess.run(['perf','script','-i',sys.argv[1]],capture_output=True,text=True).stdout
rate=float(sys.argv[2]); secs=2.0
c=collections.Counter(); pairs=collections.Counter()
for l in out.splitlines():
    m=re.match(r'\s*(\S+)\s+(\d+)\s+\[(\d+)\]\s+[\d.]+:\s+sched:sched_wakeup: comm=(\S+) pid=(\d+) prio=\d+ target_cpu=(\d+)',l)
    if not m: continue
    wcomm,wpid,cpu,tcomm,tpid,tcpu=m.groups()
    if tcomm!='tokio-rt-worker': continue
    where='same' if int(cpu)==int(tcpu) else 'other'
    c[(wcomm if wcomm in ('tokio-rt-worker','swapper/0','swapper/1') else 'other-waker', where)]+=1
    pairs[(wpid,tpid,where)]+=1
calls=rate*secs
for k,v in sorted(c.items()): print(f"{k}: {v/calls:.3f} per call")
print("top waker->wakee pairs:")
for k,v in pairs.most_common(8): print(k, f"{v/calls:.3f}")
