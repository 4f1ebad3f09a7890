#!/usr/bin/env python3
"""Replays a caching-allocator trace written by ds_peer.py --memory-trace and prints the allocator's state at the
allocated peak: the reserve (free bytes in reserved segments) by segment, and the live blocks of 64 MiB and more
with the Python frames that asked for them (none: allocated from C++, e.g. autograd's backward thread or cuDNN).

  python3 bench/deepspeed/memtrace_replay.py NAME.memtrace.json

The blocks live before the traced steps are found from the end state: live at the end and untouched by the trace,
or freed by it without being allocated in it."""
import json
import sys

MIB, GIB = 2.0**20, 2.0**30


def main(path):
    try:
        with open(path) as f:
            d = json.load(f)
        for key in ("segments", "events", "before", "max_allocated"):
            if key not in d:
                raise ValueError(f"no '{key}' field: not a trace from ds_peer.py --memory-trace")
    except (OSError, ValueError) as e:
        print(f"memtrace_replay.py: {path}: {e}", file=sys.stderr)
        sys.exit(2)
    segments = sorted(d["segments"], key=lambda s: s["address"])
    events = d["events"]
    end_live = {}
    for s in segments:
        address = s["address"]
        for size, state in s["blocks"]:
            if state == "active_allocated":
                end_live[address] = size
            address += size
    allocated_in_trace, live = set(), {}
    for e in events:
        if e["action"] == "alloc":
            allocated_in_trace.add(e["addr"])
        elif e["action"] == "free_requested":
            if e["addr"] not in allocated_in_trace:
                live[e["addr"]] = e["size"]
            allocated_in_trace.discard(e["addr"])
    touched = {e["addr"] for e in events if e["action"] in ("alloc", "free_requested")}
    live.update({a: size for a, size in end_live.items() if a not in touched})
    current = sum(live.values())
    print(f"{path}: {len(segments)} segments, reserved {sum(s['total_size'] for s in segments) / GIB:.3f} GiB; "
          f"live before the trace {current / GIB:.3f} GiB (torch: {d['before']['allocated'] / GIB:.3f})")
    peak, peak_index, peak_live, frames, peak_frames = current, -1, dict(live), {}, {}
    for i, e in enumerate(events):
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
            frames[e["addr"]] = e.get("frames", [])
            current += e["size"]
            if current > peak:
                peak, peak_index, peak_live, peak_frames = current, i, dict(live), dict(frames)
        elif e["action"] == "free_requested":
            current -= live.pop(e["addr"], 0)
    print(f"allocated peak {peak / GIB:.3f} GiB (torch max_memory_allocated {d['max_allocated'] / GIB:.3f}) at event "
          f"{peak_index} of {len(events)}")
    free = []
    for s in segments:
        used = sum(size for a, size in peak_live.items() if s["address"] <= a < s["address"] + s["total_size"])
        free.append((s["total_size"] - used, s["total_size"], used))
    free.sort(reverse=True)
    print(f"reserve at the peak: {sum(f for f, _, _ in free) / GIB:.3f} GiB")
    for f, total, used in free[:8]:
        if f >= MIB:
            print(f"  segment {total / MIB:8.1f} MiB: {f / MIB:8.1f} free, {used / MIB:8.1f} in use")
    big = sorted(((size, a) for a, size in peak_live.items() if size >= 64 * MIB), reverse=True)
    print(f"live blocks of 64 MiB and more: {len(big)}, {sum(s for s, _ in big) / GIB:.3f} GiB")
    for size, a in big[:10]:
        who = peak_frames.get(a)
        print(f"  {size / MIB:8.1f} MiB  {'; '.join(who[:2]) if who else '(before the trace)' if who is None else '(C++)'}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: memtrace_replay.py NAME.memtrace.json", file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1])
