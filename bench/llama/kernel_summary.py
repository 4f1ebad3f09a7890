#!/usr/bin/env python3
"""Nsight Compute's raw CSV (one gpu__time_duration per kernel launch, bench/llama/kernel_profile.sh) of a
`zeroplan run` summarised: the last STEPS' kernels (the launches after the last optimizer kernel of the step
before), grouped by kernel name and grid, heaviest first, with their share of the step.

  kernel_summary.py NCU.csv STEPS
"""
import collections
import csv
import sys


def main():
    path, steps = sys.argv[1], int(sys.argv[2])
    lines = open(path, errors="replace").read().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith('"ID"'))
    rows = list(csv.reader(lines[start:]))
    head = rows[0]
    col = {n: head.index(n) for n in head}
    launches = []
    for r in rows[1:]:
        if len(r) != len(head) or r[col["Metric Name"]] != "gpu__time_duration.sum":
            continue
        unit = r[col["Metric Unit"]]
        v = float(r[col["Metric Value"]].replace(",", ""))
        scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}[unit]
        launches.append((r[col["Kernel Name"]], r[col.get("Grid Size", col["Kernel Name"])], v * scale))
    # The optimizer's AdamW kernels close each step: the timed steps are the launches after the (steps+1)-th last
    # run of AdamW kernels.
    ends = [i for i, (n, _, _) in enumerate(launches) if "adamw" in n.lower()]
    runs = [i for k, i in enumerate(ends) if k == 0 or ends[k - 1] != i - 1]  # first AdamW launch of each step
    first = 0
    if len(runs) > steps:
        prev_run_start = runs[-steps - 1]
        first = next(i for i in range(prev_run_start, len(launches)) if "adamw" not in launches[i][0].lower())
    timed = launches[first:]
    total = sum(us for _, _, us in timed) / steps
    print("%d launches per step, %.2f ms of kernels per step (the last %d steps of %d launches)" %
          (len(timed) // steps, total / 1e3, steps, len(launches)))
    groups = collections.defaultdict(lambda: [0, 0.0])
    for n, g, us in timed:
        key = (n[:100], g)
        groups[key][0] += 1
        groups[key][1] += us
    for (n, g), (c, us) in sorted(groups.items(), key=lambda kv: -kv[1][1])[:30]:
        print("%5.1f%% %8.2f ms/step %4d x %8.1f us grid %-14s %s" % (100 * us / steps / total, us / steps / 1e3,
              c // steps, us / c, g, n))


if __name__ == "__main__":
    main()
