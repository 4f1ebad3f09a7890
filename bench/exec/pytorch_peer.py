#!/usr/bin/env python3
"""The PyTorch peer for `zeroplan run` (eager, or torch.compile with --compile): the same GPT-2 (learned positions, LayerNorm, tanh-GELU, biases, tied
embeddings, vocab 50304, no dropout) trained eagerly with bf16 autocast over fp32 parameters, fused AdamW and
scaled_dot_product_attention (flash), as in ../shared/reference/device-and-peers.md. Prints one JSON line with
step times, tokens/s and the peak allocated memory, so the device script can put the ratio beside ours."""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, h, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(h)
        self.c_attn = nn.Linear(h, 3 * h)
        self.c_proj = nn.Linear(h, h)
        self.ln_2 = nn.LayerNorm(h)
        self.c_fc = nn.Linear(h, 4 * h)
        self.mlp_proj = nn.Linear(4 * h, h)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, h, layers, heads, max_seq):
        super().__init__()
        self.wte = nn.Embedding(vocab, h)
        self.wpe = nn.Embedding(max_seq, h)
        self.h = nn.ModuleList(Block(h, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(h)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("c_proj.weight", "mlp_proj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.h:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=1600)
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--heads", type=int, default=25)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (the strongest one-GPU peer)")
    a = ap.parse_args()
    torch.manual_seed(0)
    dev = "cuda"
    model = GPT(a.vocab, a.hidden, a.layers, a.heads, a.seq).to(dev)
    n = sum(p.numel() for p in model.parameters())
    step_model = torch.compile(model) if a.compile else model
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    x = torch.randint(0, a.vocab, (a.micro_batch, a.seq + 1), device=dev)
    inp, tgt = x[:, :-1].contiguous(), x[:, 1:].contiguous()
    torch.cuda.reset_peak_memory_stats()
    times, losses = [], []
    for s in range(a.steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_model(inp, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        end.record()
        torch.cuda.synchronize()
        losses.append(loss.item())
        if s >= a.warmup:
            times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    med = times[len(times) // 2]
    tokens = a.micro_batch * a.seq
    flops = 6 * n + 12 * a.layers * a.hidden * a.seq
    print(json.dumps({"peer": ("torch.compile" if a.compile else "pytorch eager") + " bf16 autocast, fused AdamW, SDPA", "torch": torch.__version__,
                      "device": torch.cuda.get_device_name(), "params": n, "step_seconds_median": med,
                      "tokens_per_second": tokens / med, "tflops": tokens / med * flops / 1e12,
                      "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30,
                      "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30, "losses": losses}))


if __name__ == "__main__":
    main()
