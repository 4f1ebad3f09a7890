#!/usr/bin/env python3
"""The PyTorch peer for zeroplan's CUDA executor on ResNet-101 / CIFAR-10 (issue 37, "Speed"): torchvision's
resnet101(num_classes=10) trained the way people run it, on 32x32 images, micro-batch 128 per GPU by default:

  * mixed precision by autocast over fp32 parameters: fp16 with torch.amp.GradScaler (the default), bf16 without a
    scaler, or fp32 (no autocast, TF32 off for matmuls and cuDNN);
  * model and inputs channels-last (--no-channels-last for NCHW), torch.backends.cudnn.benchmark = True;
  * AdamW with the settings of bench/deepspeed/ds_peer.py's ResNet-101 rows (the configs of make_matrix.sh, from
    bench/deepspeed/base_torch_adam.json, which are also zeroplan's defaults, exec/exec_config.h): lr 3e-4,
    betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on every parameter (DeepSpeed hands the optimizer all of them in
    one group), gradient clipping at global norm 1.0; fused=True where torch has it (the JSON says which ran);
  * fp16's scaler as DeepSpeed's fp16 block of those configs: initial scale 2^16, growth every 1000 steps without
    overflow, halved on overflow and the step skipped (GradScaler has no hysteresis: DeepSpeed's 2 is not modelled);
  * --compile: torch.compile, default mode (--compile-mode reduce-overhead etc. for another); under DDP the DDP module is compiled (torch's documented order: dynamo's
    DDPOptimizer splits the graph at the bucket boundaries so the all-reduce overlaps the backward), or with
    --compile-inside-ddp the model is compiled and then wrapped in DDP (nanoGPT's order, as
    bench/exec/pytorch_peers_multi.py does);
  * several GPUs under torchrun: one process per GPU, NCCL, DistributedDataParallel(device_ids=[local_rank],
    gradient_as_bucket_view=True, broadcast_buffers left at its default True: BatchNorm's running statistics are
    broadcast from rank 0 at every forward; bucket_cap_mb left at 25), each rank its own micro-batch. One process:
    no process group, the plain model ("ddp": false).

Data: random images (uniform bytes normalised with mean and std 0.5 per channel, as DeepSpeed's CIFAR example
feeds them: values in [-1, 1]) and random labels, generated on the GPU once from --seed + rank and reused every step,
so that no data loading is timed (step time and memory do not depend on the values). The model is built on the CPU
from --seed (the same weights on every rank, which DDP broadcasts from rank 0 anyway).

Measured as ds_peer.py measures (so the rows sit beside each other):
  step_seconds        per step: torch.cuda.synchronize(), perf_counter, forward + loss, backward, unscale + clip,
                      optimizer step, scaler update, zero_grad, loss.item() (one host sync per step, as a training
                      loop reads its loss), synchronize, perf_counter; median (and mean) over --steps steps after the
                      warm-up, the larger rank's
  warm-up             at least --warmup steps; in fp16 it goes on until the last --settled steps all updated (none
                      skipped on overflow by the scaler), at most --max-warmup steps (loss_scale_settled says whether
                      it settled). Every rank runs the same number: DDP's all-reduce gives every rank the same
                      gradients, so their scalers see the same overflows.
  first_step_seconds  the first warm-up step (cuDNN's benchmark search, lazy initialisation, with --compile the
                      compilation); compile_seconds = first_step_seconds - step_seconds with --compile (a
                      warm inductor cache, /tmp/torchinductor_$USER, from an earlier run shortens it)
  peak_*_gib          torch.cuda.max_memory_allocated / max_memory_reserved over the timed steps (the peak stats
                      reset after the warm-up), and *_with_warmup over the whole process, warm-up included; the
                      larger rank, every rank's in per_rank. Under CUDA graphs (--compile-mode reduce-overhead)
                      the graphs' private pool is reserved but not counted as allocated while they replay: compare
                      peak_reserved_gib or device_used_gib there
  device_used_gib     the peak over the run of cudaMemGetInfo total - free (torch.cuda.mem_get_info, what nvidia-smi
                      shows as used, the CUDA context and NCCL's buffers included), read after every step; and
                      device_used_end_gib, read once after the last step
  host_gib_per_rank   peak resident set of the rank's process (VmHWM)

Rank 0 prints one JSON line (the device scripts take the last line starting with '{'), writes the same document to
--out when given, and ends with a one-line summary:
  resnet101 ddp[ compile] fp16 mb128 x N: median X ms, Y samples/s, peak Z GiB
(the word after resnet101 is "single" for one process without DDP; peak is the larger rank's peak allocated over
the timed steps).

  python3 bench/resnet/ddp_peer.py --out r1.json                         (1 GPU, eager)
  python3 bench/resnet/ddp_peer.py --compile --out r1c.json              (1 GPU, torch.compile)
  torchrun --nproc_per_node 2 bench/resnet/ddp_peer.py --out r2.json     (2 GPUs, DDP)
"""
import os

