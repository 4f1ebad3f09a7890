#!/usr/bin/env python3
"""The Llama-family peers for `zeroplan run` on Llama configs (run under torchrun, one process per GPU):
transformers' LlamaForCausalLM / Qwen2ForCausalLM built from a config.json (SDPA attention, random init from the
seed, the same on every rank), trained on synthetic tokens, measured as bench/exec/pytorch_peers_multi.py measures
the GPT-2 peers. Modes:

  ddp            fp32 parameters, DistributedDataParallel, torch.autocast(bf16)
  fsdp2          fully_shard per decoder layer, then the root; MixedPrecisionPolicy(param_dtype=bf16,
                 reduce_dtype=fp32): bf16 compute, fp32 reductions, fp32 sharded parameters (master weights)
  fsdp2_compile  the same with torch.compile per decoder layer (in place, before fully_shard, as torchtitan does)
                 fsdp2 and fsdp2_compile with --offload-optimizer cpu: CPUOffloadPolicy(pin_memory=True) (FSDP2's
                 offload: sharded parameters, gradients and optimizer states in host memory, the step on the CPU),
                 torch AdamW fused on the CPU tensors (torch/distributed/fsdp/_fully_shard/_fsdp_api.py)
  deepspeed      deepspeed.initialize with a config dict: bf16, zero_optimization.stage = --stage (0-3),
                 gradient_clipping 1.0, micro batch per GPU; the optimizer from the config: torch AdamW (fused),
                 or with --offload-optimizer cpu DeepSpeedCPUAdam (DeepSpeed's choice for ZeRO-Offload). Stage 3
                 builds the model under zero.Init through transformers' HfDeepSpeedConfig (--no-zero-init: built
                 whole, partitioned by initialize). No torch.cuda.empty_cache() after initialize.

Optimizer everywhere AdamW lr 3e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on tensors of 2 or more
dimensions and 0 on the rest (fused on the GPU), gradient clipping at norm 1.0. Loss: the model's own
(labels=input_ids). Step time: cuda-synchronized from before the forward to after zero_grad, the median over the
steps after --warmup (the steps count includes the warm-up, as in pytorch_peers_multi.py).

Rank 0 prints one JSON line: global tokens/s, step ms, peak allocated GiB (torch.cuda.max_memory_allocated over
the whole process, the larger rank; also peak_allocated_steps_gib, counted from the first step on), MFU against
989 TFLOP/s (H200 dense bf16) per GPU with FLOPs per token 6N + 12*L*h*s, N every parameter (a tied head once).

  torchrun --nproc_per_node 2 bench/llama/hf_peer.py --config bench/llama/configs/tinyllama-1.1b.json \
      --mode fsdp2 --micro-batch 4 --seq 2048
  torchrun --nproc_per_node 2 bench/llama/hf_peer.py --config ... --mode deepspeed --stage 2 [--offload-optimizer cpu]
(torchtitan is not a mode here: see bench/llama/README.md.)
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist

PEAK_TFLOPS = 989.0  # H200 SXM dense bf16, the datasheet figure device-and-peers.md measures MFU against


def build_model(config_path, device, seed, zero_init):
    from transformers import AutoConfig, AutoModelForCausalLM
    with open(config_path) as f:
        d = json.load(f)
    config = AutoConfig.for_model(**d)
    config.use_cache = False
    torch.manual_seed(seed)
    if zero_init:  # deepspeed.zero.Init places the partitions itself
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    else:
        with torch.device(device):  # initialized where it runs (an 8B model's CPU init would take minutes)
            model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    return model, config


def param_groups(model):
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    return [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]


def ds_config(a, world):
    zero = {"stage": a.stage, "reduce_bucket_size": 500000000, "allgather_bucket_size": 500000000}
    if a.stage == 3:
        zero = {"stage": 3, "reduce_bucket_size": 500000000}
    if a.offload_optimizer == "cpu":
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if a.offload_param == "cpu":
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    params = {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}
    if a.offload_optimizer == "cpu":
        params["torch_adam"] = False  # DeepSpeedCPUAdam (adamw_mode) for ZeRO-Offload
    else:
        params.update({"torch_adam": True, "fused": True})  # torch.optim.AdamW(fused=True)
    return {
        "train_micro_batch_size_per_gpu": a.micro_batch,
        "train_batch_size": a.micro_batch * world,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        "bf16": {"enabled": True},
        "optimizer": {"type": "AdamW", "params": params},
        "zero_optimization": zero,
        "steps_per_print": 1000000,
        "wall_clock_breakdown": False,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True, help="a transformers config.json (llama or qwen2)")
    ap.add_argument("--mode", choices=["ddp", "fsdp2", "fsdp2_compile", "deepspeed"], required=True)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=20, help="steps in all, the warm-up included")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1234, help="model init (every rank the same)")
    ap.add_argument("--stage", type=int, choices=[0, 1, 2, 3], default=2, help="deepspeed: ZeRO stage")
    ap.add_argument("--offload-optimizer", choices=["none", "cpu"], default="none",
                    help="deepspeed: DeepSpeedCPUAdam; fsdp2: CPUOffloadPolicy")
    ap.add_argument("--offload-param", choices=["none", "cpu"], default="none", help="deepspeed, stage 3")
    ap.add_argument("--no-zero-init", action="store_true", help="deepspeed stage 3: build the model whole")
    ap.add_argument("--activation-checkpointing", action="store_true",
                    help="transformers' gradient_checkpointing_enable (use_reentrant False); off in the peers' table")
    ap.add_argument("--fullgraph", action="store_true", help="fsdp2_compile: compile each layer with fullgraph=True")
    ap.add_argument("--name", help="a label for the JSON line (default: the mode)")
    ap.add_argument("--json-out", help="rank 0 also writes the JSON line to this file")
    a = ap.parse_args()
    if a.warmup >= a.steps:
        ap.error(f"--warmup {a.warmup} must be below --steps {a.steps}")
    if a.mode != "deepspeed" and a.offload_param != "none":
        ap.error("--offload-param is a deepspeed option (fsdp2's --offload-optimizer cpu offloads the parameters too)")
    if a.mode == "ddp" and a.offload_optimizer != "none":
        ap.error("--offload-optimizer: deepspeed, fsdp2 or fsdp2_compile")

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dev = torch.device("cuda", local_rank)
    if a.mode == "deepspeed":
        import deepspeed
        deepspeed.init_distributed()
    else:
        # CPU offload's sharded gradients are CPU DTensors: their norm's all-reduce needs gloo beside NCCL (as
        # torchtitan initialises "cuda:nccl,cpu:gloo" for its CPU offload)
        dist.init_process_group("cuda:nccl,cpu:gloo" if a.offload_optimizer == "cpu" else "nccl", device_id=dev)
    rank, world = dist.get_rank(), dist.get_world_size()
    B, T = a.micro_batch, a.seq

    hf_ds = None
    if a.mode == "deepspeed":
        config_dict = ds_config(a, world)
        if a.stage == 3 and not a.no_zero_init:
            # transformers' from_config sees this object and builds the model under deepspeed.zero.Init
            # (partitioned as it is made, its init gathered per module), as its Trainer does
            from transformers.integrations import HfDeepSpeedConfig
            hf_ds = HfDeepSpeedConfig(config_dict)  # noqa: F841 (must stay alive)
    model, config = build_model(a.config, dev, a.seed, zero_init=hf_ds is not None)
    if a.activation_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if hf_ds is not None:
        # under zero.Init each parameter's full size is ds_numel
        n_params = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters())
    else:
        n_params = sum(p.numel() for p in model.parameters())
    L, h, V = config.num_hidden_layers, config.hidden_size, config.vocab_size
    flops_per_token = 6 * n_params + 12 * L * h * T

    autocast = False
    engine = None
    if a.mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model, device_ids=[local_rank])
        opt = torch.optim.AdamW(param_groups(model), lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
        autocast = True
    elif a.mode in ("fsdp2", "fsdp2_compile"):
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        offload = CPUOffloadPolicy(pin_memory=True) if a.offload_optimizer == "cpu" else OffloadPolicy()
        for layer in model.model.layers:
            if a.mode == "fsdp2_compile":
                layer.compile(fullgraph=a.fullgraph)
            fully_shard(layer, mp_policy=mp, offload_policy=offload)
        fully_shard(model, mp_policy=mp, offload_policy=offload)
        # fused on either device (torch's CPU kernel of AdamW since 2.4)
        opt = torch.optim.AdamW(param_groups(model), lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    else:
        import deepspeed
        engine, opt, _, _ = deepspeed.initialize(model=model, model_parameters=param_groups(model),
                                                 config=config_dict)

    g = torch.Generator(device=dev).manual_seed(1 + rank)
    times, loss = [], None
    # The whole process's peak so far (building, sharding, initialize), then the peak of the steps alone
    torch.cuda.synchronize()
    peak_before_steps = torch.cuda.max_memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    for step in range(a.steps):
        inp = torch.randint(0, V, (B, T), device=dev, generator=g)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        if engine is not None:
            loss = engine(input_ids=inp, labels=inp).loss
            engine.backward(loss)
            engine.step()  # clips (gradient_clipping), steps, zeroes the gradients
        else:
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                loss = model(input_ids=inp, labels=inp).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    peak_steps = torch.cuda.max_memory_allocated()
    stats = torch.tensor([peak_steps, max(peak_steps, peak_before_steps), med, float(loss.detach().float().item())],
                         dtype=torch.float64, device=dev)
    stats_max = stats.clone()
    dist.all_reduce(stats_max, op=dist.ReduceOp.MAX)
    if rank == 0:
        med_max = stats_max[2].item()  # the slowest rank's median (they wait for one another anyway)
        tokens_per_second = B * T * world / med_max
        tflops_per_gpu = tokens_per_second * flops_per_token / world / 1e12
        label = (a.mode + ("_offload" if a.offload_optimizer == "cpu" else "")) if a.mode != "deepspeed" else \
            f"deepspeed_s{a.stage}" + ("_offopt" if a.offload_optimizer == "cpu" else "") + \
            ("_offparam" if a.offload_param == "cpu" else "")
        row = {"peer": a.name or label, "model": os.path.basename(a.config), "gpus": world, "micro_batch": B,
               "seq": T, "step_seconds_median": med_max, "step_ms": 1e3 * med_max,
               "tokens_per_second": tokens_per_second, "tflops_per_gpu": tflops_per_gpu,
               "mfu": tflops_per_gpu / PEAK_TFLOPS, "peak_allocated_gib": stats_max[1].item() / 2**30,
               "peak_allocated_steps_gib": stats_max[0].item() / 2**30, "parameters": n_params,
               "flops_per_token": flops_per_token, "loss_last": stats[3].item(),
               "activation_checkpointing": a.activation_checkpointing, "steps": a.steps, "warmup": a.warmup,
               "torch": torch.__version__}
        if a.mode != "deepspeed":
            row["optimizer"] = "torch.optim.AdamW (fused)"
        if a.mode == "deepspeed":
            import deepspeed
            basic = engine.basic_optimizer
            row.update({"deepspeed": deepspeed.__version__, "optimizer": f"{type(basic).__module__}.{type(basic).__name__}"
                        + (" (fused)" if getattr(basic, "defaults", {}).get("fused") else ""), "stage": a.stage, "offload_optimizer": a.offload_optimizer,
                        "offload_param": a.offload_param, "zero_init": hf_ds is not None,
                        "omp_threads": int(os.environ.get("OMP_NUM_THREADS", "0")) or None})
        line = json.dumps(row)
        print(line, flush=True)
        if a.json_out:
            with open(a.json_out, "w") as f:
                f.write(line + "\n")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
