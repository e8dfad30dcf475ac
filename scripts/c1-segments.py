#!/usr/bin/env python3
"""Reads `perf script --ns` of the epoll_wait, recvfrom and sendto
tracepoints (scripts/c1-segments.sh) and prints, for each system and
side, the median time from each system call event to the next on that
process: `exit_recvfrom -> enter_sendto` is a side's turn from reading a
request (or an answer) to writing its reply (or the next call), in user
space; `exit_epoll_wait -> enter_recvfrom` its wake-up to the read. The
client process runs every system in turn: each of its events is given
to the system whose server had an event nearest in time (within 200 µs).

    c1-segments.py SERVERS_TXT < perf-script-output
"""
import bisect
import collections
import re
import sys

EVENT = re.compile(r'^\s*(\S+)\s+(\d+)/(\d+)\s+\[\d+\]\s+([\d.]+):\s+syscalls:(\w+)(.*)$')


def returned_bytes(rest):
    m = re.search(r'0x([0-9a-f]+)', rest)
    n = int(m.group(1), 16) if m else 0
    return 0 < n < 1 << 40


def main():
    servers = {}
    for line in open(sys.argv[1]):
        f = line.split()
        if '--system' in f:
            servers[f[0]] = f[f.index('--system') + 1]
    events, per_pid = [], collections.Counter()
    for line in sys.stdin:
        m = EVENT.match(line)
        if m:
            pid, t, name, rest = m.group(2), float(m.group(4)), m.group(5), m.group(6)
            events.append((pid, t, name, rest))
            per_pid[pid] += 1
    client = next(p for p, _ in per_pid.most_common() if p not in servers and p != '0')
    marks = sorted((t, servers[p]) for p, t, _, _ in events if p in servers)
    times = [t for t, _ in marks]

    def system_at(t):
        i = bisect.bisect_left(times, t)
        j = min((j for j in (i - 1, i) if 0 <= j < len(times)), key=lambda j: abs(times[j] - t))
        return marks[j][1] if abs(times[j] - t) < 200e-6 else None

    steps, last = collections.defaultdict(list), {}
    for pid, t, name, rest in events:
        if pid in servers:
            key = (servers[pid], 'server')
        elif pid == client:
            key = (system_at(t), 'client')
            if key[0] is None:
                continue
        else:
            continue
        name = name.replace('sys_', '')
        if name == 'exit_recvfrom' and not returned_bytes(rest):
            name = 'exit_recvfrom (nothing)'
        if key in last:
            before, at = last[key]
            steps[key + (f'{before} -> {name}',)].append((t - at) * 1e6)
        last[key] = (name, t)
    print('system       side   step                                        calls     p50 µs')
    for key in sorted(steps):
        v = sorted(steps[key])
        if len(v) >= 1000:
            print(f'{key[0]:12s} {key[1]:6s} {key[2]:42s} {len(v):8d} {v[len(v) // 2]:9.2f}')


main()
