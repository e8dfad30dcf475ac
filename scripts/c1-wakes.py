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
import collections
import sys

from c1_trace import read_events, read_servers, sides


def main():
    events = [e for e in read_events(sys.stdin) if e.name in ('sys_enter_sendto', 'sys_exit_epoll_wait')]
    side_of = sides(events, read_servers(sys.argv[1]))
    # (system, side to be woken) -> the peer's last sendto: (time, cpu)
    pending = {}
    last_cpu = {}
    wakes = collections.defaultdict(list)
    moved = collections.defaultdict(lambda: [0, 0])
    for e in events:
        before, last_cpu[e.tid] = last_cpu.get(e.tid), e.cpu
        key = side_of(e)
        if key is None:
            continue
        system, side = key
        if e.name == 'sys_enter_sendto':
            peer = 'client' if side == 'server' else 'server'
            pending[(system, peer)] = (e.t, e.cpu)
            continue
        sent = pending.pop(key, None)
        if sent is None or e.t - sent[0] > 1e-3:
            continue
        same = sent[1] == e.cpu
        wakes[(system, side, same)].append((e.t - sent[0]) * 1e6)
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
