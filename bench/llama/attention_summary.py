#!/usr/bin/env python3
"""The attention table of one device call: the executor's kernels and its cuDNN graph (bench/attention_benchmark.cu)
beside PyTorch's cuDNN fused attention and FlashAttention-2 (bench/llama/attention_peer.py) per shape, forward, backward and both, and which is
faster (the ratio is the peer's time over ours: above 1, ours is faster).

  python3 bench/llama/attention_summary.py OURS.jsonl PEER.jsonl
"""
import json
import sys


def rows(path):
    try:
        return [json.loads(line) for line in open(path) if line.strip().startswith("{")]
    except (OSError, ValueError) as e:
        sys.exit("attention_summary.py: %s: %s" % (path, e))


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[-1].strip())
    ours = {r["shape"]: r for r in rows(sys.argv[1])}
    peers = rows(sys.argv[2])
    if not ours:
        sys.exit("attention_summary.py: %s: no rows of attention_benchmark" % sys.argv[1])
    impls = sorted({p["impl"] for p in peers})
    print("attention, bf16, causal (ms: median; ratio = peer / ours, > 1: ours faster; TFLOP/s as FlashAttention-2 "
          "counts them)")
    head = "  %-11s %-18s %8s %8s %8s %7s %7s" % ("shape", "B,T,H/KV,D", "fwd ms", "bwd ms", "sum ms", "fwd TF", "bwd TF")
    print(head)
    for shape, o in ours.items():
        dims = "%d,%d,%d/%d,%d" % (o["batch"], o["seq"], o["heads"], o["kv_heads"], o["head_size"])
        tot = o["forward_seconds"] + o["backward_seconds"]
        print("  %-11s %-18s %8.3f %8.3f %8.3f %7.0f %7.0f  zeroplan (its own kernels)" % (
            shape, dims, o["forward_seconds"] * 1e3, o["backward_seconds"] * 1e3, tot * 1e3, o["forward_tflops"],
            o["backward_tflops"]))
        # The executor's cuDNN path (exec/cuda/cudnn_attention.cu), timed by the same benchmark: what the trainer runs
        # where cuDNN plans the shape.
        if "cudnn_forward_seconds" in o:
            cf, cb = o["cudnn_forward_seconds"], o["cudnn_backward_seconds"]
            print("  %-11s %-18s %8.3f %8.3f %8.3f %7.0f %7.0f  zeroplan (cuDNN graph): ratio fwd %.2f bwd %.2f both %.2f"
                  % ("", "", cf * 1e3, cb * 1e3, (cf + cb) * 1e3, o["forward_tflops"] * o["forward_seconds"] / cf,
                     o["backward_tflops"] * o["backward_seconds"] / cb, cf / o["forward_seconds"],
                     cb / o["backward_seconds"], (cf + cb) / tot))
        elif "cudnn_refused" in o or "cudnn_error" in o:
            print("  %-11s %-18s zeroplan (cuDNN graph): %s" % ("", "", o.get("cudnn_refused") or o.get("cudnn_error")))
        for impl in impls:
            p = next((p for p in peers if p["shape"] == shape and p["impl"] == impl), None)
            if p is None:
                continue
            if "error" in p:
                print("  %-11s %-18s %s: %s" % ("", "", impl, p["error"]))
                continue
            ptot = p["forward_seconds"] + p["backward_seconds"]
            print("  %-11s %-18s %8.3f %8.3f %8.3f %7.0f %7.0f  %s: ratio fwd %.2f bwd %.2f both %.2f%s" % (
                "", "", p["forward_seconds"] * 1e3, p["backward_seconds"] * 1e3, ptot * 1e3, p["forward_tflops"],
                p["backward_tflops"], impl, p["forward_seconds"] / o["forward_seconds"],
                p["backward_seconds"] / o["backward_seconds"], ptot / tot,
                " (%s)" % p["note"] if p.get("note") else ""))


if __name__ == "__main__":
    main()