# NVLink SHARP (NVLS) multicast stays off on the lent machines unless the caller sets it (bench/exec's scripts do the
# same); set before torch, and so NCCL, is loaded.
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

GIB = 2.0**30
# The optimizer of bench/deepspeed/ds_peer.py's ResNet-101 rows (make_matrix.sh writes them from base_torch_adam.json)
ADAMW = {"lr": 3e-4, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1}
# DeepSpeed's fp16 block in those rows: initial_scale_power 16, loss_scale_window 1000 (hysteresis 2 has no
# GradScaler counterpart)
SCALER = {"init_scale": 2.0**16, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 1000}
COMPILE_MODES = ["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--micro-batch", type=int, default=128, help="images per GPU per step (default 128)")
    ap.add_argument("--steps", type=int, default=30, help="timed steps after the warm-up (default 30)")
    ap.add_argument("--warmup", type=int, default=10, help="warm-up steps at least (default 10); in fp16 the warm-up "
                    "goes on until --settled steps in a row updated (none skipped on overflow)")
    ap.add_argument("--settled", type=int, default=3)
    ap.add_argument("--max-warmup", type=int, default=40, help="fp16: stop waiting for the loss scale to settle "
                    "after this many warm-up steps (the JSON then says loss_scale_settled false)")
    ap.add_argument("--compile", action="store_true", help="torch.compile, default mode (compile time reported apart)")
    ap.add_argument("--compile-mode", choices=COMPILE_MODES, default="default",
                    help="with --compile: torch.compile's mode (default: its default mode; reduce-overhead adds CUDA "
                    "graphs)")
    ap.add_argument("--compile-inside-ddp", action="store_true",
                    help="with --compile under DDP: compile the model, then wrap it in DDP (nanoGPT's order) instead "
                    "of compiling the DDP module (torch's documented order, the default)")
    ap.add_argument("--precision", choices=["fp16", "bf16", "fp32"], default="fp16",
                    help="fp16: autocast fp16 + GradScaler (default); bf16: autocast bf16, no scaler; fp32: no "
                    "autocast, TF32 off")
    ap.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=True,
                    help="model and inputs in torch.channels_last (default on)")
    ap.add_argument("--clip", type=float, default=1.0,
                    help="gradient clipping at this global L2 norm, as DeepSpeed's gradient_clipping (default 1.0; "
                    "0 turns it off)")
    ap.add_argument("--no-fused", action="store_true", help="AdamW foreach instead of fused (fused is the default "
                    "where torch has it)")
    ap.add_argument("--seed", type=int, default=1234, help="weights from SEED, each rank's data from SEED + rank")
    ap.add_argument("--out", help="write the JSON document here too (rank 0)")
    a = ap.parse_args(argv)
    if a.micro_batch < 1:
        ap.error(f"--micro-batch {a.micro_batch}: expected at least 1 image per GPU")
    if a.steps < 1:
        ap.error(f"--steps {a.steps}: expected at least 1 timed step")
    if a.warmup < 0:
        ap.error(f"--warmup {a.warmup}: expected 0 or more warm-up steps")
    if a.settled < 1:
        ap.error(f"--settled {a.settled}: the number of updating steps in a row that ends the warm-up, at least 1")
    if a.max_warmup < a.warmup:
        ap.error(f"--max-warmup {a.max_warmup}: below --warmup {a.warmup}; give at least as many")
    if a.clip < 0:
        ap.error(f"--clip {a.clip}: expected a norm >= 0 (0 turns clipping off)")
    if a.compile_mode != "default" and not a.compile:
        ap.error(f"--compile-mode {a.compile_mode} says how torch.compile compiles: it needs --compile")
    if a.compile_inside_ddp and not a.compile:
        ap.error("--compile-inside-ddp says where torch.compile goes: it needs --compile")
    if a.out:
        folder = os.path.dirname(os.path.abspath(a.out))
        if not os.path.isdir(folder):
            ap.error(f"--out {a.out}: the folder {folder} does not exist")
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        value = os.environ.get(name)
        if value is not None and not value.isdigit():
            ap.error(f"{name}={value!r} in the environment: expected a number (launch with torchrun)")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and "LOCAL_RANK" not in os.environ:
        ap.error("WORLD_SIZE > 1 but LOCAL_RANK is not set: launch several processes with torchrun "
                 "(python -m torch.distributed.run --nproc_per_node N)")
    return a


