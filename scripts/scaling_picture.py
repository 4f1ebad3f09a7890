#!/usr/bin/python3
"""The scaling picture: tokens/s per GPU against GPU count, one line per ZeRO stage, as an SVG line chart.

Reads `zeroplan run --report FILE` JSON files. Each report carries its own GPU count (measured.world_size), its
stage (measured.stage), the measured throughput (measured.tokens_per_second, all ranks together) and the plan's
step (measured.predicted_step_seconds); the predicted throughput is the report's tokens per step
(training.micro_batch x training.seq_len x training.grad_accum x the GPU count) over that step. Both are divided by
the GPU count. The measured line of a stage is solid, the predicted one dashed, in the stage's colour.

    scripts/scaling_picture.py --title "GPT-2 1.5B, nvidia-h200-x4, 2026-11-28" --out docs/scaling-h200.svg \
        run_1gpu_s0.json run_2gpu_s0.json run_4gpu_s0.json ...

A series is the plan's label (plans[0].label, e.g. "stage 2" or "stage 3 + opt:cpu"; "stage N" when the report has
no plan), with ", checkpointing X" added when the run recomputed activations. Bad input (a missing file, one that is
not JSON or lacks a field, two reports of the same series and GPU count, reports of different models) is one line on
stderr naming the file and the field, and exit status 2. Standard library only.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from xml.sax.saxutils import escape, quoteattr

PROG = "scaling_picture"

# One colour per series, in order of first appearance after sorting (stage 0, 1, 2, 3, then offload plans).
COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
           "#bcbd22"]


class InputError(Exception):
    pass


def fail(message):
    print(f"{PROG}: {message}", file=sys.stderr)
    sys.exit(2)


def field(report, path, kind, path_name):
    """The value at a dotted path, checked: kind "count" (integer >= 1), "stage" (integer 0-3), "positive"."""
    value = report
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            raise InputError(f"{path_name}: lacks the field {path}")
        value = value[key]
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if kind == "count" and not (is_int and value >= 1):
        raise InputError(f"{path_name}: field {path} is {json.dumps(value)}, expected an integer of at least 1")
    if kind == "stage" and not (is_int and 0 <= value <= 3):
        raise InputError(f"{path_name}: field {path} is {json.dumps(value)}, expected a ZeRO stage 0-3")
    if kind == "positive":
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0):
            raise InputError(f"{path_name}: field {path} is {json.dumps(value)}, expected a positive number")
    return value


def read_report(path_name):
    try:
        with open(path_name, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise InputError(f"{path_name}: cannot be read ({e.strerror or e})")
    except UnicodeDecodeError:
        raise InputError(f"{path_name}: not JSON (not UTF-8 text)")
    try:
        report = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{path_name}: not JSON (line {e.lineno}, column {e.colno}: {e.msg})")
    if not isinstance(report, dict):
        raise InputError(f"{path_name}: not a zeroplan run report (the top level is not a JSON object)")
    gpus = field(report, "measured.world_size", "count", path_name)
    stage = field(report, "measured.stage", "stage", path_name)
    measured = field(report, "measured.tokens_per_second", "positive", path_name)
    step = field(report, "measured.predicted_step_seconds", "positive", path_name)
    micro_batch = field(report, "training.micro_batch", "count", path_name)
    seq_len = field(report, "training.seq_len", "count", path_name)
    grad_accum = field(report, "training.grad_accum", "count", path_name)
    model = report.get("model", {}).get("name") if isinstance(report.get("model"), dict) else None
    label = f"stage {stage}"
    plans = report.get("plans")
    if isinstance(plans, list) and plans and isinstance(plans[0], dict) and isinstance(plans[0].get("label"), str):
        label = plans[0]["label"]
    training = report["training"]
    checkpointing = training.get("checkpointing", "none") if isinstance(training, dict) else "none"
    if isinstance(checkpointing, str) and checkpointing != "none":
        label += f", checkpointing {checkpointing}"
    tokens_per_step = micro_batch * seq_len * grad_accum * gpus
    return {
        "file": path_name,
        "model": model,
        "series": label,
        "stage": stage,
        "gpus": gpus,
        "measured": measured / gpus,
        "predicted": tokens_per_step / step / gpus,
    }


def cluster_for_the_run(cluster, report, scratch):
    """`cluster` (a bundled name or a file) as the run's attention saw it: a run whose report does not say it ran
    cuDNN's fused attention (measured.attention_kernel, reports since 2026-11-29) ran the executor's own kernels, so
    it is planned at their rate (gpu.executor_kernel_attention_*, where the description has it)."""
    if report["measured"].get("attention_kernel") == "cudnn_fused":
        return cluster
    path = cluster if os.path.isfile(cluster) else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "configs", "clusters", cluster + ".json")
    try:
        with open(path, encoding="utf-8") as f:
            description = json.load(f)
    except (OSError, json.JSONDecodeError):
        return cluster  # the CLI names what is wrong with it
    gpu = description.get("gpu", {})
    if "executor_kernel_attention_forward_flops" not in gpu:
        return cluster
    gpu["executor_attention_forward_flops"] = gpu["executor_kernel_attention_forward_flops"]
    gpu["executor_attention_backward_flops"] = gpu["executor_kernel_attention_backward_flops"]
    out = os.path.join(scratch, os.path.basename(path))
    with open(out, "w", encoding="utf-8") as f:
        json.dump(description, f)
    return out


def replanned_tokens_per_gpu(zeroplan, cluster, path_name):
    """The report's run planned again on `cluster` by the zeroplan engine (as `zeroplan run` plans itself, at the
    attention rate of the kernels it ran): tokens per second per GPU from the plan's step."""
    with open(path_name, encoding="utf-8") as f:
        report = json.load(f)
    with tempfile.TemporaryDirectory() as scratch:
        return replan_in(zeroplan, cluster_for_the_run(cluster, report, scratch), cluster, report, path_name)


