#!/usr/bin/env python3
"""The peer of `zeroplan run --lora-rank ...`: LoRA and QLoRA fine-tuning as people write it with transformers,
peft 0.21 and bitsandbytes 0.50, measured on the GPU machine beside our executor (bench/lora/device_lora.sh).

  peft_peer.py train --config CONFIG.json [--quantize-base none|nf4] [--base-dir DIR]
                     [--lora-rank 16] [--lora-alpha 32] [--lora-targets q_proj,k_proj,v_proj,o_proj]
                     [--micro-batch 4] [--seq 1024] [--warmup 3] [--steps 10] [--gradient-checkpointing]
                     [--autocast on|off] [--prepare-kbit] [--json-out FILE]
      (`train` may be left out.) One process per GPU: plain python3 for one GPU, torchrun --nproc_per_node N for
      N (DistributedDataParallel over the adapters; the base is frozen, so only the adapters' gradients are
      reduced).
      The model: transformers' LlamaForCausalLM / Qwen2ForCausalLM from CONFIG.json (SDPA attention), random
      weights from the seed (nobody's weights are needed to time a step), bf16 parameters.
        none  built on the GPU in bf16 (from_config under torch.device("cuda"): transformers' init runs there).
        nf4   QLoRA: bitsandbytes quantises at load, so the base is read from a checkpoint: --base-dir (a bf16
              save_pretrained folder; `save-base` writes one, and `train` runs `save-base` in a child process
              when the folder has no model.safetensors, so that this process's allocator never holds the bf16
              model), loaded with from_pretrained(quantization_config=BitsAndBytesConfig(load_in_4bit=True,
              bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=bfloat16),
              dtype=bfloat16, device_map={"": the GPU}): every linear layer but lm_head as bnb.nn.Linear4bit
              (Params4bit codes + double-quantised absmax), embeddings, norms and lm_head in bf16.
      Adapters: peft.get_peft_model(model, LoraConfig(r, lora_alpha, target_modules, lora_dropout=0.0,
      bias="none", task_type="CAUSAL_LM")). peft's defaults otherwise: lora_A kaiming-uniform, lora_B zero, and
      autocast_adapter_dtype=True, which keeps the adapters in fp32 on a bf16 base (on a 4-bit base they are fp32
      anyway: peft moves them to the base weight's device and takes its dtype only when that is floating).
      --prepare-kbit (QLoRA only; off by default): peft.prepare_model_for_kbit_training first, as the QLoRA
      notebooks do. It freezes everything, casts EVERY bf16/fp16 parameter that is not Params4bit to fp32 (the
      embeddings, lm_head and every RMSNorm weight: for TinyLlama 1.1B 131M parameters, +0.25 GiB; for Llama-2 7B
      262M, +0.49 GiB; and an fp32 lm_head makes the logits GEMM an fp32 one, slower and with fp32 logits kept for
      the backward), and turns gradient checkpointing on (use_gradient_checkpointing=True is its default; here
      it follows --gradient-checkpointing). Off by default so that the row is the same job as zeroplan's plan and
      run (bf16 embeddings/head/norms, no checkpointing).
      --autocast on (default): the forward under torch.autocast("cuda", bfloat16), as transformers' Trainer with
      bf16=True runs it (the fp32 adapters' matmuls in bf16); off: no autocast (peft casts the input to the
      adapters' fp32 and the result back).
      Optimizer: torch.optim.AdamW(fused=True) over the trainable parameters (the adapters), lr 2e-4, betas (0.9,
      0.999), weight decay 0.0 (the Trainer's defaults but lr); gradient clipping at norm 1.0 (the Trainer's
      max_grad_norm). Loss: the model's own (labels=input_ids: transformers upcasts the logits to fp32).
      Timing: each step (forward, backward, clip, optimizer step, zero_grad) between two CUDA events, the median of
      the --steps after --warmup steps; the wall clock from a synchronised start beside it.
      Memory: torch.cuda.max_memory_allocated (the whole process, and the steps alone), max_memory_reserved, and
      the device used as nvidia-smi shows it: total - free of torch.cuda.mem_get_info, before the model is built
      (the CUDA context; nothing else should be on the GPU) and its peak over the steps (read after each).
      Trainable parameters exactly as peft counts them: print_trainable_parameters' line (captured) and
      get_nb_trainable_parameters() (4-bit Params4bit counted as numel * 2, peft's own rule).
      Prints one JSON line (rank 0), also to --json-out.

  peft_peer.py save-base --config CONFIG.json --out DIR [--seed S] [--dtype bf16|fp32]
      Builds the model on the GPU from the seed and save_pretrained's it into DIR (one model.safetensors and
      config.json): the checkpoint `train --quantize-base nf4` loads.
"""
import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "llama"))
import hf_reference as R  # noqa: E402  (load_config, save_model, quiet_transformers)

