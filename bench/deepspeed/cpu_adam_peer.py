#!/usr/bin/env python3
"""DeepSpeed's CPU Adam timed as bench/cpu_adam_benchmark times ours, for issue 12's speed goal (1.1x DeepSpeedCPUAdam
on the same host, run in the same device command).

DeepSpeedCPUAdam (deepspeed/ops/adam/cpu_adam.py, 0.19.8) steps fp32 parameters in place from fp32 gradients with
its fp32 moments: it reads p, g, m, v and writes p, m, v, 28 bytes per parameter (it has no 16-bit copy in this
version), so the comparison is against cpu_adam_benchmark --grads fp32 --copy none. Its kernels are OpenMP loops
(csrc/adam/cpu_adam_impl.cpp); the threads are OMP_NUM_THREADS, which this script requires to equal --threads so
that the figure says what it measured. The tensors are filled by torch's parallel fill with the same threads (first
touch on each thread's NUMA node, as cpu_adam_benchmark does with its own threads).

One JSON line per size: params, threads, gparam_per_s (median of --repeats steps after one untimed warm-up),
bytes_per_param and seconds.

  OMP_NUM_THREADS=16 python3 bench/deepspeed/cpu_adam_peer.py --sizes 1e8,4e8 --threads 16
"""
import argparse
import json
import os
import statistics
import sys
import time


def parse_size(text):
    try:
        value = float(text)
    except ValueError:
        value = -1
    if value < 1 or value != int(value) or value > 2**36:
        raise SystemExit(f"cpu_adam_peer.py: error: --sizes: '{text}' is not a whole number from 1 to 2^36 (e.g. 1e8)")
    return int(value)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1e8,4e8", help="parameters per step, comma-separated (default 1e8,4e8)")
    parser.add_argument("--threads", type=int, required=True, help="OpenMP threads; must equal OMP_NUM_THREADS")
    parser.add_argument("--repeats", type=int, default=7, help="timed steps per size (default 7)")
    args = parser.parse_args()
    if args.threads < 1:
        parser.error("--threads: expected at least 1")
    if args.repeats < 1:
        parser.error("--repeats: expected at least 1")
    if os.environ.get("OMP_NUM_THREADS") != str(args.threads):
        parser.error(f"--threads {args.threads} but OMP_NUM_THREADS is {os.environ.get('OMP_NUM_THREADS')!r}: "
                     "DeepSpeed's CPU Adam takes its threads from OpenMP; set both to the same value")
    sizes = [parse_size(s) for s in args.sizes.split(",")]

    import torch
    from deepspeed.ops.adam import DeepSpeedCPUAdam
    torch.set_num_threads(args.threads)

    for n in sizes:
        # torch.full fills in parallel (ATen's fill_ is a parallel TensorIterator loop; its random fills are
        # serial, which would place every page on the main thread's NUMA node). The kernel has no data-dependent
        # branch, so constant values time it as well as random ones.
        param = torch.nn.Parameter(torch.full((n,), 0.5, dtype=torch.float32))
        param.grad = torch.full((n,), 1e-3, dtype=torch.float32)
        # AdamW as the executor runs it (DeepSpeed's default adamw_mode=True), weight decay on every element.
        optimizer = DeepSpeedCPUAdam([param], lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                                     adamw_mode=True)
        optimizer.step()  # warm-up: allocates and first-touches the moments (torch.zeros_like, parallel fill)
        seconds = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            optimizer.step()
            seconds.append(time.perf_counter() - start)
        median = statistics.median(seconds)
        print(json.dumps({"peer": "DeepSpeedCPUAdam", "params": n, "threads": args.threads,
                          "gparam_per_s": round(n / median / 1e9, 3), "bytes_per_param": 28,
                          "seconds": round(median, 5)}), flush=True)
        del optimizer, param


if __name__ == "__main__":
    sys.exit(main())