def replan_in(zeroplan, cluster_file, cluster, report, path_name):
    training, plan = report["training"], report["plans"][0]
    gpus = report["measured"]["world_size"]
    model = report["model"]["source"]
    model = model[len("bundled:"):] if model.startswith("bundled:") else model
    command = [zeroplan, "plan", "--model", model, "--cluster", cluster_file, "--gpus", str(gpus),
               "--micro-batch", str(training["micro_batch"]), "--seq", str(training["seq_len"]),
               "--grad-accum", str(training["grad_accum"]), "--precision", training["precision"],
               "--checkpointing", training["checkpointing"], "--stage", str(plan["stage"]),
               "--offload-optimizer", plan["offload_optimizer"], "--offload-param", plan["offload_param"],
               "--engine", "zeroplan", "--format", "json"]
    try:
        result = subprocess.run(command, capture_output=True, text=True)
    except OSError as e:
        raise InputError(f"--zeroplan {zeroplan}: cannot be run ({e.strerror or e})")
    try:
        step = json.loads(result.stdout)["plans"][0]["step_seconds"]
    except (json.JSONDecodeError, KeyError, IndexError):
        raise InputError(f"{path_name}: replanning on {cluster} failed: {result.stderr.strip()[:300]}")
    tokens_per_step = training["micro_batch"] * training["seq_len"] * training["grad_accum"] * gpus
    return tokens_per_step / step / gpus


def nice_step(span, ticks=6):
    raw = span / ticks
    power = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if m * power >= raw:
            return m * power
    return 10 * power


def thousands(v):
    return f"{v:,.0f}"


def series_order(name):
    # "stage N" first by N, then the same stage's variants (offload, checkpointing) after it, by name.
    try:
        stage = int(name.split()[1].rstrip(","))
    except (IndexError, ValueError):
        stage = 99
    return (stage, name != f"stage {stage}", name)