DEFAULT_TARGETS = "q_proj,k_proj,v_proj,o_proj"


def has_checkpoint(d):
    return d and (os.path.exists(os.path.join(d, "model.safetensors"))
                  or os.path.exists(os.path.join(d, "model.safetensors.index.json")))


# ---------------------------------------------------------------------------------------------------- save-base
def cmd_save_base(a):
    import torch
    from transformers import AutoModelForCausalLM

    R.quiet_transformers()
    config = R.load_config(a.config)
    config.use_cache = False
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[a.dtype]
    torch.manual_seed(a.seed)
    t0 = time.perf_counter()
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    os.makedirs(a.out, exist_ok=True)
    R.save_model(model, a.out)
    n = sum(p.numel() for p in model.parameters())
    print(f"save-base: {type(model).__name__} {n:,} parameters in {a.dtype} -> {a.out} "
          f"({time.perf_counter() - t0:.1f} s)")


# ---------------------------------------------------------------------------------------------------- train
def trainable_count(model):
    """peft's own figures: the line print_trainable_parameters prints, and get_nb_trainable_parameters()."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        model.print_trainable_parameters()
    trainable, total = model.get_nb_trainable_parameters()
    return buf.getvalue().strip(), int(trainable), int(total)


def versions():
    out = {}
    for name in ("torch", "transformers", "peft", "bitsandbytes", "accelerate"):
        try:
            out[name] = __import__(name).__version__
        except Exception as e:  # noqa: BLE001  (a missing package is a fact to report, not a failure here)
            out[name] = f"unavailable ({type(e).__name__})"
    return out


def cmd_train(a):
    import torch
    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dev = torch.device("cuda", local_rank)
    if world > 1:
        dist.init_process_group("nccl", device_id=dev)
    rank = dist.get_rank() if world > 1 else 0

    # The device before anything of ours is on it: the CUDA context (and whatever else holds the GPU)
    torch.cuda.synchronize()
    free0, total_bytes = torch.cuda.mem_get_info()
    baseline_used = total_bytes - free0

    import transformers
    from transformers import AutoModelForCausalLM
    import peft
    from peft import LoraConfig, get_peft_model

    R.quiet_transformers()
    config = R.load_config(a.config)
    config.use_cache = False
    targets = [t.strip() for t in a.lora_targets.split(",") if t.strip()]
    if targets == ["all-linear"]:
        targets = "all-linear"

    t_load = time.perf_counter()
    if a.quantize_base == "nf4":
        base_dir = a.base_dir
        if not has_checkpoint(base_dir):
            if rank == 0:
                # a child process: the bf16 model built to be saved never touches this process's allocator
                cmd = [sys.executable, os.path.abspath(__file__), "save-base", "--config", a.config, "--out", base_dir,
                       "--seed", str(a.seed)]
                subprocess.run(cmd, check=True, env={**os.environ, "CUDA_VISIBLE_DEVICES":
                                                     os.environ.get("CUDA_VISIBLE_DEVICES", str(local_rank))})
            if world > 1:
                dist.barrier()
        from transformers import BitsAndBytesConfig
        bnb_config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                        bnb_4bit_compute_dtype=torch.bfloat16)
        model = AutoModelForCausalLM.from_pretrained(base_dir, quantization_config=bnb_config, dtype=torch.bfloat16,
                                                     device_map={"": local_rank}, attn_implementation="sdpa")
        model.config.use_cache = False
        if a.prepare_kbit:
            from peft import prepare_model_for_kbit_training
            model = prepare_model_for_kbit_training(
                model, use_gradient_checkpointing=a.gradient_checkpointing,
                gradient_checkpointing_kwargs={"use_reentrant": False})
        elif a.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        torch.manual_seed(a.seed)
        with torch.device(dev):
            model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
        if a.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    lora_config = LoraConfig(r=a.lora_rank, lora_alpha=a.lora_alpha, target_modules=targets, lora_dropout=0.0,
                             bias="none", task_type="CAUSAL_LM")
    # (gradient checkpointing with use_reentrant=False needs no enable_input_require_grads hook for a frozen
    # embedding; it applies in train mode)
    model = get_peft_model(model, lora_config)
    model.train()
    trainable_line, trainable, all_params = trainable_count(model)
    quantized_modules = 0
    try:
        import bitsandbytes as bnb
        quantized_modules = sum(isinstance(m, bnb.nn.Linear4bit) for m in model.modules())
    except ImportError:
        pass
    if a.quantize_base == "nf4" and quantized_modules == 0:
        raise SystemExit("peft_peer: --quantize-base nf4 but no bnb.nn.Linear4bit in the model")
    params = [p for p in model.parameters() if p.requires_grad]
    adapter_dtypes = sorted({str(p.dtype).replace("torch.", "") for p in params})
    net = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP
        net = DDP(model, device_ids=[local_rank])
    opt = torch.optim.AdamW(params, lr=2e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, fused=True)
    torch.cuda.synchronize()
    load_seconds = time.perf_counter() - t_load

    B, T, V = a.micro_batch, a.seq, config.vocab_size
    g = torch.Generator(device=dev).manual_seed(1 + rank)
    peak_before_steps = torch.cuda.max_memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    event_ms, wall_s, losses = [], [], []
    used_peak = 0
    start_ev, end_ev = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for step in range(a.warmup + a.steps):
        inp = torch.randint(0, V, (B, T), device=dev, generator=g)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        start_ev.record()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.autocast == "on"):
            loss = net(input_ids=inp, labels=inp).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        end_ev.record()
        losses.append(float(loss.detach().float().item()))  # the loss read back, one host sync per step
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        free, total = torch.cuda.mem_get_info()
        used_peak = max(used_peak, total - free)
        if step >= a.warmup:
            event_ms.append(start_ev.elapsed_time(end_ev))
            wall_s.append(wall)

    def median(xs):
        xs = sorted(xs)
        return xs[len(xs) // 2] if len(xs) % 2 else 0.5 * (xs[len(xs) // 2 - 1] + xs[len(xs) // 2])

    med = median(event_ms) / 1e3
    med_wall = median(wall_s)
    peak_steps = torch.cuda.max_memory_allocated()
    stats = torch.tensor([med, med_wall, peak_steps, max(peak_steps, peak_before_steps),
                          torch.cuda.max_memory_reserved(), used_peak, baseline_used], dtype=torch.float64, device=dev)
    if world > 1:
        dist.all_reduce(stats, op=dist.ReduceOp.MAX)
    gib = 2.0 ** 30
    if rank == 0:
        med_max, wall_max = stats[0].item(), stats[1].item()
        row = {
            "peer": "peft" + ("+bnb-nf4" if a.quantize_base == "nf4" else ""),
            "name": a.name, "model": os.path.basename(a.config), "gpus": world, "micro_batch": B, "seq": T,
            "quantize_base": a.quantize_base,
            "lora": {"rank": a.lora_rank, "alpha": a.lora_alpha, "targets": targets, "dropout": 0.0},
            "step_seconds_median": med_max, "step_ms": 1e3 * med_max, "step_ms_wall": 1e3 * wall_max,
            "step_ms_all": event_ms, "tokens_per_second": B * T * world / med_max,
            "peak_allocated_gib": stats[3].item() / gib, "peak_allocated_steps_gib": stats[2].item() / gib,
            "peak_reserved_gib": stats[4].item() / gib, "device_used_peak_gib": stats[5].item() / gib,
            "device_used_baseline_gib": stats[6].item() / gib,
            "device_total_gib": total_bytes / gib,
            "trainable_params": trainable, "all_params": all_params, "print_trainable_parameters": trainable_line,
            "adapter_dtypes": adapter_dtypes, "linear4bit_modules": quantized_modules,
            "gradient_checkpointing": a.gradient_checkpointing, "autocast": a.autocast,
            "prepare_kbit": a.prepare_kbit, "optimizer": "torch.optim.AdamW (fused), clip 1.0",
            "loss_first": losses[0], "loss_last": losses[-1], "steps": a.steps, "warmup": a.warmup,
            "load_seconds": load_seconds, "device": torch.cuda.get_device_name(dev), "versions": versions(),
        }
        line = json.dumps(row)
        print(line, flush=True)
        if a.json_out:
            with open(a.json_out, "w") as f:
                f.write(line + "\n")
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in ("train", "save-base", "-h", "--help"):
        argv.insert(0, "train")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="time LoRA/QLoRA steps")
    t.add_argument("--config", required=True, help="a transformers config.json (llama or qwen2)")
    t.add_argument("--quantize-base", choices=["none", "nf4"], default="none")
    t.add_argument("--base-dir", help="nf4: the bf16 checkpoint to load (written by save-base when absent)")
    t.add_argument("--lora-rank", type=int, default=16)
    t.add_argument("--lora-alpha", type=float, default=32.0)
    t.add_argument("--lora-targets", default=DEFAULT_TARGETS, help="PEFT module names, comma-separated, or all-linear")
    t.add_argument("--micro-batch", type=int, default=4)
    t.add_argument("--seq", type=int, default=1024)
    t.add_argument("--warmup", type=int, default=3, help="steps before the timed ones")
    t.add_argument("--steps", type=int, default=10, help="timed steps (after the warm-up)")
    t.add_argument("--seed", type=int, default=1234)
    t.add_argument("--gradient-checkpointing", action="store_true",
                   help="transformers' gradient_checkpointing_enable(use_reentrant=False)")
    t.add_argument("--autocast", choices=["on", "off"], default="on",
                   help="the forward under torch.autocast(bf16), as the Trainer's bf16=True (default on)")
    t.add_argument("--prepare-kbit", action="store_true",
                   help="nf4: peft.prepare_model_for_kbit_training (upcasts embeddings/head/norms to fp32)")
    t.add_argument("--name", help="a label for the JSON line")
    t.add_argument("--json-out", help="rank 0 also writes the JSON line here")
    s = sub.add_parser("save-base", help="write a random bf16 checkpoint for the nf4 rows")
    s.add_argument("--config", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--seed", type=int, default=1234)
    s.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    a = ap.parse_args(argv)
    if a.cmd == "train":
        if a.quantize_base == "nf4" and not a.base_dir:
            ap.error("--quantize-base nf4 needs --base-dir (a bf16 checkpoint folder, written when absent)")
        if a.prepare_kbit and a.quantize_base != "nf4":
            ap.error("--prepare-kbit is for --quantize-base nf4")
        if a.steps < 1:
            ap.error("--steps must be at least 1")
        cmd_train(a)
    else:
        cmd_save_base(a)


if __name__ == "__main__":
    main()
