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
import collections
import re
import sys

from c1_trace import read_events, read_servers, sides


def returned_bytes(rest):
    m = re.search(r'0x([0-9a-f]+)', rest)
    n = int(m.group(1), 16) if m else 0
    return 0 < n < 1 << 40


def main():
    events = read_events(sys.stdin)
    side_of = sides(events, read_servers(sys.argv[1]))
    steps, last = collections.defaultdict(list), {}
    for e in events:
        key = side_of(e)
        if key is None:
            continue
        name = e.name.replace('sys_', '')
        if name == 'exit_recvfrom' and not returned_bytes(e.rest):
            name = 'exit_recvfrom (nothing)'
        if key in last:
            before, at = last[key]
            steps[key + (f'{before} -> {name}',)].append((e.t - at) * 1e6)
        last[key] = (name, e.t)
    print('system       side   step                                        calls     p50 µs')
    for key in sorted(steps):
        v = sorted(steps[key])
        if len(v) >= 1000:
            print(f'{key[0]:12s} {key[1]:6s} {key[2]:42s} {len(v):8d} {v[len(v) // 2]:9.2f}')


main()
