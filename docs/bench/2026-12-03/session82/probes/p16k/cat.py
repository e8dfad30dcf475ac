import subprocess,sys,collections
def cls(sym,dso):
    if sym=='_copy_to_iter': return 'cp_to'
    if sym=='_copy_from_iter': return 'cp_from'
    if 'memmove' in sym or 'memcpy' in sym: return 'memmove'
    if sym in('_raw_spin_unlock_irqrestore','_raw_spin_unlock_irq','finish_task_switch.isra.0','__schedule','__pv_queued_spin_lock_slowpath'): return 'k_sched'
    if 'kernel' in dso: return 'k_other'
    return 'user'
for i in sys.argv[1:]:
    c,s,rate=None,None,None
    l=open(f'r{i}.txt').read()
    import re
    rate=float(re.search(r'(?:tram|floor)\s+([\d.]+)k calls/s',l).group(1))*1e3
    out=subprocess.run(['perf','script','-i',f'pr{i}.data','-F','pid,ip,sym,dso'],capture_output=True,text=True).stdout
    cnt=collections.Counter()
    pids=collections.Counter()
    for line in out.splitlines():
        p=line.split()
        if len(p)<3: continue
        pid=int(p[0]); sym=p[2] if len(p)>3 else '?'; dso=p[-1]
        pids[pid]+=1
        cnt[(pid,cls(sym,dso))]+=1
    top=[p for p,_ in pids.most_common(3)]
    calls=rate*2.5
    row=[]
    for pid in sorted(p for p in top if p!=0):
        for k in ['cp_to','cp_from','memmove','k_sched','k_other','user']:
            row.append(f"{cnt[(pid,k)]*250/calls:5.2f}")
        row.append('|')
    print(i,int(rate/1e3),'idle',f"{pids[0]*250/calls:5.2f}",' '.join(row))
print("cols per process: cp_to cp_from memmove k_sched k_other user (µs/call), client first")
