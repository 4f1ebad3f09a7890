"""The host side of DeepSpeed stage 3's update with the optimizer on the CPU and the parameters on the GPU, timed
alone on this machine (the planner's host.fresh_pageable_write_bandwidth and host.pageable_pcie_bandwidth).

stage3.py _reassign_or_swap_out_partitioned_parameters runs fp16_partitioned_groups_flat[i].data.copy_(fp32) with
the 16-bit partition on the GPU and the fp32 one on the CPU: ATen's copy_ across devices with a dtype change first
converts on the source device into a new (pageable, never touched) tensor, then copies that to the device from
pageable memory, the thread waiting. Both steps are timed here on a sub-group-sized partition:

  python3 bench/deepspeed/pageable_cast_probe.py --elements 1000000000 --threads 16 --repeats 3

Prints one JSON line: the cast's bytes written per second (16-bit bytes) and the pageable copy's bytes per second,
the median of the repeats.
"""
import argparse
import json
import statistics
import time

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--elements", type=int, default=1_000_000_000)
    p.add_argument("--threads", type=int, default=16, help="torch intra-op threads (the run's CPU threads per rank)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    half = torch.bfloat16 if a.dtype == "bf16" else torch.float16
    fp32 = torch.empty(a.elements, dtype=torch.float32)
    fp32.fill_(0.5)  # every page touched: the fp32 partition is resident in the run
    device = torch.empty(a.elements, dtype=half, device="cuda")
    casts, copies = [], []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        cast = fp32.to(half)  # a new pageable tensor: its pages are faulted in as the cast writes them
        t1 = time.perf_counter()
        device.copy_(cast)  # from pageable memory: the thread waits for it
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        casts.append(t1 - t0)
        copies.append(t2 - t1)
        del cast
    half_bytes = a.elements * torch.finfo(half).bits // 8
    print(json.dumps({
        "elements": a.elements, "threads": a.threads, "dtype": a.dtype,
        "cast_seconds": casts, "copy_seconds": copies,
        "fresh_pageable_write_bandwidth": half_bytes / statistics.median(casts),
        "pageable_pcie_bandwidth": half_bytes / statistics.median(copies),
        "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
    }))


if __name__ == "__main__":
    main()
