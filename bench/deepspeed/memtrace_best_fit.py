#!/usr/bin/env python3
"""Replays a caching-allocator trace's own requests through torch's best-fit rules, one pool per stream, and prints
what that model reserves at the allocated peak and which free blocks it holds there.

  python3 bench/deepspeed/memtrace_best_fit.py NAME.memtrace.json[.gz] [--without-gathers]

The trace (ds_peer.py --memory-trace FILE --memory-trace-from-start) names no stream, so each request is put in the
pool of the stream that made the segment the trace put it in: the segment's first request with frames names it
(DeepSpeed's coalesced all-gather buffers and per-parameter copies: the all-gather stream; coalesced_collectives.py
reduce_scatter_coalesced's torch.cat: the reduce-scatter stream; anything else: the default stream). The model is the
one sim/deepspeed_allocator_replay.cpp follows (c10/cuda/CUDACachingAllocator.cpp): requests over 1 MiB only (the small
pool is left out), rounded to 512 B; the smallest free block of the stream's pool at least that long, by segment and
offset among equals (get_free_block); split when more than 1 MiB is left (should_split); else a new segment of 20 MiB
below 10 MiB, the request rounded to 2 MiB above (get_allocation_size); a freed block merges with its free neighbours
in its segment (try_merge_blocks). Where this reserves what the trace reserved, the request order, not the rules, is
what a planner's replay has to get right. --without-gathers leaves the all-gather stream's requests out.
--free-at EVENT instead lists the trace's own free blocks (of --min-mib or more) just before that event, from the
addresses it recorded, with the segment each is in and what made that segment.
Used for bench/deepspeed/results-pending/README.md, "Stage 3's set-up replayed" (2026-11-30)."""
import argparse
import bisect
import collections
import gzip
import json
import sys

MIB = 2.0**20
SMALL = 1 << 20
ROUND_LARGE = 2 << 20


def frames_of(event):
    return "; ".join(f if isinstance(f, str) else f"{f.get('filename', '')}:{f.get('line')}"
                     for f in event.get("frames") or [])


def stream_of(frames):
    if "_all_gather" in frames or "partition_parameters" in frames:
        return "all-gather"
    if "reduce_scatter_coalesced" in frames:
        return "reduce-scatter"
    return "default" if frames else None


class BestFit:
    def __init__(self):
        self.blocks = {}  # id -> [segment, offset, bytes, used, stream]
        self.segments = []  # (bytes, stream, event that made it)
        self.next_id = 0
        self.reserved = self.allocated = self.peak = 0
        self.at_peak = (0, [], 0)

    def malloc(self, size, stream, event):
        size = (size + 511) // 512 * 512
        best = None
        for bid, b in self.blocks.items():
            if b[3] or b[4] != stream or b[2] < size:
                continue
            if best is None or (b[2], b[0], b[1]) < (self.blocks[best][2], self.blocks[best][0], self.blocks[best][1]):
                best = bid
        if best is None:
            segment = 20 * 2**20 if size < 10 * 2**20 else (size + ROUND_LARGE - 1) // ROUND_LARGE * ROUND_LARGE
            self.segments.append((segment, stream, event))
            self.reserved += segment
            best = self.new_block([len(self.segments) - 1, 0, segment, False, stream])
        b = self.blocks[best]
        if b[2] - size > SMALL:
            self.new_block([b[0], b[1] + size, b[2] - size, False, stream])
            b[2] = size
        b[3] = True
        self.allocated += b[2]
        if self.allocated > self.peak:
            self.peak = self.allocated
            self.at_peak = (self.reserved, [(b[2], b[0]) for b in self.blocks.values() if not b[3]], event)
        return best

    def new_block(self, block):
        self.next_id += 1
        self.blocks[self.next_id] = block
        return self.next_id

    def free(self, bid):
        b = self.blocks[bid]
        b[3] = False
        self.allocated -= b[2]
        for oid, o in list(self.blocks.items()):
            if oid == bid or o[3] or o[0] != b[0]:
                continue
            if o[1] + o[2] == b[1]:
                b[1] = o[1]
                b[2] += o[2]
                del self.blocks[oid]
            elif b[1] + b[2] == o[1]:
                b[2] += o[2]
                del self.blocks[oid]


