#!/usr/bin/env python3
"""DeepSpeed peer for zeroplan's planner (issue 13): trains, under torchrun, the model of a zeroplan model
description (the GPT-2 decoder of bench/exec/pytorch_peer.py: learned positions, LayerNorm, tanh-GELU, biases, tied
embeddings, no dropout, at the description's shape) or ResNet-101 (torchvision, 10 classes, CIFAR-10 shapes), with
the DeepSpeed config `zeroplan plan --emit-ds-config` wrote, and measures what the planner predicts:

  step_seconds        median optimizer-step time after the warm-up (accumulation included), cuda-synchronized
  device_used_gib     peak over the run of cudaMemGetInfo total - free (torch.cuda.mem_get_info), the larger rank
  peak_allocated_gib  torch.cuda.max_memory_allocated, the larger rank
  peak_reserved_gib   torch.cuda.max_memory_reserved, the larger rank
  host_gib_per_rank   peak resident set of the rank's process (VmHWM, /proc/self/status), the larger rank
  host_pinned_gib     page-locked host memory the process allocated through torch, when torch reports it

Rank 0 writes one JSON file in the schema of bench/deepspeed/results/ (a "runs" list of one run with its model,
cluster, GPU count, DeepSpeed config and "measured"), so that tests/sim/deepspeed_measurements_test.cpp checks the
planner against it once it is stored there. Random data (token ids, images): step time and memory do not depend on
the values.
"""
import argparse
import contextlib
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "exec"))
sys.path.insert(0, HERE)
from host_probe import eager_op_seconds_now, host_probe  # noqa: E402 (the harness's own folder, put on the path above)


def read_host_peak_bytes():
    """Peak resident set of this process (VmHWM), bytes."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("VmHWM missing from /proc/self/status")


def pinned_host_bytes():
    """Page-locked bytes torch's caching host allocator holds, or None where torch does not report them."""
    stats = getattr(torch.cuda, "host_memory_stats", None)
    if stats is None:
        return None
    values = stats()
    for key in ("allocated_bytes.current", "segment.all.current", "reserved_bytes.current"):
        if key in values:
            return values[key]
    return None


def build_model(args, config, dtype):
    if args.model == "resnet101":
        import torchvision
        model = torchvision.models.resnet101(num_classes=10)
        if dtype == torch.float16:
            # DeepSpeed casts parameters only: the BatchNorm buffers must be half too, or batch_norm mixes dtypes.
            model = model.half()
        return model, None
    from pytorch_peer import GPT  # the peers' decoder, so both peers train the same network
    with open(args.model) as f:
        description = json.load(f)
    shape = description["transformer"]
    if shape.get("family") != "gpt2" or shape.get("dropout", 0.0) != 0.0:
        raise SystemExit(f"{args.model}: ds_peer.py trains the gpt2 family without dropout")
    stage = config.get("zero_optimization", {}).get("stage", 0)
    # Stage 3 builds the model partitioned (deepspeed.zero.Init), as the planner's zero_init default assumes.
    init = deepspeed.zero.Init(config_dict_or_path=config) if stage == 3 else contextlib.nullcontext()
    with init:
        model = GPT(shape["vocab_size"], shape["hidden"], shape["layers"], shape["heads"], shape["max_seq"])
    return model, shape


def micro_step_parts(engine, shape, micro, seq, device, dtype, generator):
    """The micro-step of main() split in its three engine calls, for profile_phases."""
    def forward():
        if shape is None:
            images = torch.randn(micro, 3, 32, 32, device=device, dtype=dtype, generator=generator)
            labels = torch.randint(0, 10, (micro,), device=device, generator=generator)
            return F.cross_entropy(engine(images).float(), labels)
        tokens = torch.randint(0, shape["vocab_size"], (micro, seq + 1), device=device, generator=generator)
        return engine(tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous())
    return forward, engine.backward, engine.step


