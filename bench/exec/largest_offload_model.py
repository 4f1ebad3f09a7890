#!/usr/bin/env python3
"""Picks the largest GPT-2-family model (hidden 6144, as bench/exec/models/gpt2-h6144-l36.json) that the planner fits
on this machine at stage 3 with optimizer and parameters on the CPU (issue 12's ZeRO-Offload claim), with the host
memory this machine has available now (/proc/meminfo MemAvailable: what a run can use; the bundled cluster's figure
is the physical size, which a plan filled on 2026-11-23 and the kernel's OOM killer ended in start-up).

Writes CLUSTER_OUT (the cluster description with host.memory_bytes = MemAvailable) and MODEL_OUT (the model with
the layer count chosen), and prints the plan's line for each layer count tried.

  python3 bench/exec/largest_offload_model.py ZEROPLAN CLUSTER GPUS CLUSTER_OUT MODEL_OUT [LAYERS]

LAYERS: that layer count instead of the largest that fits (a run inside the host memory, to measure it); its plan
line is printed all the same.
"""
import json
import subprocess
import sys

HERE = "bench/exec/models/"


def main():
    zeroplan, cluster, gpus, cluster_out, model_out = sys.argv[1:6]
    forced = int(sys.argv[6]) if len(sys.argv) > 6 else None
    with open(f"configs/clusters/{cluster}.json") as f:
        description = json.load(f)
    with open("/proc/meminfo") as f:
        available = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    physical = description["host"].get("memory_bytes")
    description["host"]["memory_bytes"] = available
    description["name"] = f"{cluster}-available"
    note = f"largest_offload_model.py: {physical} -> {available} bytes, MemAvailable on this machine before the run"
    if isinstance(description.get("provenance"), dict):  # bundled files keep a note per field, calibrate's one text
        description["provenance"]["host.memory_bytes"] = note
    else:
        description["provenance"] = description.get("provenance", "") + "\nhost.memory_bytes: " + note
    with open(cluster_out, "w") as f:
        json.dump(description, f, indent=2)
    with open(HERE + "gpt2-h6144-l36.json") as f:
        base = json.load(f)
    chosen = None
    for layers in [forced] if forced else range(44, 24, -1):
        model = json.loads(json.dumps(base))
        model["name"] = f"gpt2-h6144-l{layers}"
        model["transformer"]["layers"] = layers
        model["reference"] = (f"gpt2-h6144-l36 with {layers} layers: the largest the planner fitted with stage 3 and "
                              "optimizer and parameters on the CPU (bench/exec/largest_offload_model.py)")
        with open(model_out, "w") as f:
            json.dump(model, f, indent=2)
        plan = subprocess.run(
            [zeroplan, "plan", "--model", model_out, "--cluster", cluster_out, "--gpus", gpus, "--micro-batch", "1",
             "--seq", "1024", "--precision", "bf16", "--engine", "zeroplan", "--stage", "3", "--offload-optimizer",
             "cpu", "--offload-param", "cpu", "--ds-config", HERE + "ds-stage3-offload-largest.json", "--format",
             "json"], capture_output=True, text=True)
        if plan.returncode not in (0, 1):  # 1: no plan fits
            sys.exit(f"zeroplan plan failed (status {plan.returncode}): {plan.stderr.strip()}")
        p = json.loads(plan.stdout)["plans"][0]
        print(f"  {layers} layers: host {p['host_bytes'] / 2**30:.2f} of {p['host_capacity_bytes'] / 2**30:.2f} GiB, "
              f"GPU {p['timeline_peak_gpu_bytes'] / 2**30:.2f} GiB, fits {p['fits']}", flush=True)
        if p["fits"] or forced:
            chosen = layers
            break
    if chosen is None:
        sys.exit("no layer count from 44 down to 25 fits")
    print(f"chosen: gpt2-h6144-l{chosen}")


if __name__ == "__main__":
    main()