def render(points, title, command):
    width, height = 880, 560
    left, right, top, bottom = 100, 250, 70, 80
    plot_w, plot_h = width - left - right, height - top - bottom

    counts = sorted({p["gpus"] for p in points})
    top_count = max(4, counts[-1])
    ticks_x = [1 << k for k in range(int(math.ceil(math.log2(top_count))) + 1)]
    x_max = math.log2(ticks_x[-1])

    def x_of(gpus):
        return left + (math.log2(gpus) / x_max) * plot_w if x_max > 0 else left + plot_w / 2

    y_top = max(max(p["measured"], p["predicted"]) for p in points)
    step = nice_step(y_top * 1.05)
    y_max = step * math.ceil(y_top * 1.05 / step)

    def y_of(v):
        return top + plot_h - (v / y_max) * plot_h

    out = []
    out.append(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
               f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="13">')
    out.append(f"<title>{escape(title)}</title>")
    out.append(f"<desc>{escape(command)}</desc>")
    out.append(f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>')
    out.append(f'<text x="{left + plot_w / 2:.1f}" y="32" text-anchor="middle" font-size="17" '
               f'font-weight="bold">{escape(title)}</text>')
    # Grid, ticks and axes.
    v = 0.0
    while v <= y_max + 1e-9:
        y = y_of(v)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#dddddd"/>')
        out.append(f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end">{thousands(v)}</text>')
        v += step
    for c in ticks_x:
        x = x_of(c)
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + plot_h}" stroke="#eeeeee"/>')
        out.append(f'<text x="{x:.1f}" y="{top + plot_h + 20}" text-anchor="middle">{c}</text>')
    out.append(f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="black"/>')
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="black"/>')
    out.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 30}" text-anchor="middle">'
               f"GPUs (count, one rank per GPU)</text>")
    out.append(f'<text x="24" y="{top + plot_h / 2:.1f}" text-anchor="middle" '
               f'transform="rotate(-90 24 {top + plot_h / 2:.1f})">tokens/s per GPU (tokens per second)</text>')

    names = sorted({p["series"] for p in points}, key=series_order)
    for i, name in enumerate(names):
        colour = COLOURS[i % len(COLOURS)]
        mine = sorted((p for p in points if p["series"] == name), key=lambda p: p["gpus"])
        for kind, dash in (("measured", None), ("predicted", "7 5")):
            coords = " ".join(f"{x_of(p['gpus']):.1f},{y_of(p[kind]):.1f}" for p in mine)
            style = f' stroke-dasharray="{dash}"' if dash else ""
            out.append(f'<polyline class="{kind}" data-series={quoteattr(name)} points="{coords}" fill="none" '
                       f'stroke="{colour}" stroke-width="2.5"{style}/>')
            for p in mine:
                fill = colour if kind == "measured" else "white"
                tip = f"{name}, {p['gpus']} GPU{'s' if p['gpus'] > 1 else ''}, {kind}: {thousands(p[kind])} tokens/s per GPU ({p['file']})"
                out.append(f'<circle cx="{x_of(p["gpus"]):.1f}" cy="{y_of(p[kind]):.1f}" r="4" fill="{fill}" '
                           f'stroke="{colour}" stroke-width="2"><title>{escape(tip)}</title></circle>')

    # Legend: one entry per series, then the two line styles.
    lx, ly = left + plot_w + 25, top + 10
    out.append('<g class="legend">')
    for i, name in enumerate(names):
        colour = COLOURS[i % len(COLOURS)]
        y = ly + 22 * i
        out.append(f'<line x1="{lx}" y1="{y}" x2="{lx + 28}" y2="{y}" stroke="{colour}" stroke-width="2.5"/>')
        out.append(f'<text x="{lx + 36}" y="{y + 4}">{escape(name)}</text>')
    y = ly + 22 * len(names) + 14
    out.append(f'<line x1="{lx}" y1="{y}" x2="{lx + 28}" y2="{y}" stroke="black" stroke-width="2.5"/>')
    out.append(f'<text x="{lx + 36}" y="{y + 4}">measured</text>')
    y += 22
    out.append(f'<line x1="{lx}" y1="{y}" x2="{lx + 28}" y2="{y}" stroke="black" stroke-width="2.5" '
               f'stroke-dasharray="7 5"/>')
    out.append(f'<text x="{lx + 36}" y="{y + 4}">predicted (plan)</text>')
    out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv):
    parser = argparse.ArgumentParser(
        prog="scaling_picture.py",
        description="SVG line chart of tokens/s per GPU against GPU count, one line per ZeRO stage, "
                    "measured (solid) and predicted (dashed), from `zeroplan run --report` files.")
    parser.add_argument("--title", required=True, help="the chart's title: model, machine kind and date")
    parser.add_argument("--out", required=True, help="the SVG file to write")
    parser.add_argument("--replan", metavar="CLUSTER",
                        help="predict each report's step again with `zeroplan plan --engine zeroplan --cluster "
                             "CLUSTER` (a description shipped after the runs) instead of the plan the run printed")
    parser.add_argument("--zeroplan", default="build/cli/zeroplan", help="the zeroplan binary --replan runs")
    parser.add_argument("reports", nargs="+", metavar="REPORT.json", help="zeroplan run --report files")
    args = parser.parse_args(argv)  # bad flags: argparse's usage line and exit status 2

    points, seen, models = [], {}, {}
    try:
        for name in args.reports:
            p = read_report(name)
            if args.replan:
                p["predicted"] = replanned_tokens_per_gpu(args.zeroplan, args.replan, name)
            key = (p["series"], p["gpus"])
            if key in seen:
                raise InputError(f"{name}: a second report of {p['series']} on {p['gpus']} GPU(s) "
                                 f"(measured.stage, measured.world_size), after {seen[key]}")
            seen[key] = name
            if p["model"] is not None:
                models.setdefault(p["model"], name)
            points.append(p)
    except InputError as e:
        fail(str(e))
    if len(models) > 1:
        (m1, f1), (m2, f2) = list(models.items())[:2]
        fail(f"{f2}: field model.name is {json.dumps(m2)}, but {f1} is of {json.dumps(m1)}: one model per picture")

    command = "scripts/scaling_picture.py --title " + json.dumps(args.title) + " --out " + args.out + " " + \
        (f"--replan {args.replan} " if args.replan else "") + " ".join(args.reports)
    svg = render(points, args.title, command)
    try:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(svg)
    except OSError as e:
        fail(f"{args.out}: cannot be written ({e.strerror or e})")
    print(f"{args.out}: {len({p['series'] for p in points})} series, {len(points)} reports")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
