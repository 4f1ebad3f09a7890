#!/usr/bin/env python3
"""The speed part's table (bench/lora/device_lora.sh): per row, ours (`zeroplan run --report`) beside peft's
(peft_peer.py's JSON line) and the planner's predictions (`zeroplan plan --format json`, --engine zeroplan for
ours and the default DeepSpeed engine beside peft, the only framework engine the planner has).

  lora_summary.py DIR ROW [ROW...] [--json FILE]
      reads DIR/ours_ROW.json, DIR/peft_ROW.json, DIR/plan_zp_ROW.json, DIR/plan_ds_ROW.json (any may be
      missing: its columns print '-'). Columns:
        ours ms / peft ms   median step (ours: the report's measured.step_seconds; peft: CUDA events)
        peft/ours           peft's step over ours (the issue's goal: 1.5 or more)
        ours GiB / peft GiB device used at the peak (cudaMemGetInfo total - free), GiB
        zp GiB, zp ms       --engine zeroplan's plan, its error against ours in %
        ds GiB, ds ms       the DeepSpeed engine's plan (stage 0, one GPU), its error against peft in %
        trainable           peft's print_trainable_parameters line equal to the planner's ('=' or 'DIFFER')
      then one JSON line with every figure.
"""
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        # a log with the JSON line last (peft_peer.py's stdout)
        for line in reversed(text.splitlines()):
            if line.startswith("{"):
                try:
                    return json.loads(line)
                except json.JSONDecodeError:
                    return None
    return None


def first_plan(doc):
    plans = (doc or {}).get("plans") or []
    return plans[0] if plans else None


def row_figures(d, row):
    gib = 2.0 ** 30
    ours, peft = load(os.path.join(d, f"ours_{row}.json")), load(os.path.join(d, f"peft_{row}.json"))
    zp, ds = load(os.path.join(d, f"plan_zp_{row}.json")), load(os.path.join(d, f"plan_ds_{row}.json"))
    r = {"row": row}
    if ours and ours.get("measured"):
        m = ours["measured"]
        r["ours_ms"] = 1e3 * m["step_seconds"] if m.get("step_seconds") else None
        r["ours_gib"] = m["device_used_peak_bytes"] / gib if m.get("device_used_peak_bytes") else None
        r["ours_run_predicted_ms"] = 1e3 * m["predicted_step_seconds"] if m.get("predicted_step_seconds") else None
        p = first_plan(ours)
        r["ours_run_predicted_gib"] = p["gpu_bytes"]["total"] / gib if p else None
        r["ours_trainable_line"] = (ours.get("lora") or {}).get("print_trainable_parameters")
    if peft:
        r["peft_ms"] = peft.get("step_ms")
        r["peft_gib"] = peft.get("device_used_peak_gib")
        r["peft_allocated_gib"] = peft.get("peak_allocated_gib")
        r["peft_trainable_line"] = peft.get("print_trainable_parameters")
    for key, doc in (("zp", zp), ("ds", ds)):
        p = first_plan(doc)
        if p:
            r[f"{key}_gib"] = p["gpu_bytes"]["total"] / gib
            r[f"{key}_ms"] = 1e3 * p["step_seconds"]
            r[f"{key}_trainable_line"] = (doc.get("lora") or {}).get("print_trainable_parameters")

    def err(pred, meas):
        return 100.0 * (pred - meas) / meas if pred is not None and meas else None

    r["zp_gib_err_pct"] = err(r.get("zp_gib"), r.get("ours_gib"))
    r["zp_ms_err_pct"] = err(r.get("zp_ms"), r.get("ours_ms"))
    r["ds_gib_err_pct"] = err(r.get("ds_gib"), r.get("peft_gib"))
    r["ds_ms_err_pct"] = err(r.get("ds_ms"), r.get("peft_ms"))
    r["peft_over_ours"] = r["peft_ms"] / r["ours_ms"] if r.get("peft_ms") and r.get("ours_ms") else None
    planner_line = r.get("zp_trainable_line") or r.get("ds_trainable_line") or r.get("ours_trainable_line")
    if r.get("peft_trainable_line") and planner_line:
        r["trainable_equal"] = r["peft_trainable_line"].strip() == planner_line.strip()
    return r


def fmt(x, spec, width):
    """spec: '.1f' or '+.1f' (the sign before the width, as format() wants it)."""
    if x is None:
        return f"{'-':>{width}}"
    sign, rest = ("+", spec[1:]) if spec.startswith("+") else ("", spec)
    return format(x, f"{sign}{width}{rest}")


def table(rows):
    head = (f"{'row':<10} {'ours ms':>8} {'peft ms':>8} {'peft/ours':>9} {'ours GiB':>8} {'peft GiB':>8} "
            f"{'zp GiB':>7} {'err%':>6} {'zp ms':>7} {'err%':>6} {'ds GiB':>7} {'err%':>6} {'ds ms':>7} {'err%':>6} "
            f"trainable")
    out = [head, "-" * len(head)]
    for r in rows:
        te = r.get("trainable_equal")
        out.append(f"{r['row']:<10} {fmt(r.get('ours_ms'), '.1f', 8)} {fmt(r.get('peft_ms'), '.1f', 8)} "
                   f"{fmt(r.get('peft_over_ours'), '.2f', 9)} {fmt(r.get('ours_gib'), '.2f', 8)} "
                   f"{fmt(r.get('peft_gib'), '.2f', 8)} {fmt(r.get('zp_gib'), '.2f', 7)} "
                   f"{fmt(r.get('zp_gib_err_pct'), '+.1f', 6)} {fmt(r.get('zp_ms'), '.1f', 7)} "
                   f"{fmt(r.get('zp_ms_err_pct'), '+.1f', 6)} {fmt(r.get('ds_gib'), '.2f', 7)} "
                   f"{fmt(r.get('ds_gib_err_pct'), '+.1f', 6)} {fmt(r.get('ds_ms'), '.1f', 7)} "
                   f"{fmt(r.get('ds_ms_err_pct'), '+.1f', 6)} {'-' if te is None else ('=' if te else 'DIFFER')}")
    return "\n".join(out)


def main(argv):
    args = list(argv[1:])
    json_out = None
    if "--json" in args:
        i = args.index("--json")
        json_out = args[i + 1]
        del args[i:i + 2]
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    d, rows = args[0], args[1:]
    figures = [row_figures(d, r) for r in rows]
    print(table(figures))
    line = json.dumps({"lora_speed": figures})
    print(line)
    if json_out:
        with open(json_out, "w") as f:
            f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
