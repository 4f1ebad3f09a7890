#!/usr/bin/env python3
"""Measures, on one GPU, the achievable rates the step-time simulator's compute model uses (sim/compute_time.h),
so that the cluster description carries hardware facts instead of guesses:

- bf16 GEMM rate at the shapes of GPT-2 training (forward, input-gradient and weight-gradient GEMMs of every
  linear layer of GPT-2 124M and 1.5B at 8192 / 16384 tokens) and at square sizes: gives gemm_efficiency points.
- flash attention (scaled_dot_product_attention, causal, bf16, head dim 64) forward and backward, in TFLOP/s
  counted on the work a causal kernel does (half the s^2 products) and on the PaLM count (all of them).
- HBM: device-to-device copy (read + write bytes / time), and the memory-bound operations of a GPT-2 step
  (LayerNorm, tanh-GELU, residual add, fp32 cross-entropy forward + backward, embedding backward) as achieved
  bytes/s, plus fused AdamW and clip_grad_norm_ on 1.5B fp32 parameters.
- the per-kernel floor: a long queue of tiny kernels, time per kernel.
- the PyTorch peer's own step (bench/exec/pytorch_peer.py's model) under torch.profiler: GPU time by kernel
  category, so every term of the model can be checked against what the peer really spends.
Prints one JSON document. Run: python3 bench/sim/measure_compute_rates.py > rates.json
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "exec"))
from pytorch_peer import GPT  # noqa: E402  (the peer's model, unchanged)

dev = "cuda"
torch.backends.cuda.matmul.allow_tf32 = True


def timed(fn, iters=20, warmup=5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def gemm_rate(m, n, k):
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
    seconds = timed(lambda: a @ b)
    return {"m": m, "n": n, "k": k, "flops": 2.0 * m * n * k, "seconds": seconds,
            "tflops": 2.0 * m * n * k / seconds / 1e12}


def linear_gemms(tokens, h, ffn, vocab):
    # (out, in) of every linear layer; forward y = x W^T: (tokens x in) @ (in x out); input gradient
    # (tokens x out) @ (out x in); weight gradient (out x tokens) @ (tokens x in).
    rows = []
    for name, out_f, in_f in (("qkv", 3 * h, h), ("attn_proj", h, h), ("fc", ffn, h), ("fc_proj", h, ffn),
                              ("lm_head", vocab, h)):
        for kind, (m, n, k) in (("forward", (tokens, out_f, in_f)), ("dgrad", (tokens, in_f, out_f)),
                                ("wgrad", (out_f, in_f, tokens))):
            r = gemm_rate(m, n, k)
            r.update({"layer": name, "pass": kind, "tokens": tokens, "hidden": h})
            rows.append(r)
    return rows


def attention(b, heads, s, d):
    q, k, v = (torch.randn(b, heads, s, d, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    fwd = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    grad = torch.randn_like(out)

    def fwd_bwd():
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        o.backward(grad)
    both = timed(fwd_bwd)
    bwd = both - fwd
    palm_fwd = 4.0 * b * heads * s * s * d  # QK^T and PV, every s^2 product (PaLM counts them all)
    causal_fwd = palm_fwd / 2.0             # what a causal kernel computes
    # Backward: recompute QK^T, then dV, dP, dQ, dK: 5 matmuls against forward's 2 = 2.5x.
    return {"b": b, "heads": heads, "s": s, "d": d, "forward_seconds": fwd, "backward_seconds": bwd,
            "forward_tflops_causal_work": causal_fwd / fwd / 1e12,
            "backward_tflops_causal_work": 2.5 * causal_fwd / bwd / 1e12,
            "forward_tflops_palm": palm_fwd / fwd / 1e12, "backward_tflops_palm": 2.0 * palm_fwd / bwd / 1e12}


def memory_ops():
    out = {}
    n = 1 << 28  # 1 GiB of fp32
    x = torch.empty(n, device=dev, dtype=torch.float32)
    y = torch.empty_like(x)
    s = timed(lambda: y.copy_(x))
    out["copy_bytes_per_second"] = 2 * 4 * n / s
    del x, y
    tokens, h, ffn, vocab = 8192, 1600, 6400, 50304
    for dtype, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        a = torch.randn(tokens, h, device=dev, dtype=dtype)
        ln = torch.nn.LayerNorm(h, device=dev, dtype=dtype)
        s = timed(lambda: ln(a))
        e = a.element_size()
        out[f"layernorm_forward_{name}_bytes_per_second"] = 2 * tokens * h * e / s
        out[f"layernorm_forward_{name}_seconds"] = s
        c = torch.randn_like(a)
        s = timed(lambda: a + c)
        out[f"add_{name}_bytes_per_second"] = 3 * tokens * h * e / s
    g = torch.randn(tokens, ffn, device=dev, dtype=torch.bfloat16)
    s = timed(lambda: F.gelu(g, approximate="tanh"))
    out["gelu_forward_bf16_bytes_per_second"] = 2 * tokens * ffn * 2 / s
    out["gelu_forward_bf16_seconds"] = s
    logits = torch.randn(tokens, vocab, device=dev, dtype=torch.bfloat16, requires_grad=True)
    target = torch.randint(0, vocab, (tokens,), device=dev)

    def ce():
        loss = F.cross_entropy(logits.float(), target)
        loss.backward()
    s = timed(ce, iters=10)
    out["cross_entropy_fp32_forward_backward_seconds"] = s
    out["cross_entropy_logits_bytes_bf16"] = tokens * vocab * 2
    del logits
    # Embedding backward (index_add / embedding_dense_backward) of the token table.
    table = torch.nn.Embedding(vocab, h, device=dev)
    idx = torch.randint(0, vocab, (8, 1024), device=dev)
    gout = torch.randn(8, 1024, h, device=dev)

    def emb():
        table.weight.grad = None
        table(idx).backward(gout)
    out["embedding_forward_backward_seconds"] = timed(emb, iters=10)
    # Fused AdamW and clip_grad_norm_ over 1.5B fp32 parameters in 48 x 4 large tensors + small ones.
    params = [torch.zeros(1600 * 4800, device=dev, requires_grad=True) for _ in range(192)]
    numel = sum(p.numel() for p in params)
    for p in params:
        p.grad = torch.zeros_like(p)
    opt = torch.optim.AdamW(params, lr=1e-4, fused=True)
    s = timed(opt.step, iters=10)
    out["adamw_fused_fp32_params"] = numel
    out["adamw_fused_seconds"] = s
    out["adamw_fused_bytes_per_second"] = 28 * numel / s  # read p, g, m, v; write p, m, v (fp32)
    s = timed(lambda: torch.nn.utils.clip_grad_norm_(params, 1.0), iters=10)
    out["clip_grad_norm_seconds"] = s
    out["clip_grad_norm_bytes_per_second"] = 12 * numel / s  # read for the norm, read + write to scale
    del params, opt
    # Per-kernel floor: 2000 tiny kernels queued back to back.
    t = torch.zeros(256, device=dev)
    def tiny():
        for _ in range(2000):
            t.add_(1.0)
    out["tiny_kernel_seconds"] = timed(tiny, iters=3, warmup=1) / 2000
    return out


def profile_peer(vocab, h, layers, heads, micro_batch, seq):
    model = GPT(vocab, h, layers, heads, seq).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    x = torch.randint(0, vocab, (micro_batch, seq + 1), device=dev)
    inp, tgt = x[:, :-1].contiguous(), x[:, 1:].contiguous()

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(inp, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    step_seconds = timed(step, iters=10, warmup=4)
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            step()
        torch.cuda.synchronize()
    categories = {}
    kernels = 0
    for ev in prof.events():
        if ev.device_type != torch.autograd.DeviceType.CUDA:
            continue
        name = ev.name.lower()
        if "flash" in name or "fmha" in name or "attention" in name:
            cat = "attention_backward" if "bwd" in name or "backward" in name else "attention_forward"
        elif any(k in name for k in ("gemm", "cutlass", "xmma", "nvjet", "sm90", "cublas")):
            cat = "gemm"
        elif "layer_norm" in name or "layernorm" in name:
            cat = "layernorm"
        elif "gelu" in name:
            cat = "gelu"
        elif "softmax" in name or "nll" in name or "cross_entropy" in name:
            cat = "cross_entropy"
        elif "adam" in name:
            cat = "optimizer"
        elif "embedding" in name or "index" in name or "sort" in name or "radix" in name:
            cat = "embedding"
        elif "norm" in name or "reduce" in name:
            cat = "reduction"
        elif "memcpy" in name or "memset" in name:
            cat = "memcpy"
        else:
            cat = "elementwise_other"
        c = categories.setdefault(cat, {"seconds": 0.0, "kernels": 0, "names": {}})
        c["seconds"] += ev.device_time_total / 1e6 / 3 if hasattr(ev, "device_time_total") else ev.cuda_time_total / 1e6 / 3
        c["kernels"] += 1
        short = ev.name[:80]
        c["names"][short] = c["names"].get(short, 0.0) + (ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total) / 1e3 / 3
        kernels += 1
    for c in categories.values():
        c["kernels"] //= 3
        c["names"] = dict(sorted(c["names"].items(), key=lambda kv: -kv[1])[:6])
    n = sum(p.numel() for p in model.parameters())
    del model, opt
    torch.cuda.empty_cache()
    return {"vocab": vocab, "hidden": h, "layers": layers, "heads": heads, "micro_batch": micro_batch, "seq": seq,
            "params": n, "step_seconds": step_seconds, "kernels_per_step": kernels // 3,
            "gpu_seconds_by_category": categories}


def main():
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    result["memory"] = memory_ops()
    result["attention"] = [attention(8, 25, 1024, 64), attention(16, 12, 1024, 64)]
    result["gemm_square"] = [gemm_rate(n, n, n) for n in (512, 1024, 2048, 4096, 8192)]
    result["gemm_gpt2_1_5b"] = linear_gemms(8192, 1600, 6400, 50304)
    result["gemm_gpt2_124m"] = linear_gemms(16384, 768, 3072, 50304)
    result["peer_1_5b"] = profile_peer(50304, 1600, 48, 25, 8, 1024)
    result["peer_124m"] = profile_peer(50304, 768, 12, 12, 16, 1024)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
