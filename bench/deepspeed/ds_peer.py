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

A Hugging Face config.json (model_type llama, mistral or qwen2) as --model trains that model the way a
"transformers + DeepSpeed" script does (hf_model below): AutoModelForCausalLM.from_config(attn_implementation="sdpa")
in the config's 16-bit dtype, built on the GPU at stages 0-2 and under deepspeed.zero.Init at stage 3 (transformers'
HfDeepSpeedConfig, as its Trainer does), model.train(), the model's own loss (labels=input_ids) on random token ids,
--gradient-checkpointing (gradient_checkpointing_enable, use_reentrant False); optionally LoRA adapters (--lora-rank,
--lora-alpha, --lora-targets: peft.get_peft_model, lora_dropout 0, bias none, CAUSAL_LM) on a bf16 base, or on a
bitsandbytes NF4 base (--quantize-base nf4: QLoRA, stages 0-2 only). The run records what `zeroplan plan` needs to
plan the row again (micro_batch, seq, checkpointing, lora with peft's trainable-parameter count, planner_flags).
"""
import argparse
import contextlib
import json
import os
import statistics
import sys
import time

import subprocess

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


HF_MODEL_TYPES = ("llama", "mistral", "qwen2")
_hf_deepspeed_config = None  # transformers' HfDeepSpeedConfig must outlive from_config (a weak reference is kept)


def read_hf_config(path):
    """The Hugging Face config.json at path as a dict, or None when path is not one (a zeroplan model description
    has "transformer", a config.json "model_type")."""
    if not path.endswith(".json") or not os.path.isfile(path):
        return None
    with open(path) as f:
        d = json.load(f)
    return d if isinstance(d, dict) and "model_type" in d and "transformer" not in d else None


def has_checkpoint(d):
    return bool(d) and (os.path.exists(os.path.join(d, "model.safetensors"))
                        or os.path.exists(os.path.join(d, "model.safetensors.index.json")))


def hf_model(args, config, dtype, rank, world, local_rank):
    """The transformers model of the config.json args.model as a training script builds it, with its LoRA
    adapters where asked; returns (model, shape) where shape says what micro_step_parts and the JSON need."""
    global _hf_deepspeed_config
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()
    with open(args.model) as f:
        hf = AutoConfig.for_model(**json.load(f))
    hf.use_cache = False
    stage = config.get("zero_optimization", {}).get("stage", 0)
    build = None
    torch.manual_seed(args.seed)
    if args.quantize_base == "nf4":
        # bitsandbytes quantises at load: the base is a bf16 checkpoint written first (bench/lora/peft_peer.py
        # save-base, a child process so that this one's allocator never holds the bf16 model)
        base_dir = args.base_dir
        if not has_checkpoint(base_dir):
            if rank == 0:
                subprocess.run([sys.executable, os.path.join(HERE, "..", "lora", "peft_peer.py"), "save-base",
                                "--config", args.model, "--out", base_dir, "--seed", str(args.seed)], check=True,
                               env={**os.environ, "CUDA_VISIBLE_DEVICES":
                                    os.environ.get("CUDA_VISIBLE_DEVICES", str(local_rank))})
            if world > 1:
                dist.barrier()
        from transformers import BitsAndBytesConfig
        quantization = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                          bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16)
        model = AutoModelForCausalLM.from_pretrained(base_dir, quantization_config=quantization, dtype=torch.bfloat16,
                                                     device_map={"": local_rank}, attn_implementation="sdpa")
        model.config.use_cache = False
        build = f"from_pretrained({base_dir}) with BitsAndBytesConfig nf4, double quant, compute bf16, on the GPU"
    elif stage == 3:
        # from_config sees the live HfDeepSpeedConfig and builds the model under deepspeed.zero.Init (partitioned as
        # it is made), as transformers' Trainer does
        from transformers.integrations import HfDeepSpeedConfig
        _hf_deepspeed_config = HfDeepSpeedConfig(config)
        model = AutoModelForCausalLM.from_config(hf, attn_implementation="sdpa", dtype=dtype)
        build = f"from_config under deepspeed.zero.Init (HfDeepSpeedConfig), {str(dtype).replace('torch.', '')}"
    else:
        with torch.device("cuda", local_rank):  # initialised where it trains (a CPU init of 1B+ takes long)
            model = AutoModelForCausalLM.from_config(hf, attn_implementation="sdpa", dtype=dtype)
        build = f"from_config on the GPU, {str(dtype).replace('torch.', '')}"
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    lora = None
    if args.lora_rank is not None:
        import io
        from peft import LoraConfig, get_peft_model
        targets = args.lora_targets
        if targets is not None:
            targets = [t.strip() for t in targets.split(",") if t.strip()]
            if targets == ["all-linear"]:
                targets = "all-linear"
        model = get_peft_model(model, LoraConfig(r=args.lora_rank, lora_alpha=args.lora_alpha, target_modules=targets,
                                                 lora_dropout=0.0, bias="none", task_type="CAUSAL_LM"))
        line = io.StringIO()
        with contextlib.redirect_stdout(line):
            model.print_trainable_parameters()
        trainable, total = model.get_nb_trainable_parameters()
        adapter_dtypes = sorted({str(p.dtype).replace("torch.", "") for p in model.parameters() if p.requires_grad})
        if stage == 3:
            # DeepSpeed casts the parameters to bf16 itself at stages 0-2 but not those of a zero.Init model, and
            # peft keeps the adapters in fp32 (autocast_adapter_dtype): stage 3 would partition fp32 adapters
            # beside bf16 ones. The same dtype at every stage (fp32 masters in DeepSpeed's optimizer).
            for p in model.parameters():
                if p.requires_grad and p.dtype != dtype:
                    p.data = p.data.to(dtype)
        peft_config = model.peft_config["default"]
        lora = {"rank": args.lora_rank, "alpha": args.lora_alpha,
                "targets": sorted(peft_config.target_modules) if isinstance(peft_config.target_modules, (set, list))
                else peft_config.target_modules,
                "dropout": 0.0, "quantize_base": args.quantize_base, "trainable_params": int(trainable),
                "all_params": int(total), "print_trainable_parameters": line.getvalue().strip(),
                "adapter_dtypes_from_peft": adapter_dtypes}
        if args.quantize_base == "nf4":
            import bitsandbytes as bnb
            lora["linear4bit_modules"] = sum(isinstance(m, bnb.nn.Linear4bit) for m in model.modules())
            if lora["linear4bit_modules"] == 0:
                raise SystemExit("ds_peer.py: --quantize-base nf4 but no bitsandbytes Linear4bit in the model")
    model.train()  # from_config leaves it as built; gradient checkpointing applies in training mode only
    parameters = sum(getattr(p, "ds_numel", 0) or p.numel() for p in model.parameters())
    shape = {"hf": True, "vocab_size": hf.vocab_size, "model_type": hf.model_type,
             "class": type(model.get_base_model() if lora else model).__name__, "build": build,
             "parameters": parameters, "tie_word_embeddings": bool(getattr(hf, "tie_word_embeddings", False)),
             "lora": lora}
    return model, shape


def build_model(args, config, dtype, rank=0, world=1, local_rank=0):
    if args.hf_config is not None:
        return hf_model(args, config, dtype, rank, world, local_rank)
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
        if shape.get("hf"):  # the model's own loss (transformers shifts the labels itself)
            tokens = torch.randint(0, shape["vocab_size"], (micro, seq), device=device, generator=generator)
            return engine(input_ids=tokens, labels=tokens).loss
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


def parse_args(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="zeroplan model description (gpt2 family), 'resnet101', or a "
                    "Hugging Face config.json (model_type llama, mistral, qwen2: transformers' model of it)")
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
    hf = ap.add_argument_group("Hugging Face config.json models (transformers, peft, bitsandbytes)")
    hf.add_argument("--gradient-checkpointing", action="store_true",
                    help="model.gradient_checkpointing_enable(use_reentrant=False): every decoder layer recomputed "
                    "(the planner's --checkpointing full)")
    hf.add_argument("--lora-rank", type=int, help="LoRA adapters of this rank (peft LoraConfig r); the base frozen")
    hf.add_argument("--lora-alpha", type=float, help="LoRA lora_alpha (default peft's 8)")
    hf.add_argument("--lora-targets", help="LoRA target modules, comma-separated (q_proj,k_proj,v_proj,o_proj), or "
                    "all-linear (default peft's for the model type)")
    hf.add_argument("--quantize-base", choices=["none", "nf4"], default="none",
                    help="nf4: QLoRA, the frozen base loaded through bitsandbytes (BitsAndBytesConfig load_in_4bit, "
                    "nf4, double quant, compute bf16) from a bf16 checkpoint (--base-dir); ZeRO stages 0-2")
    hf.add_argument("--base-dir", help="nf4: the bf16 checkpoint folder to load, written there first when absent "
                    "(default /tmp/ds_peer_base/<config name>_<seed>)")
    hf.add_argument("--seed", type=int, default=1234, help="the model's random init (every rank the same)")
    hf.add_argument("--planner-flags", help="the `zeroplan plan` flags that planned this row, kept in the JSON")
    hf.add_argument("--plan-json", help="the `zeroplan plan -f json` output of this row: its predicted device used "
                    "and step are kept in the JSON beside the measured ones")
    args = ap.parse_args(argv)
    args.hf_config = read_hf_config(args.model) if args.model != "resnet101" else None
    lora_asked = args.lora_alpha is not None or args.lora_targets is not None or args.quantize_base != "none"
    if args.hf_config is None:
        if args.gradient_checkpointing or args.lora_rank is not None or lora_asked:
            ap.error(f"--gradient-checkpointing, --lora-* and --quantize-base are for a Hugging Face config.json "
                     f"--model; {args.model} is not one")
    else:
        model_type = args.hf_config.get("model_type")
        if model_type not in HF_MODEL_TYPES:
            ap.error(f"{args.model}: model_type {model_type!r}; ds_peer.py trains {', '.join(HF_MODEL_TYPES)}")
        if args.lora_rank is None and lora_asked:
            args.lora_rank = 8  # as the planner: peft's default r when another LoRA flag is given
        if args.lora_rank is not None:
            if args.lora_rank < 1:
                ap.error(f"--lora-rank {args.lora_rank}: at least 1")
            if args.lora_alpha is None:
                args.lora_alpha = 8.0  # peft's LoraConfig default
        if args.quantize_base == "nf4":
            if model_type not in ("llama", "mistral", "qwen2"):
                ap.error(f"--quantize-base nf4: the base checkpoint is written by bench/lora/peft_peer.py save-base, "
                         f"which builds llama, mistral and qwen2, not {model_type}")
            with open(args.ds_config) as f:
                ds = json.load(f)
            stage = ds.get("zero_optimization", {}).get("stage", 0)
            if stage == 3:
                ap.error("--quantize-base nf4 at ZeRO stage 3: not run here. Stage 3 builds the model under "
                         "deepspeed.zero.Init and partitions every parameter, and bitsandbytes' 4-bit Params4bit "
                         "(uint8 codes with their quant_state) cannot be partitioned that way (transformers' own "
                         "route needs bnb_4bit_quant_storage and a different load); use stages 0-2")
            if not ds.get("bf16", {}).get("enabled", False):
                ap.error("--quantize-base nf4: the DeepSpeed config must enable bf16 (the compute dtype)")
            if not args.base_dir:
                name = os.path.splitext(os.path.basename(args.model))[0]
                args.base_dir = os.path.join("/tmp", "ds_peer_base", f"{name}_{args.seed}")
    if args.settled < 1:
        ap.error(f"--settled {args.settled}: the number of updating steps in a row that ends the warm-up, at least 1")
    if args.max_warmup < args.warmup:
        ap.error(f"--max-warmup {args.max_warmup}: below --warmup {args.warmup}; give at least as many")
    if args.memory_trace_from_start and not args.memory_trace:
        ap.error("--memory-trace-from-start needs --memory-trace FILE (where the trace goes)")
    return args


def repo_relative(path):
    """A path inside the repository as the planner's tests name it (from the repository's root), else as given."""
    root = os.path.abspath(os.path.join(HERE, "..", ".."))
    full = os.path.abspath(path)
    return os.path.relpath(full, root) if full.startswith(root + os.sep) else path


def process_io_bytes():
    """(read_bytes, write_bytes) of /proc/self/io: the storage I/O this process's threads caused (Linux's task I/O
    accounting, Documentation/filesystems/proc.rst), or None where it cannot be read."""
    try:
        fields = dict(line.split(": ") for line in open("/proc/self/io").read().splitlines())
        return int(fields["read_bytes"]), int(fields["write_bytes"])
    except (OSError, KeyError, ValueError):
        return None


def count_param_swaps():
    """Counts the bytes DeepSpeed's parameter swapper moves to and from NVMe (swap_tensor/partitioned_param_swapper.py
    AsyncPartitionedParameterSwapper: swap_in and swap_into_buffer read a partition, _swap_out and the step's
    swap_out_partitioned_params write them; a partition still AVAILABLE in a buffer is not swapped in, so it is not
    counted; each counted at the swapper's aligned size, as its aio moves it), by wrapping those methods before
    deepspeed.initialize. Returns the running totals {"read": bytes, "write": bytes}, or None where the class is
    absent. (Neither /proc/self/io nor /proc/diskstats count anything on the GPU machines.)"""
    try:
        from deepspeed.runtime.swap_tensor import partitioned_param_swapper as swapper_module
    except ImportError:
        return None
    totals = {"read": 0, "write": 0}
    cls = swapper_module.AsyncPartitionedParameterSwapper

    def partitions(self, params):
        return sum(self._io_aligned_numel(p.ds_tensor.ds_numel) for p in params) * self.swap_element_size

    def updated(self, dst_fp16_params, src_fp32_params):  # the step's 16-bit partitions, through the swap pool
        return sum(self._io_aligned_numel(t.numel()) for t in src_fp32_params) * self.swap_element_size

    def wrap(name, kind, bytes_of):
        original = getattr(cls, name, None)
        if original is None:
            return

        def counted(self, *args, **kwargs):
            totals[kind] += bytes_of(self, *args[:2])
            return original(self, *args, **kwargs)
        setattr(cls, name, counted)
    wrap("swap_in", "read", lambda self, params, *rest: partitions(self, params))
    wrap("swap_into_buffer", "read", lambda self, param, *rest: partitions(self, [param]))
    wrap("_swap_out", "write", lambda self, params, *rest: partitions(self, params))
    wrap("swap_out_partitioned_params", "write", updated)
    return totals


def main():
    args = parse_args()

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

    model, shape = build_model(args, config, dtype, rank, world, local_rank)
    trace_start = None
    if args.memory_trace and args.memory_trace_from_start and rank == 0:
        trace_start = {"allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved()}
        torch.cuda.memory._record_memory_history(max_entries=2000000)
    # A Hugging Face model's trainable parameters only (all of them but with LoRA), as transformers' Trainer hands
    # DeepSpeed; the other models' every parameter, as before.
    hf_run = shape is not None and shape.get("hf", False)
    param_swaps = count_param_swaps()
    engine, _, _, _ = deepspeed.initialize(
        model=model, model_parameters=[p for p in model.parameters() if p.requires_grad or not hf_run], config=config)
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
    io_before = process_io_bytes()
    swaps_before = dict(param_swaps) if param_swaps is not None else None
    for _ in range(args.steps):
        times.append(train_step())
        # After the step's time is taken, before the next one starts: the host's speed during the run. Every
        # rank reads it (rank 0's is kept), so that no rank's next step waits in a collective for another's.
        probes_between.append(eager_op_seconds_now(device))

    io_after = process_io_bytes()
    swaps_after = dict(param_swaps) if param_swaps is not None else None
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
            # rank 0's storage bytes per measured step (/proc/self/io read_bytes / write_bytes: what its threads,
            # DeepSpeed's aio ones included, made the block layer move; None where unreadable)
            "disk_read_bytes_per_step": (io_after[0] - io_before[0]) / args.steps if io_before and io_after else None,
            "disk_write_bytes_per_step": (io_after[1] - io_before[1]) / args.steps if io_before and io_after else None,
            # rank 0's parameter swapper over the same steps (count_param_swaps): partition bytes read from and
            # written to NVMe per step (None: no parameter swapper class)
            "param_swap_read_bytes_per_step":
                (swaps_after["read"] - swaps_before["read"]) / args.steps if swaps_before is not None else None,
            "param_swap_write_bytes_per_step":
                (swaps_after["write"] - swaps_before["write"]) / args.steps if swaps_before is not None else None,
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
            # (and a Hugging Face config.json's under zero.Init through HfDeepSpeedConfig)
            "zero_init": shape is not None and config.get("zero_optimization", {}).get("stage", 0) == 3,
            # whether the caching allocator was emptied after deepspeed.initialize (--empty-cache-after-init); rows
            # measured before 2026-11-28 always were
            "empty_cache_after_init": args.empty_cache_after_init,
            "measured": measured,
            "losses": losses,
        }
        if shape is not None:
            run["seq"] = args.seq
        if hf_run:
            zero = config.get("zero_optimization", {})
            run["model"] = repo_relative(args.planner_model or args.model)
            run["micro_batch"] = micro
            run["stage"] = zero.get("stage", 0)
            run["offload_optimizer"] = zero.get("offload_optimizer", {}).get("device", "none")
            run["offload_param"] = zero.get("offload_param", {}).get("device", "none")
            # transformers' gradient checkpointing recomputes every decoder layer: the planner's --checkpointing full
            run["gradient_checkpointing"] = args.gradient_checkpointing
            run["checkpointing"] = "full" if args.gradient_checkpointing else "none"
            run["lora"] = shape["lora"]  # null without LoRA; trainable_params as peft counts them
            run["hf"] = {key: shape[key] for key in ("model_type", "class", "build", "parameters",
                                                     "tie_word_embeddings")}
            run["hf"]["attn_implementation"] = "sdpa"
            run["hf"]["loss"] = "the model's own (labels=input_ids), random token ids"
            run["hf"]["model_parameters"] = "the trainable ones (requires_grad), as transformers' Trainer passes them"
            versions = {}
            for package in ("transformers", "peft", "bitsandbytes"):
                module = sys.modules.get(package)
                if module is not None:
                    versions[package] = getattr(module, "__version__", "?")
            run["hf"]["versions"] = versions
            if args.planner_flags:
                run["planner_flags"] = args.planner_flags
            if args.plan_json:
                try:
                    with open(args.plan_json) as f:
                        plan = json.load(f)["plans"][0]
                    run["planned"] = {
                        "plan_json": os.path.basename(args.plan_json), "label": plan.get("label"),
                        "device_used_gib": max(plan.get("timeline_peak_gpu_bytes") or plan["gpu_bytes"]["total"],
                                               plan.get("init_peak_gpu_bytes") or 0) / gib,
                        "step_seconds": plan.get("step_seconds")}
                except (OSError, ValueError, KeyError, IndexError) as e:
                    run["planned"] = {"plan_json": args.plan_json, "unreadable": f"{type(e).__name__}: {e}"}
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
