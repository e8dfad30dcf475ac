# perf script -i DATA -F pid,ip,sym > g.txt; python3 stacks.py g.txt PID...
# Where the samples that land on irq-enabling points (what the guest's
# timer-based sampling charges a region run with interrupts off to) come from.
import collections, sys
stacks = []; cur = None
for l in open(sys.argv[1]):
    if not l.strip():
        if cur: stacks.append(cur); cur = None
        continue
    if not l.startswith((' ', '\t')):
        cur = [l.split()[0], []]; continue
    parts = l.split(None, 1)
    if cur is not None and len(parts) > 1: cur[1].append(parts[1].strip())
if cur: stacks.append(cur)
for pid in sys.argv[2:]:
    c = collections.Counter(); tot = 0
    for p, fr in stacks:
        if p != pid or not fr: continue
        tot += 1
        if fr[0] in ('_raw_spin_unlock_irqrestore', 'handle_softirqs'):
            c[(fr[0], ' < '.join(fr[1:7]))] += 1
    print('pid', pid, 'samples', tot)
    for (lf, k), v in c.most_common(12): print(f'{v:6d} {lf}: {k}')
