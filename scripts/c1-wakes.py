#!/usr/bin/env python3
"""Reads `perf script --ns` of the epoll_wait, recvfrom and sendto
tracepoints (scripts/c1-segments.sh) and prints, for each system and
side, where that side woke at one call in flight: on the CPU of the peer
that woke it (the peer's `sendto` entered on the same CPU as this side's
`epoll_wait` returned) or on the other one, how often each, and the
median and 90th percentile time from the peer's `sendto` to the wake-up.
Then, for each, how often the side woke on the waker's CPU when it had
last run there and when it had last run on the other CPU: whether the
kernel moves a woken thread or leaves it where it was.

    c1-wakes.py SERVERS_TXT < perf-script-output
"""
import bisect
import collections
import re
import sys

EVENT = re.compile(r'^\s*(\S+)\s+(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+syscalls:(\w+)(.*)$')


def main():
    servers = {}
    for line in open(sys.argv[1]):
        f = line.split()
        if '--system' in f:
            servers[f[0]] = f[f.index('--system') + 1]
    events, per_pid = [], collections.Counter()
    for line in sys.stdin:
        m = EVENT.match(line)
        if m and m.group(6) in ('sys_enter_sendto', 'sys_exit_epoll_wait'):
            pid, tid, cpu, t = m.group(2), m.group(3), int(m.group(4)), float(m.group(5))
            events.append((t, pid, tid, cpu, m.group(6)))
            per_pid[pid] += 1
    events.sort()
    client = next(p for p, _ in per_pid.most_common() if p not in servers and p != '0')
    marks = [(t, servers[p]) for t, p, _, _, _ in events if p in servers]
    times = [t for t, _ in marks]

    def system_at(t):
        i = bisect.bisect_left(times, t)
        j = min((j for j in (i - 1, i) if 0 <= j < len(times)), key=lambda j: abs(times[j] - t))
        return marks[j][1] if abs(times[j] - t) < 200e-6 else None

    # (system, side that wakes) -> the peer's last sendto: (time, cpu)
    pending = {}
    last_cpu = {}
    wakes = collections.defaultdict(list)
    moved = collections.defaultdict(lambda: [0, 0])
    for t, pid, tid, cpu, name in events:
        before, last_cpu[tid] = last_cpu.get(tid), cpu
        if pid in servers:
            system, side = servers[pid], 'server'
        elif pid == client:
            system, side = system_at(t), 'client'
            if system is None:
                continue
        else:
            continue
        if name == 'sys_enter_sendto':
            peer = 'client' if side == 'server' else 'server'
            pending[(system, peer)] = (t, cpu)
            continue
        sent = pending.pop((system, side), None)
        if sent is None or t - sent[0] > 1e-3:
            continue
        same = sent[1] == cpu
        wakes[(system, side, same)].append((t - sent[0]) * 1e6)
        if before is not None:
            counts = moved[(system, side, before == sent[1])]
            counts[0] += 1
            counts[1] += same

    print(f"{'system':12} {'side':6} {'woke on':16} {'share':>6} {'wakes':>7} {'p50 µs':>8} {'p90 µs':>8}")
    for system in sorted({k[0] for k in wakes}):
        for side in ('client', 'server'):
            total = sum(len(wakes[(system, side, s)]) for s in (True, False))
            for same in (True, False):
                v = sorted(wakes[(system, side, same)])
                if v:
                    where = "the waker's CPU" if same else 'the other CPU'
                    print(f"{system:12} {side:6} {where:16} {len(v) / total:6.1%} {len(v):7d} "
                          f"{v[len(v) // 2]:8.2f} {v[len(v) * 9 // 10]:8.2f}")
    print()
    print(f"{'system':12} {'side':6} {'last ran on':16} {'wakes':>7} {'woke on the waker CPU':>22}")
    for (system, side, was_there), (n, same) in sorted(moved.items()):
        where = "the waker's CPU" if was_there else 'the other CPU'
        print(f"{system:12} {side:6} {where:16} {n:7d} {same / n:22.1%}")


if __name__ == '__main__':
    main()
