#!/usr/bin/env python3
"""What a torch.distributed NCCL communicator adds to a rank, on the host and on the device, at the world size it
runs with: the planner's runtime terms (configs/clusters/*.json runtime.host_process_bytes, nccl_buffer_bytes)
measured apart from any model.

  torchrun --standalone --nproc_per_node=N bench/deepspeed/process_footprint.py --out FILE.json

Each rank records its resident set (VmRSS, and the peak VmHWM, /proc/self/status) and the device's used memory
(cudaMemGetInfo total - free) at four points: after `import torch` and the CUDA context (torch.cuda.init and a
1-element tensor), after init_process_group("nccl") with the rank's device bound, after the first all-reduce
(NCCL connects its peers lazily, at the first collective), after all-reduces of 1 MiB to 1 GiB (its channels'
buffers), and after the first use of each further collective kind, data type and operation DeepSpeed issues (NCCL's
kernels load lazily) and of a second communicator; then around training steps of a small GPT-2 built on the device
(bench/exec/pytorch_peer.py's model, --step-layers blocks of width 768, bf16, micro-batch 4, sequence 1024) as
DeepSpeed's bf16 engine runs them: forward and backward, the per-tensor fp32 casts and norms of its gradient-norm
loop, torch's foreach AdamW over fp32 masters, the copies back to bf16. What the first step adds to the resident
set is the process's growth in training (the kernels and libraries torch loads as they are first used), which
runtime.host_process_bytes (measured at initialisation) does not hold. Rank 0 writes every rank's figures to
FILE.json; the last line printed is a one-line summary per rank. Bad arguments exit 2."""
import argparse
import json
import os
import sys


def proc_status_bytes(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{key} missing from /proc/self/status")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON file rank 0 writes")
    ap.add_argument("--step-layers", type=int, default=2, help="blocks of the small GPT-2 the training steps run")
    args = ap.parse_args()
    if args.step_layers < 1:
        print(f"process_footprint.py: --step-layers {args.step_layers}: expected 1 or more", file=sys.stderr)
        sys.exit(2)
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(out_dir):
        print(f"process_footprint.py: --out {args.out}: folder {out_dir} does not exist", file=sys.stderr)
        sys.exit(2)
    if "LOCAL_RANK" not in os.environ:
        print("process_footprint.py: run it under torchrun (LOCAL_RANK, RANK and WORLD_SIZE unset)", file=sys.stderr)
        sys.exit(2)

    points = []

    def mark(name, device):
        import torch
        free, total = torch.cuda.mem_get_info(device)
        points.append({"point": name, "vm_rss_bytes": proc_status_bytes("VmRSS"),
                       "vm_hwm_bytes": proc_status_bytes("VmHWM"), "device_used_bytes": total - free,
                       "torch_reserved_bytes": torch.cuda.memory_reserved(device)})

    import torch
    import torch.distributed as dist
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    torch.cuda.init()
    torch.ones(1, device=device)
    torch.cuda.synchronize(device)
    mark("cuda context", device)
    dist.init_process_group("nccl", device_id=device)
    mark("init_process_group", device)
    x = torch.ones(1, device=device)
    dist.all_reduce(x)
    torch.cuda.synchronize(device)
    mark("first all-reduce (communicator created)", device)
    for mib in (1, 16, 256, 1024):
        y = torch.ones(mib * 2**20 // 2, dtype=torch.bfloat16, device=device)
        dist.all_reduce(y)
        torch.cuda.synchronize(device)
        del y
    torch.cuda.empty_cache()
    mark("all-reduces of 1 MiB to 1 GiB (bf16), cache emptied", device)
    # Each further collective kind, data type and operation DeepSpeed's engine issues: NCCL's kernels are loaded
    # into the context lazily (CUDA_MODULE_LOADING=LAZY), so a kind first used mid-training grows the device's
    # used memory outside torch's allocator.
    world = dist.get_world_size()
    probes = [
        ("all-reduce fp32 sum", lambda: dist.all_reduce(torch.ones(2**20, device=device))),
        ("all-reduce fp16 sum", lambda: dist.all_reduce(torch.ones(2**20, dtype=torch.float16, device=device))),
        ("all-reduce uint8 max", lambda: dist.all_reduce(torch.ones(1, dtype=torch.uint8, device=device),
                                                         op=dist.ReduceOp.MAX)),
        ("all-reduce fp32 max", lambda: dist.all_reduce(torch.ones(1, device=device), op=dist.ReduceOp.MAX)),
    ]
    for name, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        probes += [
            (f"all-gather {name}", lambda dtype=dtype: dist.all_gather_into_tensor(
                torch.empty(2**20 * world, dtype=dtype, device=device), torch.ones(2**20, dtype=dtype, device=device))),
            (f"reduce-scatter {name}", lambda dtype=dtype: dist.reduce_scatter_tensor(
                torch.empty(2**20, dtype=dtype, device=device), torch.ones(2**20 * world, dtype=dtype, device=device))),
        ]
    probes += [
        ("broadcast fp32", lambda: dist.broadcast(torch.ones(2**20, device=device), src=0)),
        ("new group, all-reduce bf16", lambda: dist.all_reduce(torch.ones(2**20, dtype=torch.bfloat16, device=device),
                                                               group=dist.new_group(list(range(world))))),
    ]
    for name, collective in probes:
        collective()
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        mark(name, device)

    # Training steps as DeepSpeed's bf16 engine runs them (engine.py with torch_adam; the bf16 optimizer's step:
    # fp32 gradients, get_grad_norm_direct's per-tensor cast and norm, AdamW over the fp32 masters, the bf16 copy).
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "exec"))
    from pytorch_peer import GPT
    model = GPT(50304, 768, args.step_layers, 12, 1024).to(device=device, dtype=torch.bfloat16)
    masters = [p.detach().float().clone() for p in model.parameters()]
    optimizer = torch.optim.AdamW(masters, lr=1e-4, foreach=True)
    tokens = torch.randint(0, 50304, (4, 1024), device=device)
    torch.cuda.synchronize(device)
    mark("small GPT-2 built on the device", device)
    for step in range(2):
        loss = model(tokens, tokens)
        loss.backward()
        norms = []
        for p, master in zip(model.parameters(), masters):
            master.grad = p.grad.float()
            norms.append(torch.linalg.vector_norm(master.grad))
        dist.all_reduce(torch.stack(norms).square().sum())
        optimizer.step()
        with torch.no_grad():
            for p, master in zip(model.parameters(), masters):
                p.copy_(master)
                p.grad = None
        torch.cuda.synchronize(device)
        mark(f"training step {step + 1}", device)

    rank = dist.get_rank()
    gathered = [None] * world
    dist.all_gather_object(gathered, {"rank": rank, "points": points})
    if rank == 0:
        doc = {"source": "bench/deepspeed/process_footprint.py under torchrun", "torch": torch.__version__,
               "nccl": ".".join(str(v) for v in torch.cuda.nccl.version()), "world_size": world,
               "gpu": torch.cuda.get_device_name(device), "NCCL_NVLS_ENABLE": os.environ.get("NCCL_NVLS_ENABLE"),
               "ranks": gathered}
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
        gib = 2.0**30
        for r in gathered:
            p = r["points"]
            print(f"world {world} rank {r['rank']}: " + "; ".join(
                f"{q['point']}: host {q['vm_hwm_bytes'] / gib:.3f} GiB peak, device {q['device_used_bytes'] / gib:.3f} GiB"
                for q in p))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