def profile_phases(path, parts, accumulation, rank):
    """Where a step's time goes (not part of the measured steps: synchronising between phases serialises them)."""
    forward, backward, step = parts
    phases = {"forward": [], "backward": [], "step": []}

    def timed(name, call):
        torch.cuda.synchronize()
        start = time.perf_counter()
        result = call()
        torch.cuda.synchronize()
        phases[name].append(time.perf_counter() - start)
        return result

    for _ in range(3):
        for _ in range(accumulation):
            loss = timed("forward", forward)
            timed("backward", lambda: backward(loss))
            timed("step", step)
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(accumulation):
            loss = forward()
            backward(loss)
            step()
        torch.cuda.synchronize()
    if rank != 0:
        return
    with open(path, "w") as f:
        f.write("phases, synchronised, median of 3 steps (ms): " +
                ", ".join(f"{k} {1e3 * statistics.median(v):.1f}" for k, v in phases.items()) + "\n\n")
        averages = prof.key_averages()
        f.write(averages.table(sort_by="self_cpu_time_total", row_limit=45) + "\n")
        try:  # torch 2.4 and later name the GPU's time "device"
            f.write(averages.table(sort_by="self_device_time_total", row_limit=45) + "\n")
        except (KeyError, AttributeError, ValueError):
            f.write(averages.table(sort_by="self_cuda_time_total", row_limit=45) + "\n")


