# Rounds of every open-loop sweep of the session (rates to 400k/s) binned by
# how busy the two vCPUs were: (client + server CPU a call) x rate / 2 CPUs.
import json, glob, collections, os
here = os.path.dirname(os.path.abspath(__file__))
files = sorted(set(glob.glob(os.path.join(here, '..', '**', 'rate.json'), recursive=True)))
bins = collections.defaultdict(lambda: [0, 0])
for f in files:
    for x in json.load(open(f))['systems']:
        for st in x['steps']:
            if st['rate'] > 400000:
                continue
            busy = (st['client_cpu_us']['median'] + st['server_cpu_us']['median']) * st['rate'] / 2e6
            r = st['p999_rounds_us']
            k = min(int(busy * 10), 9)
            bins[k][0] += sum(v > 5000 for v in r)
            bins[k][1] += len(r)
print(f"{len(files)} sweeps")
for k in sorted(bins):
    b, n = bins[k]
    print(f"CPUs {k*10:3d}-{k*10+10:3d}% busy: {n:4d} rounds, {b:4d} over 5 ms ({100*b/n:.0f}%)")
