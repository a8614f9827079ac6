#!/usr/bin/env python3
"""Sums a decode step's kernels from a KVAD_GPU_TRACE file (written by `KVAD_GPU_TRACE=f kvad bench ...`).

Each record is `ns grid_x grid_y block_x`, taken by a kernel's first block as it passed its PDL wait, when the
kernel before it had ended: the gap to the next record is that kernel's time on the critical path inside the
graph. A step starts at the embedding kernel (grid rows x any, block 256: one block a row, or a row's columns over
grid y); the steps with the most common kernel
count are decode steps. Marks inside kernels (common.cuh's trace_mark: 901-903 the norm tail's last block as it
starts, after its sum, at its end; 910-913 decode attention's first block before its PDL wait, before its keys,
after them, after its merge) are records of shape (id, 0, 0). Per kernel position: the mean gap over those
steps; then the sums by launch shape.
    python3 scripts/gpu/trace.py TRACE [ROWS]     (one report per decode-step shape seen 5 times or more)
"""
import collections
import statistics
import sys

path = sys.argv[1]
rows = int(sys.argv[2]) if len(sys.argv) > 2 else 1
recs = [tuple(int(v) for v in line.split()) for line in open(path) if line.strip()]
starts = [i for i, r in enumerate(recs) if r[1] == rows and r[2] >= 1 and r[3] == 256]
steps = [recs[a:b] for a, b in zip(starts, starts[1:])]
if not steps:
    sys.exit("no decode steps found")
# The most common sequence of launch shapes (one variant's decode step; a file of several variants holds several).
shapes = collections.Counter(tuple(r[1:] for r in s) for s in steps)


def report(ref, all_steps):
    n = len(ref)
    # A step's last record is followed by the host's next launch: only gaps inside a step count.
    steps = [s for s in all_steps if tuple(r[1:] for r in s) == ref]
    print(f"{len(steps)} decode steps of {n} kernels; step (first to last record) median "
          f"{statistics.median(s[-1][0] - s[0][0] for s in steps) / 1e3:.1f} us")
    # The last kernel (the head product, or the sampling after it) has no record after it inside the step: its
    # time shows only as the gap to the next step's first record, with the host's turn between steps in it.
    tails = [b[0][0] - a[-1][0] for a, b in zip(all_steps, all_steps[1:]) if tuple(r[1:] for r in a) == ref]
    if tails:
        print(f"last record to the next step's first (last kernel + host), median "
              f"{statistics.median(tails) / 1e3:.1f} us")
    gaps = [[s[i + 1][0] - s[i][0] for s in steps] for i in range(n - 1)]
    # Means, not medians: the global timer may tick in steps of a microsecond or so, and means of many steps resolve
    # what one step's ticks cannot.
    med = [statistics.mean(g) / 1e3 for g in gaps]
    res = min((d for g in gaps for d in g if d > 0), default=0)
    print(f"smallest nonzero gap {res} ns")
    by = collections.OrderedDict()
    for i in range(n - 1):
        key = steps[0][i][1:]
        c, t = by.get(key, (0, 0.0))
        by[key] = (c + 1, t + med[i])
    tot = sum(med)
    print(f"sum of median gaps {tot:.1f} us")
    print("   us a step  share  count   us each   grid_x grid_y block")
    for key, (c, t) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        print(f"{t:11.1f} {100 * t / tot:5.1f}% {c:6d} {t / c:9.2f}   {key[0]:6d} {key[1]:6d} {key[2]:5d}")
    print("first layer, kernel by kernel (us):", " ".join(f"{steps[0][i][1]}x{steps[0][i][3]}:{med[i]:.1f}" for i in range(min(12, n - 1))))


# Every decode step shape seen at least 5 times (a file of several variants holds one for each, in order).
for ref, count in shapes.most_common():
    if count >= 5:
        report(ref, steps)
        print()