def memory_trace(path, micro_step, accumulation, steps=2, start=None):
    """The caching allocator over `steps` steps: every segment at the end (address, size, its blocks' sizes and
    states) and every event of the steps (alloc, free, segment alloc/free with address and size; for blocks of 16
    MiB and more the innermost Python frames that asked for them), and torch.cuda.memory_allocated() and
    memory_reserved() before them, so that the allocator's state at the allocated peak can be replayed. With
    `start` (--memory-trace-from-start) the recording began before deepspeed.initialize, with these figures, and
    covers every step run so far: no further steps."""
    torch.cuda.synchronize()
    before = start or {"allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved()}
    if steps > 0:  # otherwise recording since before deepspeed.initialize (--memory-trace-from-start)
        torch.cuda.memory._record_memory_history(max_entries=1000000)
    for _ in range(steps):
        for _ in range(accumulation):
            micro_step()
    torch.cuda.synchronize()
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)

    def frames(event):
        keep = [f for f in event.get("frames", []) if f.get("filename", "").endswith(".py")]
        return [f"{os.path.basename(f['filename'])}:{f['line']} {f['name']}" for f in keep[:4]]

    segments = [{"address": s["address"], "total_size": s["total_size"], "pool": s.get("segment_type"),
                 "blocks": [[b["size"], b["state"]] for b in s["blocks"]]} for s in snapshot["segments"]]
    events = []
    for trace in snapshot["device_traces"]:
        for e in trace:
            entry = {"action": e["action"], "addr": e["addr"], "size": e["size"]}
            if e["size"] >= 16 * 2**20 and e["action"] in ("alloc", "segment_alloc"):
                entry["frames"] = frames(e)
            events.append(entry)
    with open(path, "w") as f:
        json.dump({"steps": steps, "accumulation": accumulation, "before": before, "segments": segments,
                   "events": events, "max_allocated": torch.cuda.max_memory_allocated(),
                   "max_reserved": torch.cuda.max_memory_reserved()}, f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="zeroplan model description (gpt2 family) or 'resnet101'")
    ap.add_argument("--planner-model", help="what the planner is given for this model (default: --model)")
    ap.add_argument("--ds-config", required=True, help="the DeepSpeed config (zeroplan plan --emit-ds-config)")
    ap.add_argument("--cluster", default="h200x2", help="the zeroplan cluster description of this machine")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3, help="warm-up steps at least; with fp16's dynamic loss scale "
                    "the warm-up goes on until --settled steps in a row updated (none skipped on overflow)")
    ap.add_argument("--settled", type=int, default=3)
    ap.add_argument("--max-warmup", type=int, default=40, help="fp16: give up waiting for the loss scale to settle "
                    "after this many warm-up steps (the run then says so: measured.loss_scale_settled false)")
    ap.add_argument("--empty-cache-after-init", action="store_true",
                    help="call torch.cuda.empty_cache() after deepspeed.initialize, before the measured steps (the "
                         "harness's variant; a training script does not, and the caching allocator then keeps what "
                         "initialize freed: the default, as the planner assumes)")
    ap.add_argument("--name", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--profile", help="after the measured steps, write where DeepSpeed's step spends its time to "
                    "this file: forward, backward and step of 3 more steps, each phase synchronised (median), then "
                    "one step under torch.profiler (CPU and CUDA, the 45 largest operators by self time of each)")
    ap.add_argument("--memory-trace", help="after the measured steps, record the caching allocator over 2 more steps "
                    "(torch.cuda.memory._record_memory_history) and write its segments and events to this JSON file "
                    "(memory_trace)")
    ap.add_argument("--memory-trace-from-start", action="store_true",
                    help="with --memory-trace: record from before deepspeed.initialize through every step instead "
                    "(where the first step's lazy states and buffers land)")
    args = ap.parse_args()
    if args.settled < 1:
        ap.error(f"--settled {args.settled}: the number of updating steps in a row that ends the warm-up, at least 1")
    if args.max_warmup < args.warmup:
        ap.error(f"--max-warmup {args.max_warmup}: below --warmup {args.warmup}; give at least as many")
    if args.memory_trace_from_start and not args.memory_trace:
        ap.error("--memory-trace-from-start needs --memory-trace FILE (where the trace goes)")

    deepspeed.init_distributed()
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    probe = host_probe(device)
    with open(args.ds_config) as f:
        config = json.load(f)
    fp16 = config.get("fp16", {}).get("enabled", False)
    bf16 = config.get("bf16", {}).get("enabled", False)
    dtype = torch.float16 if fp16 else torch.bfloat16 if bf16 else torch.float32
    micro = config["train_micro_batch_size_per_gpu"]
    accumulation = config.get("gradient_accumulation_steps", 1)

    model, shape = build_model(args, config, dtype)
    trace_start = None
    if args.memory_trace and args.memory_trace_from_start and rank == 0:
        trace_start = {"allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved()}
        torch.cuda.memory._record_memory_history(max_entries=2000000)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=[p for p in model.parameters()],
                                           config=config)
    generator = torch.Generator(device=device).manual_seed(1 + rank)

    parts = micro_step_parts(engine, shape, micro, args.seq, device, dtype, generator)

    def micro_step():
        forward, backward, optimizer_step = parts
        loss = forward()
        backward(loss)
        optimizer_step()
        return loss

    if args.empty_cache_after_init:
        torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    device_used_peak = 0
    times, losses, skipped, probes_between = [], [], [], []

    def train_step():
        """One optimizer step (its micro-steps), timed from a synchronised start to the loss read back; whether
        fp16's dynamic loss scaling skipped its update (engine.py _take_model_step counts it in skipped_steps: such a
        step stops after the overflow test and is much shorter than one that updates)."""
        nonlocal device_used_peak
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(accumulation):
            loss = micro_step()
        losses.append(loss.item())  # the loss read back, as a training loop does: one host sync per step
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        skipped.append(getattr(engine, "skipped_steps", 0) > sum(skipped))
        free, total = torch.cuda.mem_get_info()
        device_used_peak = max(device_used_peak, total - free)
        return seconds

    # Warm-up. fp16's dynamic loss scale starts at 2^16 and halves on every overflow, skipping that step's update:
    # ResNet-101 skips its first 7-8 steps at stages 1-3 (device_matrix.sh parts 14-16 on 2026-11-27). A skipped
    # step times the forward, backward and overflow test without the optimizer's step, and the first update after
    # them creates the optimizer's states; neither is the step a training run repeats. So the warm-up goes on until
    # the last --settled steps all updated. Every rank takes the same number: DeepSpeed reduces the overflow flag
    # over the data-parallel ranks before it skips (runtime/utils.py CheckOverflow), so their skipped_steps agree.
    # (No collective of our own here: at stages 0-2 on one rank the first use of torch's default NCCL group would
    # add a communicator, 0.38 GiB of device memory, that DeepSpeed itself never creates.)
    def settled():
        return not (fp16 and any(skipped[-args.settled:]))

    warmup_steps = 0
    while warmup_steps < args.warmup or (not settled() and warmup_steps < args.max_warmup):
        train_step()
        warmup_steps += 1
    loss_scale_settled = settled()
    for _ in range(args.steps):
        times.append(train_step())
        # After the step's time is taken, before the next one starts: the host's speed during the run. Every
        # rank reads it (rank 0's is kept), so that no rank's next step waits in a collective for another's.
        probes_between.append(eager_op_seconds_now(device))

    gib = 2.0**30
    pinned = pinned_host_bytes()
    local = torch.tensor([device_used_peak, torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved(),
                          read_host_peak_bytes(), pinned if pinned is not None else -1],
                         dtype=torch.float64, device=device)
    dist.all_reduce(local, op=dist.ReduceOp.MAX)
    step_seconds = torch.tensor([statistics.median(times)], dtype=torch.float64, device=device)
    dist.all_reduce(step_seconds, op=dist.ReduceOp.MAX)
    # The probe again once the measured steps are done: one reading before a run can be a quarter off the host's
    # speed during it (two runs minutes apart on one machine read 7.9 and 10.7 us, bench/deepspeed/results-pending/
    # README.md); the row keeps both and their mean.
    probe_after = host_probe(device, release_cache=False)
    if args.profile:  # after every figure above is taken: the profiler's own memory stays out of them
        profile_phases(args.profile, parts, accumulation, rank)
    if args.memory_trace and rank == 0:  # after every figure above is taken, as the profile
        memory_trace(args.memory_trace, micro_step, accumulation, steps=0 if trace_start else 2, start=trace_start)
    if rank == 0:
        measured = {
            "device_used_gib": local[0].item() / gib,
            "peak_allocated_gib": local[1].item() / gib,
            "peak_reserved_gib": local[2].item() / gib,
            "host_gib_per_rank": local[3].item() / gib,
            "host_pinned_gib": local[4].item() / gib if local[4].item() >= 0 else None,
            "step_seconds": step_seconds.item(),
            "step_seconds_each": times,  # rank 0's, after the warm-up
            "skipped_steps": skipped,  # per step, warm-up included: the optimizer step skipped on fp16 overflow
            "warmup_steps": warmup_steps,
            "loss_scale_settled": loss_scale_settled,  # fp16: the last --settled warm-up steps all updated
            # rank 0's, before the model was built and after the measured steps (host_probe), and their means
            # and short readings between the measured steps (eager_op_seconds_now), kept beside them
            "host_probe": {**{key: (probe[key] + probe_after[key]) / 2 for key in probe},
                           "before": probe, "after": probe_after, "between_steps": probes_between},
        }
        omp = os.environ.get("OMP_NUM_THREADS")
        run = {
            "name": args.name,
            "model": args.planner_model or args.model,
            "cluster": args.cluster,
            "gpus": world,
            "ds_config": os.path.relpath(os.path.abspath(args.ds_config), os.path.join(HERE, "..", "..")),
            "cpu_threads_per_rank": int(omp) if omp else None,
            # build_model: stage 3 builds the GPT-2 family under deepspeed.zero.Init, ResNet-101 whole (torchvision)
            "zero_init": shape is not None and config.get("zero_optimization", {}).get("stage", 0) == 3,
            # whether the caching allocator was emptied after deepspeed.initialize (--empty-cache-after-init); rows
            # measured before 2026-11-28 always were
            "empty_cache_after_init": args.empty_cache_after_init,
            "measured": measured,
            "losses": losses,
        }
        if shape is not None:
            run["seq"] = args.seq
        document = {
            "source": "bench/deepspeed/ds_peer.py under torchrun (bench/deepspeed/device_matrix.sh)",
            "deepspeed": deepspeed.__version__,
            "torch": torch.__version__,
            "machine": f"{torch.cuda.get_device_name()} x {world}, {os.cpu_count()} CPUs",
            "date": time.strftime("%Y-%m-%d"),
            "measured_as": {
                "device_used_gib": "peak over the run of cudaMemGetInfo total - free, the larger rank, GiB",
                "peak_allocated_gib": "torch.cuda.max_memory_allocated, the larger rank, GiB",
                "step_seconds": f"median of {args.steps} steps after at least {args.warmup} warm-up steps, with "
                                f"fp16 until {args.settled} steps in a row updated (measured.warmup_steps ran)",
                "host_gib_per_rank": "peak resident set (VmHWM) of the rank's process, the larger rank, GiB",
            },
            "runs": [run],
        }
        with open(args.out, "w") as f:
            json.dump(document, f, indent=2)
        print(json.dumps({"name": args.name, **measured}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    import deepspeed  # imported here so that --help works without it
    main()
