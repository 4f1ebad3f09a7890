#!/usr/bin/env python3
"""cuDNN's fused attention and FlashAttention-2, as PyTorch's scaled_dot_product_attention runs them, timed forward and
backward at the shapes bench/attention_benchmark.cu times the executor's kernels at (issue 35: "measure it against
our kernels, at GPT-2's and Llama's shapes, keep the faster per shape").

  python3 bench/llama/attention_peer.py --shapes JSON_LINES_OF_OURS [--iters 20] [--json OUT]

The shapes are read from attention_benchmark's output (one JSON object per line), so both sides time exactly the
same problems. Inputs are contiguous (B, heads, T, head_size) bf16 tensors, the layout both backends take without a
copy (their best case; the executor reads q, k and v in place from its fused qkv rows). Causal mask, the default
scale 1/sqrt(head_size). GQA: enable_gqa=True where the backend takes it; where it refuses, K and V are expanded to
the query heads beforehand (transformers' repeat_kv) outside the timed region, and the row says so.
The backward is timed as autograd's backward of the output with a given dO (retain_graph, the forward done once),
so it includes only the backend's backward kernels and autograd's dispatch. Median of --iters CUDA-event timings.
"""
import argparse
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}


def median_seconds(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e-3)
    times.sort()
    return times[len(times) // 2]


def time_backend(name, shape, warmup, iters):
    B, T, H, KV, D = shape["batch"], shape["seq"], shape["heads"], shape["kv_heads"], shape["head_size"]
    g = torch.Generator(device="cuda").manual_seed(1234)
    q = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, generator=g, requires_grad=True)
    k = torch.randn(B, KV, T, D, device="cuda", dtype=torch.bfloat16, generator=g, requires_grad=True)
    v = torch.randn(B, KV, T, D, device="cuda", dtype=torch.bfloat16, generator=g, requires_grad=True)
    dout = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, generator=g)
    note = ""
    with sdpa_kernel([BACKENDS[name]]):
        kk, vv, gqa = k, v, KV != H
        try:
            out = F.scaled_dot_product_attention(q, kk, vv, is_causal=True, enable_gqa=gqa)
        except RuntimeError as e:
            if not gqa:
                raise
            kk = k.detach().repeat_interleave(H // KV, dim=1).requires_grad_()
            vv = v.detach().repeat_interleave(H // KV, dim=1).requires_grad_()
            gqa = False
            note = "enable_gqa refused (%s): K/V expanded to %d heads before timing" % (str(e).splitlines()[0][:80], H)
            out = F.scaled_dot_product_attention(q, kk, vv, is_causal=True)

        def forward():
            with torch.no_grad():
                F.scaled_dot_product_attention(q, kk, vv, is_causal=True, enable_gqa=gqa)

        def backward():
            torch.autograd.grad(out, (q, kk, vv), dout, retain_graph=True)

        fwd = median_seconds(forward, warmup, iters)
        bwd = median_seconds(backward, warmup, iters)
    forward_flops = 4.0 * B * H * T * T * D / 2.0
    row = dict(shape, impl="torch-sdpa-" + name, torch=torch.__version__, forward_seconds=fwd, backward_seconds=bwd,
               forward_tflops=forward_flops / fwd * 1e-12, backward_tflops=2.5 * forward_flops / bwd * 1e-12)
    row.pop("tensor_cores", None)
    if name == "cudnn":
        row["cudnn"] = torch.backends.cudnn.version()
    if note:
        row["note"] = note
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", required=True, help="attention_benchmark's JSON lines (the shapes to time)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--backends", default="cudnn,flash")
    ap.add_argument("--json", help="write every row here (JSON lines) besides stdout")
    a = ap.parse_args()
    try:
        shapes = [json.loads(line) for line in open(a.shapes) if line.strip().startswith("{")]
    except (OSError, ValueError) as e:
        sys.exit("attention_peer.py: --shapes %s: %s" % (a.shapes, e))
    if not shapes:
        sys.exit("attention_peer.py: --shapes %s: no JSON lines of attention_benchmark in it" % a.shapes)
    keep = ("shape", "batch", "seq", "heads", "kv_heads", "head_size")
    rows = []
    for s in shapes:
        for b in a.backends.split(","):
            if b not in BACKENDS:
                sys.exit("attention_peer.py: --backends: unknown backend %r (cudnn, flash)" % b)
            try:
                row = time_backend(b, {k: s[k] for k in keep}, a.warmup, a.iters)
            except Exception as e:  # a backend that cannot run the shape is a row that says so
                row = {k: s[k] for k in keep}
                row.update(impl="torch-sdpa-" + b, error="%s: %s" % (type(e).__name__, str(e).splitlines()[0][:200]))
            rows.append(row)
            print(json.dumps(row), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
