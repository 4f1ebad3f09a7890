#!/usr/bin/env python3
"""Follows the caching allocator's segments over a trace recorded from before deepspeed.initialize (ds_peer.py
--memory-trace FILE --memory-trace-from-start) and says what each segment was made for and what fills it:

  python3 bench/deepspeed/memtrace_segments.py NAME.memtrace.json [STEPS]

Every segment is named by the request that made it (its cudaMalloc: the trace's segment_alloc), every block by its
request: the Python frame that asked for it (the trace keeps frames for requests of 16 MiB and more; a smaller one
is named after the last named request before it, marked '~'). Printed: what the segments hold when
deepspeed.initialize returns (before the first forward), then at the allocated peak of the first STEPS steps (default
2; a step starts at the model's embedding lookup) and of the last: the reserve (free bytes of the segments) by what
made the segment, and the live blocks in them by kind. No segment is released (the runs keep the cache)."""
import bisect
import collections
import json
import sys

MIB, GIB = 2.0**20, 2.0**30

# A request's kind, by the frames that name it (DeepSpeed 0.19.8, torch 2.11, ds_peer.py / pytorch_peer.py,
# transformers); the first match wins.
KINDS = [
    ("module.py:1370 convert", "params (module.to)"),
    ("unfused_optimizer.py:78 __init__", "fp32 masters (clone().float())"),
    ("unfused_optimizer.py:415 initialize_optimizer_states", "init: 16-bit zero grads"),
    ("unfused_optimizer.py:421 initialize_optimizer_states", "init: fp32 zero grads"),
    ("adam.py:178 _init_group", "Adam exp_avg"),
    ("adam.py:182 _init_group", "Adam exp_avg_sq"),
    ("_multi_tensor_adam", "foreach temporaries"),
    ("allreduce_bucket", "allreduce flat copy"),
    ("get_weight_norm", "grad norm (.float())"),
    ("unfused_optimizer.py:222 step", "step: fp32 grads (.to)"),
    ("unfused_optimizer.py:220 step", "step: fp32 zero grads"),
    ("cross_entropy", "loss"),
    ("pytorch_peer.py:55", "loss"),
    ("pytorch_peer.py:56", "loss"),
    ("loss_utils.py", "loss"),
    ("lm_head", "loss"),
]


def kind_of(frames):
    if frames is None:
        return None
    if not frames:
        return "C++ (autograd)"
    joined = "; ".join(frames)
    for needle, kind in KINDS:
        if needle in joined:
            return kind
    return "forward (activations)"


