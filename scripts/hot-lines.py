#!/usr/bin/env python3
"""The code a call runs, by 64-byte line: which lines of instructions run
on every call, and whose functions they lie in. The first-level
instruction cache holds 512 such lines; at one call in flight the
kernel's network path runs between every two polls and evicts most of
them, so each line a call runs is a fetch from further out, and the
number of lines (not the number of instructions) is what a call's
latency pays for its code.

Reads two callgrind dumps of `tram-bench instructions`, one of no calls
and one of N, taken with

    valgrind --tool=callgrind --dump-instr=yes --dump-line=no \
        --compress-strings=no --compress-pos=no \
        --callgrind-out-file=OUT tram-bench instructions --calls N --concurrency 1

and counts an instruction as run on every call when it ran at least 0.9
times a call more in the second.

    scripts/hot-lines.py OUT_NONE OUT_N N [FUNCTIONS_LISTED]
"""
import sys, collections, re
def load(path):
    counts = collections.Counter(); fnof = {}
    fn = ob = None; skip = False
    for line in open(path, errors='replace'):
        line = line.rstrip('\n')
        if not line: continue
        if line.startswith('fn='): fn = line[3:]; continue
        if line.startswith('ob='): ob = line[3:]; continue
        if line.startswith('calls='): skip = True; continue
        if line[0] == '0' and line.startswith('0x'):
            if skip: skip = False; continue
            parts = line.split()
            a = int(parts[0], 16); c = int(parts[1]) if len(parts) > 1 else 0
            counts[a] += c; fnof[a] = (ob, fn)
        elif line[0] in '+-*':
            raise SystemExit('compressed positions: use --compress-pos=no')
    return counts, fnof
c0, _ = load(sys.argv[1]); cn, fnof = load(sys.argv[2]); n = int(sys.argv[3])
hot = {a: cn[a] - c0.get(a, 0) for a in cn if cn[a] - c0.get(a, 0) >= n * 0.9}
lines = collections.defaultdict(set); instrs = collections.Counter()
for a, d in hot.items():
    ob, fn = fnof[a]; lines[(ob, fn)].add(a >> 6); instrs[(ob, fn)] += d
def crate(ob, fn):
    ob = (ob or '').split('/')[-1]
    m = re.match(r'[<&]*(?:impl )?([a-z_0-9]+)::', fn or '')
    if 'libc' in ob or 'ld-linux' in ob: return 'libc'
    if 'vgpreload' in ob: return 'valgrind'
    return m.group(1) if m else fn[:20]
allines = set().union(*lines.values())
print(f'hot lines {len(allines)} ({len(allines)*64/1024:.1f} KiB), instructions/call {sum(instrs.values())/n:.0f}')
bycrate = collections.defaultdict(set); bycrate_i = collections.Counter()
for (ob, fn), ls in lines.items():
    bycrate[crate(ob, fn)] |= ls; bycrate_i[crate(ob, fn)] += instrs[(ob, fn)]
for k, ls in sorted(bycrate.items(), key=lambda kv: -len(kv[1]))[:15]:
    print(f'  {k:30s} {len(ls):4d} lines {bycrate_i[k]/n:7.0f} instr')
print()
for (ob, fn), ls in sorted(lines.items(), key=lambda kv: -len(kv[1]))[:int(sys.argv[4]) if len(sys.argv) > 4 else 60]:
    print(f'{len(ls):4d} {instrs[(ob, fn)]/n:6.0f}  {fn[:150]}')
