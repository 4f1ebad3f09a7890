#!/usr/bin/env python3
"""Where transformers' eager Llama modules spend the GPU's time: the kernels of one training micro-step of
LlamaForCausalLM (sdpa, bf16 parameters, no autocast), grouped by operator and input shapes, for the planner's
compute model of `--model-code transformers` (sim/compute_time.cpp). No DeepSpeed: the module's own forward and
backward, the way DeepSpeed's engine calls them.

  eager_module_profile.py --config CONFIG.json [--layers N] [--micro-batch 4] [--seq 2048]
                          [--mode full|frozen|lora] [--lora-rank 16] [--lora-alpha 32]
                          [--lora-targets q_proj,k_proj,v_proj,o_proj] [--out FILE.json]

  --layers N   keep N decoder layers of the config (default: all)
  --mode       full: every parameter trained; frozen: none (the input gradient only, as a LoRA base sees it);
               lora: peft's adapters on a frozen base (peft.get_peft_model, lora_dropout 0; the adapters cast to
               the base's bf16, as DeepSpeed's bf16 engine casts the module)

Prints the phases (forward, backward; synchronised, median of 5) and the operators by self GPU time with their input
shapes, and writes them to --out: {"phases_ms": {...}, "ops": [{"name", "shapes", "calls", "gpu_ms", "cpu_ms"}],
"gpu_ms_total", "kernels"} for one micro-step.
"""
import argparse
import json
import statistics
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--layers", type=int)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--mode", choices=["full", "frozen", "lora"], default="full")
    ap.add_argument("--lora-rank", type=int, default=16)
    ap.add_argument("--lora-alpha", type=float, default=32)
    ap.add_argument("--lora-targets", default="q_proj,k_proj,v_proj,o_proj")
    ap.add_argument("--out")
    a = ap.parse_args()

    from transformers import AutoConfig, AutoModelForCausalLM
    config = AutoConfig.from_pretrained(a.config)
    if a.layers:
        config.num_hidden_layers = a.layers
    config.use_cache = False
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
    model.train()
    if a.mode != "full":
        model.requires_grad_(False)
    if a.mode == "lora":
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=a.lora_rank, lora_alpha=a.lora_alpha, lora_dropout=0.0,
                                                 target_modules=a.lora_targets.split(","), bias="none",
                                                 task_type="CAUSAL_LM"))
        model = model.to(torch.bfloat16)
    if a.mode == "frozen":  # an input that needs a gradient, so that backward runs through the frozen layers
        embed = model.get_input_embeddings()
        embed.register_forward_hook(lambda m, i, o: o.requires_grad_(True))
    tokens = torch.randint(0, config.vocab_size, (a.micro_batch, a.seq), device="cuda")

    def micro_step():
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        for p in model.parameters():
            p.grad = None

    phases = {"forward": [], "backward": []}
    for i in range(7):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = model(input_ids=tokens, labels=tokens).loss
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        loss.backward()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        for p in model.parameters():
            p.grad = None
        if i >= 2:
            phases["forward"].append(t1 - t0)
            phases["backward"].append(t2 - t1)

    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        micro_step()
        torch.cuda.synchronize()
    ops = []
    for e in prof.key_averages(group_by_input_shape=True):
        gpu = getattr(e, "self_device_time_total", None)
        if gpu is None:
            gpu = e.self_cuda_time_total
        if gpu <= 0:
            continue
        ops.append({"name": e.key, "shapes": str(e.input_shapes)[:200], "calls": e.count, "gpu_ms": gpu / 1e3,
                    "cpu_ms": e.self_cpu_time_total / 1e3})
    ops.sort(key=lambda o: -o["gpu_ms"])
    # An operator's self GPU time is its own kernels' (nested operators keep theirs), so the aten operators' sum is
    # every kernel launched from one.
    aten = [o for o in ops if o["name"].startswith("aten::")]
    total = sum(o["gpu_ms"] for o in aten)
    kernels = sum(1 for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA"))
    result = {"config": a.config, "layers": config.num_hidden_layers, "micro_batch": a.micro_batch, "seq": a.seq,
              "mode": a.mode, "torch": torch.__version__, "device": torch.cuda.get_device_name(),
              "phases_ms": {k: 1e3 * statistics.median(v) for k, v in phases.items()},
              "gpu_ms_total": total, "kernels": kernels, "ops": aten}
    print(json.dumps({k: v for k, v in result.items() if k != "ops"}))
    for o in aten[:60]:
        print(f"{o['gpu_ms']:9.3f} ms {o['calls']:5d}  {o['name']:<40s} {o['shapes']}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
