#!/usr/bin/python3
"""scripts/scaling_picture.py on stored run reports, and its refusals of bad input.

    scaling_picture_test.py SOURCE_DIR SCRATCH_DIR stored|bad_input

stored: the 1-GPU (2026-11-23) and 2-GPU (2026-11-26) GPT-2 1.5B reports of stages 0-3 under bench/exec/results/
make an SVG that parses as XML and holds, per stage, one measured and one predicted polyline of two points, in
order of GPU count, with axis labels, a legend and the title. bad_input: a missing file, a file that is not JSON and
one that lacks measured.stage each give exit status 2 and one line naming the file (and the field).
"""

import json
import os
import subprocess
import re
import sys
import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"


def run(source, args):
    return subprocess.run(["/usr/bin/python3", os.path.join(source, "scripts", "scaling_picture.py")] + args,
                          capture_output=True, text=True, timeout=60)


def check(condition, message):
    if not condition:
        print("FAILED: " + message)
        sys.exit(1)


def stored(source, scratch):
    reports = [os.path.join(source, "bench/exec/results", folder, f"run_s{s}.json")
               for folder in ("2026-11-23-one-gpu", "2026-11-26-two-gpu-h200") for s in range(4)]
    out = os.path.join(scratch, "scaling_stored.svg")
    title = "GPT-2 1.5B, nvidia-h200 and nvidia-h200-x2, 2026-11-23 and 2026-11-26"
    r = run(source, ["--title", title, "--out", out] + reports)
    check(r.returncode == 0, f"exit status {r.returncode}: {r.stderr}")
    root = ET.parse(out).getroot()  # raises on malformed XML
    check(root.tag == SVG + "svg", f"root element {root.tag}")
    texts = [t.text or "" for t in root.iter(SVG + "text")]
    check(title in texts, "the title is not drawn")
    check(any("GPUs" in t for t in texts), "no x-axis label")
    check(any("tokens/s per GPU" in t for t in texts), "no y-axis label")
    check({"measured", "predicted (plan)"} <= set(texts), "the legend lacks measured / predicted")
    lines = list(root.iter(SVG + "polyline"))
    for kind in ("measured", "predicted"):
        mine = [p for p in lines if p.get("class") == kind]
        series = sorted(p.get("data-series") for p in mine)
        check(series == [f"stage {s}" for s in range(4)], f"{kind} polylines: {series}")
        for p in mine:
            points = [tuple(map(float, xy.split(","))) for xy in p.get("points").split()]
            check(len(points) == 2, f"{kind} {p.get('data-series')}: {len(points)} points, expected 2 (1 and 2 GPUs)")
            check(points[0][0] < points[1][0], f"{kind} {p.get('data-series')}: points not in order of GPU count")
            check(p.get("stroke-dasharray") is None if kind == "measured" else p.get("stroke-dasharray"),
                  f"{kind} {p.get('data-series')}: measured is solid, predicted dashed")
        check(all(s in texts for s in series), "a stage is missing from the legend")
    check(len(lines) == 8, f"{len(lines)} polylines, expected 8")
    # Stage 0's measured 2-GPU point: 87,811.16 tokens/s over 2 GPUs is below the 1-GPU 46,854.6 (higher y).
    s0 = [p for p in lines if p.get("class") == "measured" and p.get("data-series") == "stage 0"][0]
    ys = [float(xy.split(",")[1]) for xy in s0.get("points").split()]
    check(ys[1] > ys[0], "stage 0: 2 GPUs' tokens/s per GPU drawn above 1 GPU's")
    print(r.stdout.strip())


def bad_input(source, scratch):
    good = os.path.join(source, "bench/exec/results/2026-11-26-two-gpu-h200/run_s0.json")
    not_json = os.path.join(scratch, "scaling_not_json.json")
    with open(not_json, "w") as f:
        f.write("{ not json\n")
    no_stage = os.path.join(scratch, "scaling_no_stage.json")
    with open(good) as f:
        report = json.load(f)
    del report["measured"]["stage"]
    with open(no_stage, "w") as f:
        json.dump(report, f)
    missing = os.path.join(scratch, "scaling_missing.json")
    if os.path.exists(missing):
        os.remove(missing)
    out = os.path.join(scratch, "scaling_bad.svg")
    for bad, expected in ((missing, "cannot be read"), (not_json, "not JSON"), (no_stage, "measured.stage")):
        r = run(source, ["--title", "t", "--out", out, good, bad])
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 2, f"{bad}: exit status {r.returncode}, expected 2")
        check(len(lines) == 1 and bad in lines[0] and expected in lines[0],
              f"{bad}: expected one line naming the file and '{expected}', got {r.stderr!r}")
        print(lines[0])


def tooltip_values(svg):
    """{(series, gpus, kind): tokens/s per GPU} from the points' tooltips."""
    values = {}
    for t in ET.parse(svg).getroot().iter(SVG + "title"):
        m = re.match(r"(.+), (\d+) GPUs?, (measured|predicted): ([\d,]+) tokens/s per GPU", t.text or "")
        if m:
            values[(m.group(1), int(m.group(2)), m.group(3))] = float(m.group(4).replace(",", ""))
    return values


def replan(source, scratch, zeroplan):
    # The four-GPU machine's runs of 2026-11-28 were planned on the h200x4 of their day; --replan plans them on the
    # description calibrate wrote that day, whose plans hold the step within 10% (FourH200RunsWithinTolerances).
    folder = os.path.join(source, "bench/exec/results/2026-11-28-four-gpu-h200")
    reports = [os.path.join(folder, "call3", f"scale_{g}gpu_s0.json") for g in (1, 2)] + \
              [os.path.join(folder, "call2", "run_s0.json")]
    as_run, replanned = os.path.join(scratch, "scaling_as_run.svg"), os.path.join(scratch, "scaling_replanned.svg")
    r = run(source, ["--title", "t", "--out", as_run] + reports)
    check(r.returncode == 0, f"exit status {r.returncode}: {r.stderr}")
    r = run(source, ["--title", "t", "--out", replanned, "--replan", "h200x4", "--zeroplan", zeroplan] + reports)
    check(r.returncode == 0, f"--replan: exit status {r.returncode}: {r.stderr}")
    before, after = tooltip_values(as_run), tooltip_values(replanned)
    for g in (1, 2, 4):
        measured = after[("stage 0", g, "measured")]
        check(measured == before[("stage 0", g, "measured")], f"{g} GPUs: --replan changed the measured point")
        predicted = after[("stage 0", g, "predicted")]
        check(abs(predicted / measured - 1) <= 0.10,
              f"{g} GPUs: replanned {predicted:.0f} tokens/s per GPU, measured {measured:.0f}: outside 10%")
    check(after[("stage 0", 4, "predicted")] != before[("stage 0", 4, "predicted")],
          "--replan drew the plan the run printed")
    r = run(source, ["--title", "t", "--out", replanned, "--replan", "no-such-cluster", "--zeroplan", zeroplan,
                     reports[0]])
    check(r.returncode == 2 and reports[0] in r.stderr and "no-such-cluster" in r.stderr,
          f"an unknown --replan cluster: exit {r.returncode}, {r.stderr!r}")
    print(r.stderr.strip())


if __name__ == "__main__":
    source, scratch, case = sys.argv[1:4]
    os.makedirs(scratch, exist_ok=True)
    if case == "replan":
        replan(source, scratch, sys.argv[4])
    else:
        {"stored": stored, "bad_input": bad_input}[case](source, scratch)
