#!/usr/bin/env python3
"""Where a window of a caching-allocator trace (ds_peer.py --memory-trace FILE --memory-trace-from-start) put its
requests: each request of at least --min-mib (default 16) between two event indices, placed in the segment that holds
its address, counted by what asked for it and by what made that segment.

  python3 bench/deepspeed/memtrace_placement.py NAME.memtrace.json[.gz] FIRST LAST [--made-before EVENT ...]

A request is a coalesced all-gather buffer (DeepSpeed partition_parameters.py _all_gather_dtype), a per-parameter copy
out of it (partition_parameters.py wait) or, for anything else, an activation (the trace keeps frames for requests of
16 MiB and more). A segment is named the same way by the request that made it, or by the window of events it was made
in: --made-before E1 E2 ... splits the segments made by other requests at those event indices (say, the first loss
and the first optimizer step), so the table says whether a forward's activations went to segments its first forward
made or to ones the step made later. Used for the two-rank TinyLlama stage-3 row of 2026-11-30
(bench/deepspeed/results-pending/README.md, memtrace-2026-11-30-hf-x2/hf_tl_s3.memtrace.json.gz): FIRST 12276 (after
step 1's optimizer step) LAST 14628 (step 2's first loss tensor) --made-before 3971 (step 1's LM head) 12240 (its
optimizer step)."""
import argparse
import bisect
import collections
import gzip
import json
import sys

MIB = 2.0**20


def frames_of(event):
    out = []
    for f in event.get("frames") or []:
        out.append(f if isinstance(f, str) else f"{f.get('filename', '').split('/')[-1]}:{f.get('line')} {f.get('name')}")
    return "; ".join(out)


def request_kind(frames):
    if "_all_gather_dtype" in frames:
        return "all-gather buffer"
    if "partition_parameters.py:795" in frames:
        return "per-parameter copy"
    return "activation"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("first", type=int, help="first event index of the window")
    parser.add_argument("last", type=int, help="event index after the window")
    parser.add_argument("--made-before", type=int, nargs="*", default=[], help="event indices splitting other segments")
    parser.add_argument("--min-mib", type=float, default=16.0)
    parser.add_argument("--segments-made", action="store_true",
                        help="instead: the segments made in the window, by what made them, and their sizes")
    a = parser.parse_args()
    try:
        with (gzip.open(a.trace, "rt") if a.trace.endswith(".gz") else open(a.trace)) as f:
            d = json.load(f)
        events, segments = d["events"], d["segments"]
    except (OSError, ValueError, KeyError) as e:
        print(f"memtrace_placement.py: {a.trace}: {e} (expected a ds_peer.py --memory-trace file)", file=sys.stderr)
        sys.exit(2)
    if not 0 <= a.first < a.last <= len(events):
        print(f"memtrace_placement.py: window [{a.first}, {a.last}) outside the trace's {len(events)} events",
              file=sys.stderr)
        sys.exit(2)
    cuts = sorted(a.made_before)

    def origin(index, maker):
        kind = request_kind(maker)
        if kind != "activation":
            return kind
        period = bisect.bisect_right(cuts, index)
        return f"other, made before event {cuts[period]}" if period < len(cuts) else \
            f"other, made after event {cuts[-1]}" if cuts else "other"

    made = []  # (address, size, origin)
    for i, e in enumerate(events):
        if e["action"] == "segment_alloc":
            maker = frames_of(events[i + 1]) if i + 1 < len(events) else ""
            made.append((e["addr"], e["size"], origin(i, maker or frames_of(e))))
    if a.segments_made:
        totals, counts, sizes = collections.Counter(), collections.Counter(), collections.defaultdict(collections.Counter)
        for i in range(a.first, a.last):
            e = events[i]
            if e["action"] != "segment_alloc":
                continue
            maker = frames_of(events[i + 1]) if i + 1 < len(events) else ""
            kind = request_kind(maker or frames_of(e))
            totals[kind] += e["size"]
            counts[kind] += 1
            sizes[kind][round(e["size"] / MIB)] += 1
        print(f"{a.trace}: segments made in events [{a.first}, {a.last})")
        for kind in sorted(totals):
            shown = ", ".join(f"{c} x {mib} MiB" for mib, c in sorted(sizes[kind].items(), reverse=True))
            print(f"  {kind:<20} {counts[kind]:>4} segments, {totals[kind] / MIB:>8.0f} MiB: {shown}")
        return
    seen = {m[0] for m in made}
    for s in segments:
        if s["address"] not in seen:
            made.append((s["address"], s["total_size"], "before the trace"))
    made.sort()
    starts = [m[0] for m in made]
    counts, sizes = collections.Counter(), collections.Counter()
    for e in events[a.first:a.last]:
        if e["action"] != "alloc" or e["size"] < a.min_mib * MIB:
            continue
        k = bisect.bisect_right(starts, e["addr"]) - 1
        where = made[k][2] if k >= 0 and e["addr"] < made[k][0] + made[k][1] else "no segment found"
        key = (request_kind(frames_of(e)), where)
        counts[key] += 1
        sizes[key] += e["size"]
    print(f"{a.trace}: events [{a.first}, {a.last}), requests of {a.min_mib:g} MiB and more")
    print(f"{'request':<20} {'segment made for / when':<40} {'count':>6} {'MiB':>10}")
    for key in sorted(counts):
        print(f"{key[0]:<20} {key[1]:<40} {counts[key]:>6} {sizes[key] / MIB:>10.0f}")


if __name__ == "__main__":
    main()
