"""What scripts/c1-segments.py and scripts/c1-wakes.py share: reading the
`perf script --ns` output of the system-call tracepoints that
scripts/c1-segments.sh records, and telling each event's system and side.
"""
import bisect
import collections
import re

EVENT = re.compile(r'^\s*(\S+)\s+(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+syscalls:(\w+)(.*)$')


class Event(collections.namedtuple('Event', 'pid tid cpu t name rest')):
    """One tracepoint hit: `t` in seconds, `name` as `sys_enter_sendto`."""


def read_servers(path):
    """The servers' pids (servers.txt: lines of `ps -eo pid,args`) and
    the system each one serves."""
    servers = {}
    for line in open(path):
        f = line.split()
        if '--system' in f:
            servers[f[0]] = f[f.index('--system') + 1]
    return servers


def read_events(lines):
    """The tracepoint events in `lines`, in time order."""
    events = []
    for line in lines:
        m = EVENT.match(line)
        if m:
            _comm, pid, tid, cpu, t, name, rest = m.groups()
            events.append(Event(pid, tid, int(cpu), float(t), name, rest))
    events.sort(key=lambda e: e.t)
    return events


def sides(events, servers):
    """A function from an event to its (system, side), or None for other
    processes' events. The client process runs every system in turn, so
    each of its events goes to the system whose server had an event
    nearest in time (within 200 µs), or to none."""
    per_pid = collections.Counter(e.pid for e in events)
    client = next(p for p, _ in per_pid.most_common() if p not in servers and p != '0')
    marks = [(e.t, servers[e.pid]) for e in events if e.pid in servers]
    times = [t for t, _ in marks]

    def side(e):
        if e.pid in servers:
            return servers[e.pid], 'server'
        if e.pid != client:
            return None
        i = bisect.bisect_left(times, e.t)
        j = min((j for j in (i - 1, i) if 0 <= j < len(times)), key=lambda j: abs(times[j] - e.t))
        return (marks[j][1], 'client') if abs(times[j] - e.t) < 200e-6 else None

    return side
