import subprocess,time,threading,os,sys,re,collections
args=sys.argv[1:]
p=subprocess.Popen(['/tmp/b92/head']+args,stdout=subprocess.PIPE,stderr=subprocess.STDOUT,text=True)
samples=[]
def kids(pid):
    try: return [int(x) for x in open(f'/proc/{pid}/task/{pid}/children').read().split()]
    except Exception: return []
def workers(pid):
    out=[]
    try:
        for t in sorted(os.listdir(f'/proc/{pid}/task')):
            try:
                st=open(f'/proc/{pid}/task/{t}/stat').read()
                name=st[st.index('(')+1:st.rindex(')')]
                if not name.startswith('tokio'): continue
                f=st[st.rindex(')')+2:].split()
                out.append((f[0],int(f[36]),int(f[11])+int(f[12])))  # state, cpu, jiffies
            except Exception: pass
    except Exception: pass
    return out
stop=False
def sampler():
    while not stop:
        c=workers(p.pid); s=[]
        for k in kids(p.pid): s+=workers(k)
        samples.append((time.time(),c,s)); time.sleep(0.005)
th=threading.Thread(target=sampler); th.start()
lines=[]
for line in p.stdout: lines.append((time.time(),line.rstrip()))
stop=True; th.join()
for (t,l) in lines:
    m=re.search(r'round (\d+): tram\s+([\d.]+[Mk]) calls/s',l)
    if not m: continue
    win=[x for x in samples if t-2.0<=x[0]<=t and len(x[1])>=2 and len(x[2])>=2]
    cnt=collections.Counter()
    for _,c,s in win:
        cr=[w for w in c if w[0]=='R']; sr=[w for w in s if w[0]=='R']
        key=('C'+''.join(str(w[1]) for w in cr))+' S'+''.join(str(w[1]) for w in sr)
        cnt[key]+=1
    n=sum(cnt.values())
    print(f"round {m.group(1)} {m.group(2):>6} n={n} "+' '.join(f"{k}:{v*100//n}%" for k,v in cnt.most_common(7)))
