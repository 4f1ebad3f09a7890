#!/usr/bin/env python3
"""One training step's GPU kernels, from Nsight Compute's per-kernel duration (issue 37's speed work): where a step's
GPU time goes, ours beside PyTorch's, by kernel.

  ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base --log-file RUN.csv PROGRAM ...
  kernel_profile.py RUN.csv [--top 25] [--json OUT.json]

The program runs a few identical steps; the last step is found as the shortest tail of the kernel sequence that
repeats the kernels before it (the optimizer's kernels run once a step, so no shorter tail repeats), and its kernels
are summed by name: launches, total and mean duration. The sum is the GPU's busy time for the step, not the step:
gaps between kernels (launch overhead) are left out, which is the point when comparing kernels.
"""
import argparse
import csv
import json
import re
import sys
from collections import defaultdict


def read_kernels(path):
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        sys.exit(f"{path}: no CSV header (\"ID\",...) from ncu --csv")
    kernels = []
    for row in csv.DictReader(lines[start:]):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit, value = row.get("Metric Unit", ""), float(row["Metric Value"].replace(",", ""))
        scale = {"ns": 1e-9, "nsecond": 1e-9, "us": 1e-6, "usecond": 1e-6, "ms": 1e-3, "msecond": 1e-3}.get(unit)
        if scale is None:
            sys.exit(f"{path}: unexpected unit {unit!r} for gpu__time_duration.sum (pass --print-units base)")
        kernels.append((row["Kernel Name"], value * scale, row.get("Grid Size", ""), row.get("Block Size", "")))
    return kernels


def last_step(kernels, least=50):
    names = [k[0] for k in kernels]
    for period in range(least, len(names) // 2 + 1):
        if names[-period:] == names[-2 * period:-period]:
            return kernels[-period:]
    sys.exit(f"no repeating tail of at least {least} kernels among {len(names)}: run more identical steps")


def short(name, width=110):
    name = re.sub(r"\s+", " ", name)
    return name if len(name) <= width else name[:width - 3] + "..."


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    step = last_step(read_kernels(a.csv))
    by_name = defaultdict(lambda: [0, 0.0])
    for name, seconds, _, _ in step:
        by_name[name][0] += 1
        by_name[name][1] += seconds
    total = sum(s for _, s, _, _ in step)
    print(f"{a.csv}: one step = {len(step)} kernels, {1e3 * total:.2f} ms of kernel time")
    print(f"{'ms':>8} {'share':>6} {'launches':>8} {'mean us':>8}  kernel")
    rows = sorted(by_name.items(), key=lambda kv: -kv[1][1])
    for name, (count, seconds) in rows[:a.top]:
        print(f"{1e3 * seconds:8.3f} {100 * seconds / total:5.1f}% {count:8d} {1e6 * seconds / count:8.1f}  {short(name)}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"kernels": len(step), "kernel_seconds": total,
                       "by_name": [{"name": n, "launches": c, "seconds": s} for n, (c, s) in rows]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
