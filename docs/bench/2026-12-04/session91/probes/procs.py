import subprocess,time,threading,os,sys,re
p=subprocess.Popen(['/tmp/bin/tb-suite']+sys.argv[1:],stdout=subprocess.PIPE,stderr=subprocess.STDOUT,text=True)
samples=[]
def cpu(pid):
    try:
        f=open(f'/proc/{pid}/stat').read(); f=f[f.rindex(')')+2:].split(); return int(f[11])+int(f[12])
    except Exception: return None
def cmd(pid):
    try: return open(f'/proc/{pid}/cmdline').read().replace('\0',' ')
    except Exception: return ''
stop=False
def sampler():
    while not stop:
        kids=[]
        try: kids=[int(x) for x in open(f'/proc/{p.pid}/task/{p.pid}/children').read().split()]
        except Exception: pass
        d={'client':cpu(p.pid)}
        for k in kids:
            d[(lambda c: c[c.index('--system')+1] if '--system' in c else str(k))(cmd(k).split())]=cpu(k)
        samples.append((time.time(),d)); time.sleep(0.25)
th=threading.Thread(target=sampler); th.start()
lines=[(time.time(),l.rstrip()) for l in p.stdout]
stop=True; th.join()
def at(t): return min(samples,key=lambda s:abs(s[0]-t))[1]
for t,l in lines:
    m=re.search(r'C=(\d+), round (\d+): +(\S+) +(\S+) calls/s',l)
    if not m: continue
    a=at(t-2.0); b=at(t)
    use={k:(b[k]-a.get(k,0)) for k in b if b[k] is not None and a.get(k) is not None}
    print(f"C={m.group(1)} r{m.group(2)} {m.group(3):>11} {m.group(4):>6}  "+' '.join(f"{k}:{v}" for k,v in use.items() if v>2))