def list_free_blocks(events, at, min_mib):
    segments, live, made_at = {}, {}, {}
    for i, e in enumerate(events[:at]):
        if e["action"] == "segment_alloc":
            segments[e["addr"]], made_at[e["addr"]] = e["size"], i
        elif e["action"] == "segment_free":
            segments.pop(e["addr"], None)
        elif e["action"] == "alloc":
            live[e["addr"]] = e["size"]
        elif e["action"] == "free_completed":
            live.pop(e["addr"], None)
    starts = sorted(segments)
    in_segment = collections.defaultdict(list)
    for addr, size in live.items():
        k = bisect.bisect_right(starts, addr) - 1
        if k >= 0 and addr < starts[k] + segments[starts[k]]:
            in_segment[starts[k]].append((addr, size))
    free = []
    for start, size in segments.items():
        position = start
        for addr, used in sorted(in_segment[start]) + [(start + size, 0)]:
            if addr - position >= min_mib * MIB:
                free.append((addr - position, size, made_at[start]))
            position = max(position, addr + used)
    print(f"free blocks of {min_mib:g} MiB or more just before event {at} (the trace's own addresses):")
    for hole, size, made in sorted(free):
        maker = frames_of(events[made + 1]) if made + 1 < len(events) else ""
        print(f"  {hole / MIB:8.1f} MiB in a {size / MIB:8.1f} MiB segment made at event {made}: {maker[:90]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--without-gathers", action="store_true")
    parser.add_argument("--min-mib", type=float, default=16.0, help="free blocks listed at the peak (default 16 MiB)")
    parser.add_argument("--free-at", type=int, help="list the trace's free blocks just before this event instead")
    a = parser.parse_args()
    try:
        with (gzip.open(a.trace, "rt") if a.trace.endswith(".gz") else open(a.trace)) as f:
            d = json.load(f)
        events = d["events"]
    except (OSError, ValueError, KeyError) as e:
        print(f"memtrace_best_fit.py: {a.trace}: {e} (expected a ds_peer.py --memory-trace file)", file=sys.stderr)
        sys.exit(2)
    if a.free_at is not None:
        if not 0 <= a.free_at <= len(events):
            print(f"memtrace_best_fit.py: --free-at {a.free_at} outside the trace's {len(events)} events", file=sys.stderr)
            sys.exit(2)
        list_free_blocks(events, a.free_at, a.min_mib)
        return
    made = sorted((e["addr"], e["size"]) for e in events if e["action"] == "segment_alloc")
    starts = [m[0] for m in made]

    def segment_of(addr):
        k = bisect.bisect_right(starts, addr) - 1
        return made[k][0] if k >= 0 and addr < made[k][0] + made[k][1] else None

    segment_stream = {}
    for e in events:
        if e["action"] == "alloc" and e["size"] > SMALL:
            s, kind = segment_of(e["addr"]), stream_of(frames_of(e))
            if kind and s is not None and s not in segment_stream:
                segment_stream[s] = kind
    model, handles = BestFit(), {}
    for i, e in enumerate(events):
        if e["action"] == "alloc" and e["size"] > SMALL:
            stream = segment_stream.get(segment_of(e["addr"]), "default")
            if a.without_gathers and stream == "all-gather":
                continue
            handles[e["addr"]] = model.malloc(e["size"], stream, i)
        elif e["action"] == "free_completed" and e["addr"] in handles:
            model.free(handles.pop(e["addr"]))
    reserved, free, event = model.at_peak
    print(f"{a.trace}: best fit per stream over the trace's requests above 1 MiB"
          f"{' (all-gather stream left out)' if a.without_gathers else ''}")
    print(f"  model: allocated peak {model.peak / 2**30:.2f} GiB at event {event}, reserved there "
          f"{reserved / 2**30:.2f} GiB")
    print(f"  trace: allocated peak {d['max_allocated'] / 2**30:.2f} GiB, reserved peak {d['max_reserved'] / 2**30:.2f}"
          f" GiB (the small pool included)")
    by_stream = collections.Counter()
    for size, segment in sorted(free, reverse=True):
        seg_bytes, stream, made_at = model.segments[segment]
        by_stream[stream] += size
        if size >= a.min_mib * MIB:
            print(f"  free {size / MIB:8.1f} MiB of a {seg_bytes / MIB:8.1f} MiB {stream} segment made at event "
                  f"{made_at}: {frames_of(events[made_at])[:100]}")
    print("  free at the peak by stream: " + ", ".join(f"{k} {v / 2**30:.2f} GiB" for k, v in sorted(by_stream.items())))


if __name__ == "__main__":
    main()