class Replay:
    def __init__(self, d):
        self.d = d
        self.events = d["events"]
        self.segs = []  # sorted (start, size, kind)
        self.live = {}  # addr -> (size, kind)
        self.last_kind = "before the trace"
        seen, freed_first = set(), set()
        for e in self.events:
            if e["action"] == "alloc":
                seen.add(e["addr"])
            elif e["action"] == "free_requested" and e["addr"] not in seen:
                freed_first.add(e["addr"])
        touched = seen | freed_first
        made = {e["addr"] for e in self.events if e["action"] == "segment_alloc"}
        for s in d["segments"]:  # what was there before the trace: its blocks from the end state
            if s["address"] not in made:
                self.segs.append((s["address"], s["total_size"], "before the trace"))
            a = s["address"]
            for size, state in s["blocks"]:
                if a in freed_first or (state == "active_allocated" and a not in touched):
                    self.live[a] = (size, "before the trace")
                a += size
        self.segs.sort()
        self.starts = [s[0] for s in self.segs]
        self.current = sum(size for size, _ in self.live.values())

    def apply(self, e):
        action = e["action"]
        if action in ("segment_alloc", "alloc"):
            kind = kind_of(e.get("frames"))
            if kind is None:
                kind = "~" + self.last_kind.lstrip("~")
            elif action == "alloc":
                self.last_kind = kind
            if action == "segment_alloc":
                i = bisect.bisect_right(self.starts, e["addr"])
                self.starts.insert(i, e["addr"])
                self.segs.insert(i, (e["addr"], e["size"], kind))
            else:
                self.live[e["addr"]] = (e["size"], kind)
                self.current += e["size"]
        elif action == "free_requested":
            self.current -= self.live.pop(e["addr"], (0, None))[0]

    def show(self, title):
        used, inside = collections.Counter(), collections.Counter()
        for a, (size, kind) in self.live.items():
            i = bisect.bisect_right(self.starts, a) - 1
            if i < 0 or a >= self.segs[i][0] + self.segs[i][1]:
                continue
            used[i] += size
            inside[(self.segs[i][2], kind)] += size
        reserved, free, count = collections.Counter(), collections.Counter(), collections.Counter()
        for i, (a, size, kind) in enumerate(self.segs):
            reserved[kind] += size
            free[kind] += size - used[i]
            count[kind] += 1
        print(f"{title}: allocated {self.current / GIB:.3f} GiB, reserved {sum(reserved.values()) / GIB:.3f} GiB, "
              f"free in the segments {sum(free.values()) / GIB:.3f} GiB")
        print(f"  {'segments made for':32s} {'count':>5s} {'reserved':>9s} {'free':>9s}  live blocks in them, MiB")
        for kind in sorted(reserved, key=lambda k: -reserved[k]):
            if reserved[kind] < 8 * MIB:
                continue
            parts = sorted(((b, k) for (s, k), b in inside.items() if s == kind and b >= 4 * MIB), reverse=True)
            text = ", ".join(f"{k} {b / MIB:.0f}" for b, k in parts[:6])
            print(f"  {kind:32s} {count[kind]:5d} {reserved[kind] / MIB:9.0f} {free[kind] / MIB:9.0f}  {text}")


def forwards_of(events):
    """The event index where each forward starts: the model's (first) embedding lookup."""
    forwards = []
    for i, e in enumerate(events):
        if e["action"] == "alloc" and e.get("frames") and any(
                "embedding" in f or "embed_tokens" in f for f in e["frames"][:2]):
            if not forwards or i - forwards[-1] > 50:
                forwards.append(i)
    return forwards


def main(path, steps):
    with open(path) as f:
        d = json.load(f)
    if d.get("steps", 1) != 0:
        print(f"{path}: not recorded from before deepspeed.initialize (--memory-trace-from-start): what the "
              "segments were made for is partly unknown", file=sys.stderr)
    events = d["events"]
    forwards = forwards_of(events)
    bounds = forwards + [len(events)]
    # Each step's allocated peak (the first event at which the step's largest allocated total is reached).
    r = Replay(d)
    step_peak = {}
    k = -1
    best = -1
    for i, e in enumerate(events):
        while k + 1 < len(bounds) and i >= bounds[k + 1]:
            k += 1
            best = -1
        r.apply(e)
        if k >= 0 and e["action"] == "alloc" and r.current > best:
            best = r.current
            step_peak[k] = i
    wanted = set(range(min(steps, len(forwards)))) | {len(forwards) - 1}
    marks = {forwards[0] - 1: "deepspeed.initialize returned (before the first forward)"} if forwards else {}
    for k in sorted(wanted):
        marks[step_peak[k]] = f"step {k + 1} of {len(forwards)}, at its allocated peak"
    r = Replay(d)
    print(f"{path}: {len(d['segments'])} segments at the end, {len(forwards)} steps; torch max_memory_allocated "
          f"{d['max_allocated'] / GIB:.3f} GiB (after initialize), max_memory_reserved {d['max_reserved'] / GIB:.3f}")
    for i, e in enumerate(events):
        r.apply(e)
        if i in marks:
            print()
            r.show(marks[i])


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        print("usage: memtrace_segments.py NAME.memtrace.json [STEPS]", file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) == 3 else 2)
