#!/usr/bin/env python3
"""The host's speed at the work DeepSpeed's Python does, for `zeroplan plan --host-op-seconds` and a cluster
description's host.eager_op_seconds:

  python3 bench/deepspeed/host_probe.py            (on the training host, GPU idle; prints JSON)

bench/deepspeed/ds_peer.py runs the same probe before each measured run and stores it with the row
("host_probe"). Seconds per small eager CUDA operation (x.add_ on 256 floats, issued back to back: the host's
dispatch and launch bound it, not the GPU) and per call of a small Python function; each the median of 5 timings."""
import json
import statistics
import time

import torch


def eager_op_seconds_now(device, ops=2000, repeats=3):
    """A short reading of the same eager operation, for between training steps (about 50 ms): the median of
    `repeats` timings of `ops` back to back. The full probe runs before and after a measured run; readings between its
    steps show how far the host's speed during the run moves from those two."""
    x = torch.zeros(256, device=device)
    timings = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(ops):
            x.add_(1.0)
        torch.cuda.synchronize()
        timings.append((time.perf_counter() - start) / ops)
    return statistics.median(timings)


def host_probe(device, release_cache=True):
    """The host's speed at the work DeepSpeed's hooks do, before anything else runs: seconds per small eager CUDA
    operation (x.add_ on 256 floats, issued back to back: the host's dispatch and launch bound it, not the GPU) and
    per call of a small Python function (attribute and dict access), each the median of 5 timings. Machines of one
    kind differ here (bench/deepspeed/results-pending/README.md), and DeepSpeed's host-bound steps with them.
    release_cache=False leaves the caching allocator's segments as they are (a probe after a measured run, before an
    allocator trace)."""
    x = torch.zeros(256, device=device)
    eager, python = [], []
    for _ in range(5):
        for _ in range(200):
            x.add_(1.0)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(20000):
            x.add_(1.0)
        torch.cuda.synchronize()
        eager.append((time.perf_counter() - start) / 20000)

    class Holder:
        def __init__(self):
            self.count, self.table = 0, {"a": 1}

        def bump(self, key):
            self.count += self.table.get(key, 0)
            return self.count

    holder = Holder()
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(200000):
            holder.bump("a")
        python.append((time.perf_counter() - start) / 200000)
    del x
    if release_cache:
        torch.cuda.empty_cache()
    return {"eager_op_seconds": statistics.median(eager), "python_call_seconds": statistics.median(python)}


if __name__ == "__main__":
    if not torch.cuda.is_available():
        raise SystemExit("host_probe.py: no CUDA device: the probe times CUDA launches")
    print(json.dumps(host_probe(torch.device("cuda", 0))))
