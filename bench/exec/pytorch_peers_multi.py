#!/usr/bin/env python3
"""The multi-GPU PyTorch peers for `zeroplan run --gpus N` (run under torchrun, one process per GPU): the GPT-2 of
pytorch_peer.py with DDP (stage 0), ZeroRedundancyOptimizer (stage 1), FSDP SHARD_GRAD_OP (stage 2), FSDP
FULL_SHARD or FSDP2 fully_shard (stage 3), and DDP / FSDP2 with torch.compile (ddp_compile, fsdp2_compile:
each decoder block compiled before FSDP2 shards it, as torchtitan does), bf16 (autocast over fp32 parameters for DDP/ZeRO-1; FSDP bf16
parameters with fp32 master, as in ../shared/reference/device-and-peers.md). Rank 0 prints one JSON line: global tokens/s, step ms, peak allocated."""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision, ShardingStrategy
from torch.nn.parallel import DistributedDataParallel as DDP

from pytorch_peer import GPT, Block


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["ddp", "ddp_compile", "zero1", "fsdp_grad_op", "fsdp_full", "fsdp2", "fsdp2_compile"], required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    a = ap.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dev = torch.device("cuda")
    B, T, V = 8, 1024, 50304
    model = GPT(V, 1600, 48, 25, T).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    autocast = True
    if a.mode in ("fsdp2", "fsdp2_compile"):
        # FSDP2 (torch.distributed.fsdp.fully_shard): each block its own group, then the root; bf16 compute and
        # reduction, fp32 sharded parameters (the device-and-peers.md configuration).
        from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
        for m in model.modules():
            if isinstance(m, Block):
                if a.mode == "fsdp2_compile":
                    m.compile()  # in place, before sharding: torchtitan's per-block order
                fully_shard(m, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
        autocast = False
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                lr=3e-4, betas=(0.9, 0.95), fused=True)
    elif a.mode in ("fsdp_grad_op", "fsdp_full"):
        from functools import partial
        from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
        strategy = ShardingStrategy.SHARD_GRAD_OP if a.mode == "fsdp_grad_op" else ShardingStrategy.FULL_SHARD
        model = FSDP(model, sharding_strategy=strategy, use_orig_params=True,
                     auto_wrap_policy=partial(transformer_auto_wrap_policy, transformer_layer_cls={Block}),
                     mixed_precision=MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16))
        autocast = False
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                lr=3e-4, betas=(0.9, 0.95), fused=True)
    elif a.mode == "zero1":
        model = DDP(model, device_ids=[dev.index])
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=3e-4,
                                      betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    else:
        if a.mode == "ddp_compile":
            model = torch.compile(model)  # compiled, then wrapped in DDP, as nanoGPT does
        model = DDP(model, device_ids=[dev.index])
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                lr=3e-4, betas=(0.9, 0.95), fused=True)
    g = torch.Generator(device=dev).manual_seed(1 + rank)
    times = []
    for step in range(a.steps):
        inp = torch.randint(0, 50257, (B, T), device=dev, generator=g)
        tgt = torch.randint(0, 50257, (B, T), device=dev, generator=g)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            loss = model(inp, tgt)
        loss.backward()
        if a.mode in ("fsdp_grad_op", "fsdp_full"):
            model.clip_grad_norm_(1.0)
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    peak = torch.tensor([torch.cuda.max_memory_allocated() / 2**30], device=dev)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(json.dumps({"peer": a.mode, "gpus": world, "step_seconds_median": med,
                          "tokens_per_second": B * T * world / med, "peak_allocated_gib": peak.item()}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
