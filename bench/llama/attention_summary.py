#!/usr/bin/env python3
"""The attention table of one device call: the executor's kernels (bench/attention_benchmark.cu) beside cuDNN's fused
attention and FlashAttention-2 (bench/llama/attention_peer.py) per shape, forward, backward and both, and which is
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
        print("  %-11s %-18s %8.3f %8.3f %8.3f %7.0f %7.0f  zeroplan" % (
            shape, dims, o["forward_seconds"] * 1e3, o["backward_seconds"] * 1e3, tot * 1e3, o["forward_tflops"],
            o["backward_tflops"]))
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