def read_host_peak_bytes():
    """Peak resident set of this process (VmHWM), bytes; None where /proc does not say."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def versions(torch, torchvision):
    v = {"torch": torch.__version__, "torchvision": torchvision.__version__, "cuda": torch.version.cuda,
         "cudnn": torch.backends.cudnn.version(), "python": platform.python_version()}
    try:
        nccl = torch.cuda.nccl.version()
        v["nccl"] = ".".join(str(x) for x in nccl) if isinstance(nccl, tuple) else str(nccl)
    except Exception:  # noqa: BLE001 (a build without NCCL: nothing to record)
        v["nccl"] = None
    return v


def make_adamw(torch, params, want_fused):
    """AdamW with ADAMW's settings over every parameter, fused where this torch has it, else foreach."""
    if want_fused:
        try:
            return torch.optim.AdamW(params, **ADAMW, fused=True), "fused"
        except (RuntimeError, TypeError, ValueError) as e:
            print(f"ddp_peer.py: fused AdamW unavailable ({e}); using foreach", file=sys.stderr, flush=True)
    return torch.optim.AdamW(params, **ADAMW, foreach=True), "foreach"


def main(argv=None):
    a = parse_args(argv)
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    try:
        import torchvision
    except ImportError as e:
        raise SystemExit(f"ddp_peer.py: torchvision is needed for resnet101 ({e})")
    if not torch.cuda.is_available():
        raise SystemExit("ddp_peer.py: no CUDA device: this peer times training on the GPU")

    world = int(os.environ.get("WORLD_SIZE", "1"))
    ddp = world > 1
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if local_rank >= torch.cuda.device_count():
        raise SystemExit(f"ddp_peer.py: LOCAL_RANK {local_rank} but {torch.cuda.device_count()} CUDA device(s) "
                         "visible: at most one process per GPU")
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    if ddp:
        dist.init_process_group("nccl")
        rank = dist.get_rank()
    else:
        rank = 0

    torch.backends.cudnn.benchmark = True
    if a.precision == "fp32":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    amp_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": None}[a.precision]
    memory_format = torch.channels_last if a.channels_last else torch.contiguous_format

    def autocast():
        if amp_dtype is None:  # fp32: no autocast at all
            return contextlib.nullcontext()
        return torch.autocast(device_type="cuda", dtype=amp_dtype)

    # The model, on the CPU from the seed (torchvision's own initialisation), then on the GPU, channels-last.
    torch.manual_seed(a.seed)
    model = torchvision.models.resnet101(num_classes=10)
    params = sum(p.numel() for p in model.parameters())
    model = model.to(device=device, memory_format=memory_format).train()
    raw_model = model  # its parameters: the optimizer's and clipping's
    opt, adamw_impl = make_adamw(torch, list(raw_model.parameters()), not a.no_fused)

    def compiled(module):
        return torch.compile(module) if a.compile_mode == "default" else torch.compile(module, mode=a.compile_mode)

    ddp_settings = None
    compile_order = None
    step_model = model
    if ddp:
        from torch.nn.parallel import DistributedDataParallel as DDP
        if a.compile and a.compile_inside_ddp:
            step_model = compiled(step_model)
            compile_order = "torch.compile(model), then DDP (nanoGPT's order)"
        step_model = DDP(step_model, device_ids=[local_rank], gradient_as_bucket_view=True)
        ddp_settings = {"device_ids": [local_rank], "gradient_as_bucket_view": True,
                        "broadcast_buffers": step_model.broadcast_buffers,  # the default, True
                        "bucket_cap_mb": 25, "find_unused_parameters": False, "static_graph": False}
        if a.compile and not a.compile_inside_ddp:
            step_model = compiled(step_model)
            compile_order = "torch.compile(DDP(model)) (dynamo's DDPOptimizer splits at the buckets)"
    elif a.compile:
        step_model = compiled(step_model)
        compile_order = "torch.compile(model)"

    scaler = torch.amp.GradScaler("cuda", **SCALER, enabled=(a.precision == "fp16"))

    # Data: once, on the GPU, each rank its own micro-batch.
    generator = torch.Generator(device=device).manual_seed(a.seed + rank)
    pixels = torch.randint(0, 256, (a.micro_batch, 3, 32, 32), device=device, dtype=torch.uint8,
                           generator=generator)
    images = ((pixels.float() / 255.0 - 0.5) / 0.5).contiguous(memory_format=memory_format)
    labels = torch.randint(0, 10, (a.micro_batch,), device=device, generator=generator)
    del pixels

    device_used_peak = 0
    losses, skipped = [], []
    scale_before = [scaler.get_scale()]

    def train_step():
        """One optimizer step, timed from a synchronised start to the loss read back and a synchronised end; then
        (untimed) whether the scaler skipped it (its scale went down) and the device's used memory."""
        nonlocal device_used_peak
        torch.cuda.synchronize()
        start = time.perf_counter()
        with autocast():
            logits = step_model(images)
            loss = F.cross_entropy(logits.float(), labels)
        scaler.scale(loss).backward()
        if a.clip > 0:
            scaler.unscale_(opt)  # no-op but for the bookkeeping when the scaler is off (bf16, fp32)
            torch.nn.utils.clip_grad_norm_(raw_model.parameters(), a.clip)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())  # the loss read back, as a training loop does: one host sync per step
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        scale = scaler.get_scale()
        skipped.append(scale < scale_before[0])  # GradScaler lowers the scale exactly when it skips the step
        scale_before[0] = scale
        free, total = torch.cuda.mem_get_info()
        device_used_peak = max(device_used_peak, total - free)
        return seconds

    def settled():
        return not (a.precision == "fp16" and any(skipped[-a.settled:]))

    # Warm-up (not timed), the peak memory stats counting from the process's start.
    warmup_times = []
    while len(warmup_times) < a.warmup or (not settled() and len(warmup_times) < a.max_warmup):
        warmup_times.append(train_step())
    loss_scale_settled = settled()
    warmup_steps = len(warmup_times)
    peak_alloc_warmup = torch.cuda.max_memory_allocated()
    peak_reserved_warmup = torch.cuda.max_memory_reserved()

    torch.cuda.reset_peak_memory_stats()
    times = [train_step() for _ in range(a.steps)]
    peak_alloc = torch.cuda.max_memory_allocated()
    peak_reserved = torch.cuda.max_memory_reserved()
    free, total = torch.cuda.mem_get_info()
    device_used_end = total - free
    host_peak = read_host_peak_bytes()

    median, mean = statistics.median(times), statistics.mean(times)
    # The first step of the run, warm-up or (with --warmup 0) timed: where cuDNN's search and compilation land.
    first_step = warmup_times[0] if warmup_times else times[0]
    fields = ["step_seconds_median", "step_seconds_mean", "first_step_seconds", "peak_allocated_gib",
              "peak_reserved_gib", "peak_allocated_gib_with_warmup", "peak_reserved_gib_with_warmup",
              "device_used_gib", "device_used_end_gib", "host_gib"]
    local = [median, mean, first_step, peak_alloc / GIB, peak_reserved / GIB,
             max(peak_alloc_warmup, peak_alloc) / GIB, max(peak_reserved_warmup, peak_reserved) / GIB,
             device_used_peak / GIB, device_used_end / GIB, host_peak / GIB if host_peak is not None else -1.0]
    if ddp:
        mine = torch.tensor(local, dtype=torch.float64, device=device)
        gathered = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(gathered, mine)
        rows = [t.tolist() for t in gathered]
    else:
        rows = [local]
    per_rank = [{"rank": r, **{k: (v if not (k == "host_gib" and v < 0) else None) for k, v in zip(fields, row)}}
                for r, row in enumerate(rows)]

    if rank == 0:
        def largest(key):
            values = [row[key] for row in per_rank if row[key] is not None]
            return max(values) if values else None

        step_seconds = largest("step_seconds_median")
        step_mean = largest("step_seconds_mean")
        global_batch = a.micro_batch * world
        precision_words = {"fp16": "fp16 autocast + GradScaler", "bf16": "bf16 autocast",
                           "fp32": "fp32, TF32 off"}[a.precision]
        peer = ("pytorch DDP" if ddp else "pytorch") + (" + torch.compile" if a.compile else " eager") + \
            f", {precision_words}, {'channels-last' if a.channels_last else 'NCHW'}, {adamw_impl} AdamW"
        document = {
            "peer": peer,
            "source": "bench/resnet/ddp_peer.py" + (f" under torchrun ({world} processes)" if ddp else ""),
            "model": "torchvision.models.resnet101(num_classes=10)",
            "params": params,
            "image": [3, 32, 32],
            "ddp": ddp,
            "ddp_settings": ddp_settings,
            "compile": a.compile,
            "compile_mode": a.compile_mode if a.compile else None,
            "compile_order": compile_order,
            "precision": a.precision,
            "autocast_dtype": str(amp_dtype).replace("torch.", "") if amp_dtype is not None else None,
            "grad_scaler": dict(SCALER, hysteresis=None) if a.precision == "fp16" else None,
            "channels_last": a.channels_last,
            "cudnn_benchmark": True,
            "tf32": {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32},
            "optimizer": {"type": "torch.optim.AdamW", **ADAMW, "betas": list(ADAMW["betas"]),
                          "fused": adamw_impl == "fused", "impl": adamw_impl,
                          "weight_decay_on": "every parameter (one group, as DeepSpeed's)"},
            "gradient_clipping": a.clip if a.clip > 0 else None,
            "micro_batch": a.micro_batch,
            "world_size": world,
            "gpus": world,
            "global_batch": global_batch,
            "seed": a.seed,
            "settings": vars(a),
            **versions(torch, torchvision),
            "device": torch.cuda.get_device_name(device),
            "machine": f"{torch.cuda.get_device_name(device)} x {world}, {os.cpu_count()} CPUs",
            "date": time.strftime("%Y-%m-%d"),
            "env": {"NCCL_NVLS_ENABLE": os.environ.get("NCCL_NVLS_ENABLE"),
                    "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")},
            # timing (the larger rank's median and mean; rank 0's steps each)
            "step_seconds": step_seconds,
            "step_seconds_median": step_seconds,
            "step_ms_median": step_seconds * 1e3,
            "step_seconds_mean": step_mean,
            "step_ms_mean": step_mean * 1e3,
            "samples_per_second": global_batch / step_seconds,
            "step_seconds_each": times,
            "warmup_steps": warmup_steps,
            "warmup_step_seconds": warmup_times,
            "loss_scale_settled": loss_scale_settled,
            "skipped_steps": skipped,  # per step, warm-up included
            "loss_scale_final": scaler.get_scale() if a.precision == "fp16" else None,
            "first_step_seconds": largest("first_step_seconds"),
            "compile_seconds": max(0.0, largest("first_step_seconds") - step_seconds) if a.compile else None,
            # memory (the larger rank's; every rank's in per_rank)
            "peak_allocated_gib": largest("peak_allocated_gib"),
            "peak_reserved_gib": largest("peak_reserved_gib"),
            "peak_allocated_gib_with_warmup": largest("peak_allocated_gib_with_warmup"),
            "peak_reserved_gib_with_warmup": largest("peak_reserved_gib_with_warmup"),
            "device_used_gib": largest("device_used_gib"),
            "device_used_end_gib": largest("device_used_end_gib"),
            "host_gib_per_rank": largest("host_gib"),
            "per_rank": per_rank,
            "losses": losses,  # rank 0's, warm-up included
            "measured_as": {
                "step_seconds": f"median over {a.steps} steps after the warm-up of the CUDA-synchronised wall time of "
                                "one step (forward, loss, backward, unscale and clip, optimizer step, scaler update, "
                                "zero_grad, loss.item()), the larger rank's; at least "
                                f"{a.warmup} warm-up steps, in fp16 until {a.settled} steps in a row updated "
                                "(warmup_steps ran)",
                "samples_per_second": "global batch (micro-batch x world size) / step_seconds",
                "first_step_seconds": "the first warm-up step, the larger rank's: cuDNN's benchmark search, lazy "
                                      "initialisation and with --compile the compilation",
                "compile_seconds": "first_step_seconds - step_seconds (with --compile; a warm inductor cache from "
                                   "an earlier run shortens it)",
                "peak_allocated_gib": "torch.cuda.max_memory_allocated over the timed steps (reset after the "
                                      "warm-up), the larger rank, GiB",
                "peak_allocated_gib_with_warmup": "torch.cuda.max_memory_allocated over the whole process, warm-up "
                                                  "included, the larger rank, GiB",
                "device_used_gib": "peak over the run (after every step) of cudaMemGetInfo total - free, the larger "
                                   "rank, GiB; device_used_end_gib once after the last step",
                "host_gib_per_rank": "peak resident set (VmHWM) of the rank's process, the larger rank, GiB",
            },
        }
        line = json.dumps(document)
        print(line, flush=True)
        if a.out:
            with open(a.out, "w") as f:
                json.dump(document, f, indent=2)
                f.write("\n")
        mode = ("ddp" if ddp else "single") + (" compile" if a.compile else "") + \
            (f"({a.compile_mode})" if a.compile and a.compile_mode != "default" else "")
        print(f"resnet101 {mode} {a.precision} mb{a.micro_batch} x {world}: median {step_seconds * 1e3:.2f} ms, "
              f"{global_batch / step_seconds:.1f} samples/s, peak {document['peak_allocated_gib']:.2f} GiB",
              flush=True)
    if ddp:
        dist.barrier(device_ids=[local_rank])
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
