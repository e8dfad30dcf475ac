import re,collections,sys
c=collections.Counter()
cur=None; stack=[]
def flush():
    if cur is None: return
    pid,state=cur
    key=None
    for s in stack:
        for k in ('futex','epoll_wait','sched_yield','recvfrom','writev','sendto','exit_to_user_mode','irqentry','schedule_hrtimeout','__x64_sys_write','schedule_idle'):
            if k in s: key=k;break
        if key: break
    c[(pid,state,key or (stack[1] if len(stack)>1 else '?'))]+=1
for line in open(sys.argv[1]):
    if not line.startswith('\t') and not line.startswith(' ' * 8):
        m=re.match(r'\s*(\d+)/(\d+)\s+.*prev_state=(\S+)',line)
        flush(); cur=(m.group(1),m.group(3)) if m else None; stack=[]
    else:
        p=line.split()
        if len(p)>=2: stack.append(p[1])
flush()
for k,v in c.most_common(14): print(v,k)
