# Per pair of an ab.sh file: B/A of p99.9 and of CPU a call (client +
# server), medians, and in how many pairs B's was lower.
import sys, statistics as st
for f in sys.argv[1:]:
    rows = {}
    for line in open(f):
        p = line.split()
        if len(p) > 4 and p[0] in "AB" and p[2] == "probe":
            cols = [c.strip() for c in line.split("|")]
            rows[(p[0], int(p[1]))] = (float(cols[3]), float(cols[4]) + float(cols[5]))
    pairs = sorted({k[1] for k in rows})
    t = [rows[("B", i)][0] / rows[("A", i)][0] for i in pairs]
    c = [rows[("B", i)][1] / rows[("A", i)][1] for i in pairs]
    ca = st.median(rows[("A", i)][1] for i in pairs)
    cb = st.median(rows[("B", i)][1] for i in pairs)
    print(f"{f}: p99.9 B/A median {st.median(t):.2f} (lower in {sum(x < 1 for x in t)} of {len(t)}); "
          f"CPU a call {ca:.2f} -> {cb:.2f} µs, B/A {st.median(c):.3f}")
