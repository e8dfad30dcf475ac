"""Per 1k calls: each run's kernel entries by process (run.sh's files)."""
import glob, re, sys
d = sys.argv[1]
names = ['sendto', 'recvfrom', 'epoll_wait', 'futex', 'writev', 'write', 'read', 'sched_yield', 'context-switches']
print('| run | calls/s | side | ' + ' | '.join(names) + ' |')
print('|' + '---|' * (len(names) + 3))
for t in sorted(glob.glob(f'{d}/*.txt')):
    base = t[:-4]
    m = re.search(r'^\| \S+ \| ([\d.]+)([kM]) ', open(t).read(), re.M)
    rate = float(m.group(1)) * (1e6 if m.group(2) == 'M' else 1e3)
    for side in ['client', 'server']:
        try:
            rows = open(f'{base}.{side}.csv').read().splitlines()
        except FileNotFoundError:
            continue
        c = {}
        for r in rows:
            p = r.split(',')
            if len(p) > 2 and p[0].strip().isdigit():
                c[p[2].replace('syscalls:sys_enter_', '')] = int(p[0])
        per = [f"{c.get(n, 0) / (rate * 3) * 1000:.2f}" for n in names]
        print(f"| {base.split('/')[-1]} | {rate/1e3:.0f}k | {side} | " + ' | '.join(per) + ' |')
