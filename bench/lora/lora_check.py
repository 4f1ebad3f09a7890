#!/usr/bin/env python3
"""zeroplan's LoRA step against peft's on the same base weights and the same adapters, fp32: the executor's
correctness evidence for LoRA (issue 38), and the proof that peft loads `zeroplan export --adapter`'s output.

  lora_check.py --base DIR --adapter DIR --grads OURS.safetensors [--loss X] [--batch B] [--seq T]
                [--quantize-base none|nf4] [--device auto|cuda|cpu] [--attn eager|sdpa] [--work DIR]
                [--loss-rtol 1e-5] [--rtol 1e-4] [--max-rtol 1e-3] [--atol 1e-10] [--json FILE]

  --base     a bench/llama/hf_reference.py `make` folder (fp32): config.json, model.safetensors, tokens.bin and
             reference.json (its batch, seq and the base model's own loss)
  --adapter  what `zeroplan export --checkpoint CK --adapter DIR` wrote from a run whose adapters have not moved,
             so that they are the adapters step 1 ran with:
               zeroplan run --model BASE/config.json --init-from BASE --data BASE/tokens.bin --micro-batch B --seq T
                 --precision fp32 --steps 1 --warmup-steps 0 --lr 1e-30 --deterministic --lora-rank R
                 --lora-alpha A --lora-targets ... --save-dir CK --save-grads OURS.safetensors --force
               zeroplan export --checkpoint CK --adapter DIR
             (--lr must be > 0: at 1e-30 AdamW leaves lora_A bit-for-bit (its step-1 gradient is exactly zero, as
             PEFT's lora_B starts at zero) and moves lora_B from 0 to +-1e-30, which changes the loss and the
             lora_B gradients by about 1e-30 relative and gives lora_A gradients of about 1e-30 absolute, far
             under --atol)
  --grads    that run's --save-grads file: step 1's gradients by PEFT's adapter names
             (base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight, ...) and its loss in the metadata
             ("loss"; --loss overrides)

What it does: the base through transformers (AutoModelForCausalLM.from_pretrained, fp32, attention eager, TF32
off; with --quantize-base nf4 through bitsandbytes: BitsAndBytesConfig(load_in_4bit=True, nf4, double
quantisation, bnb_4bit_compute_dtype=float32) on the GPU, QLoRA's base as bitsandbytes holds it), the adapters
through PeftModel.from_pretrained(base, DIR, is_trainable=True); fails (exit 2) on a base tensor missing or
unexpected, on an adapter tensor of the file that the model has no place for, a LoRA parameter of the model the
file does not set, or one loaded with other values than the file's. Then one forward and backward with the
executor's convention (hf_reference.py's: inputs tokens[0:B*T] as (B, T), targets tokens[1:B*T+1], the mean
cross-entropy over logits.float()), and peft's loss and adapter gradients compared with ours by
hf_reference.py compare (per tensor: relative L2 error, max abs error over max |ref|; the loss's relative error).
Prints the table, then one JSON line. Exit 0 within tolerance, 1 outside, 2 on a name or shape mismatch.

Note: PEFT starts lora_B at zero, so step 1's loss is the base model's (reference.json's loss is printed beside
it: with nf4 the distance between the two is what quantising the base costs, the scale to read an nf4 loss
error against) and the lora_A gradients are zero; the lora_B gradients (x A^T through every layer) are the check.
With nf4 it also quantises layer 0's q/k/v and gate/up with bitsandbytes.functional.quantize_4bit both ways, each
module its own tensor (what bitsandbytes does under transformers) and the modules fused into one tensor, and prints
how far the two dequantised weights lie apart (informational: the NF4 codes of one tensor are checked against
bitsandbytes' in CI, tests/data/bnb_nf4; this shows whether the grouping into tensors matters).
"""
import argparse
import contextlib
import io
import json
import os
import re
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "llama"))
import hf_reference as R  # noqa: E402

LORA_PARAM = re.compile(r"\.(lora_A|lora_B|lora_embedding_A|lora_embedding_B|lora_magnitude_vector)\.([^.]+)(\.|$)")


# ---------------------------------------------------------------------------------------------------- names
def file_name_of(param_name, adapter="default"):
    """A PeftModel parameter's name as PEFT's adapter_model.safetensors stores it (get_peft_model_state_dict drops
    the adapter's name): base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight ->
    base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight. Other names are returned unchanged."""
    m = LORA_PARAM.search(param_name)
    if not m or m.group(2) != adapter:
        return param_name
    return param_name[:m.start()] + "." + m.group(1) + m.group(3) + param_name[m.end():]


def is_lora_param(param_name):
    return LORA_PARAM.search(param_name) is not None


def adapter_problems(file_shapes, model_shapes):
    """file_shapes / model_shapes: {file name: shape tuple}. The missing, unexpected and mismatched names."""
    missing = sorted(set(model_shapes) - set(file_shapes))
    unexpected = sorted(set(file_shapes) - set(model_shapes))
    mismatched = sorted(f"{n}: file {tuple(file_shapes[n])}, model {tuple(model_shapes[n])}"
                        for n in set(file_shapes) & set(model_shapes)
                        if tuple(file_shapes[n]) != tuple(model_shapes[n]))
    return missing, unexpected, mismatched


def loss_from_metadata(path):
    """The loss `zeroplan run --save-grads` writes into the file's metadata (9 digits), or None."""
    from safetensors import safe_open
    with safe_open(path, "np") as f:
        meta = f.metadata() or {}
    return float(meta["loss"]) if "loss" in meta else None


def nf4_fused_vs_separate(torch, base_dir, layer=0):
    """bitsandbytes' own dequantised NF4 weights of one layer's q/k/v (and gate/up), each quantised as its own
    Params4bit (what transformers + bitsandbytes do: one Linear4bit per module) against the same rows quantised as
    one fused tensor (a layout that holds q/k/v or gate/up together and quantises the whole): the first-level
    blocks of 64 are the same when every module's size is a multiple of 64, but the double quantisation's offset
    (the mean of all the tensor's absmax) and its groups of 256 absmax are not. Informational: how far the two
    ways of quantising the same weights lie apart."""
    import bitsandbytes.functional as F
    from safetensors import safe_open

    def dq(w):
        codes, state = F.quantize_4bit(w.contiguous(), blocksize=64, compress_statistics=True, quant_type="nf4")
        return F.dequantize_4bit(codes, state, quant_type="nf4").float().flatten()

    out = {}
    with safe_open(os.path.join(base_dir, "model.safetensors"), framework="pt", device="cuda") as f:
        keys = set(f.keys())
        for group, names in (("qkv", ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")),
                             ("gate_up", ("mlp.gate_proj", "mlp.up_proj"))):
            full = [f"model.layers.{layer}.{n}.weight" for n in names]
            if not all(k in keys for k in full):
                continue
            ws = [f.get_tensor(k).float() for k in full]
            sep = torch.cat([dq(w) for w in ws])
            fus = dq(torch.cat(ws, 0))
            diff = (sep - fus).abs()
            out[group] = {"layer": layer, "max_abs": float(diff.max()), "max_abs_over_max": float(diff.max() / sep.abs().max()),
                          "rel_l2": float(torch.linalg.vector_norm(diff.double()) / torch.linalg.vector_norm(sep.double())),
                          "fraction_differing": float((sep != fus).float().mean())}
    return out


# ---------------------------------------------------------------------------------------------------- check
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="hf_reference.py make folder (fp32 base, tokens.bin)")
    ap.add_argument("--adapter", required=True, help="zeroplan export --adapter's folder")
    ap.add_argument("--grads", required=True, help="zeroplan run --save-grads file of the same run")
    ap.add_argument("--loss", type=float, help="our step-1 loss (default: the grads file's metadata)")
    ap.add_argument("--tokens", help="token file (default BASE/tokens.bin)")
    ap.add_argument("--batch", type=int, help="default: BASE/reference.json's")
    ap.add_argument("--seq", type=int, help="default: BASE/reference.json's")
    ap.add_argument("--quantize-base", choices=["none", "nf4"], default="none",
                    help="nf4: the base through bitsandbytes 4-bit (compute fp32), against `zeroplan run "
                         "--quantize-base nf4 --precision fp32`")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--attn", choices=["eager", "sdpa"], default="eager")
    ap.add_argument("--work", help="where peft's loss and gradients are written (default: a temporary folder)")
    ap.add_argument("--loss-rtol", type=float, default=1e-5)
    ap.add_argument("--rtol", type=float, default=1e-4, help="per tensor ||ours-peft|| / ||peft||")
    ap.add_argument("--max-rtol", type=float, default=1e-3, help="per tensor max|ours-peft| / max|peft|")
    ap.add_argument("--atol", type=float, default=1e-10, help="absolute errors below this pass (lora_A's zeros)")
    ap.add_argument("--json", help="also write the summary here")
    a = ap.parse_args(argv)

    import torch
    from safetensors.torch import load_file, save_file
    import transformers
    from transformers import AutoModelForCausalLM
    import peft
    from peft import PeftModel

    R.strict_fp32(torch)
    R.quiet_transformers()
    ref_path = os.path.join(a.base, "reference.json")
    reference = json.load(open(ref_path)) if os.path.exists(ref_path) else {}
    B = a.batch or reference.get("batch")
    T = a.seq or reference.get("seq")
    if not B or not T:
        raise SystemExit("lora_check: --batch and --seq (no reference.json in --base)")
    device = R.pick_device(torch, a.device)
    problems = []
    nf4 = a.quantize_base == "nf4"

    # ---- the base
    kwargs = {"dtype": torch.float32, "attn_implementation": a.attn, "output_loading_info": True}
    if nf4:
        if device.type != "cuda":
            raise SystemExit("lora_check: --quantize-base nf4 needs a CUDA device (bitsandbytes' kernels)")
        from transformers import BitsAndBytesConfig
        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.float32)
        kwargs["device_map"] = {"": device.index if device.index is not None else torch.cuda.current_device()}
    base, info = AutoModelForCausalLM.from_pretrained(a.base, **kwargs)
    info = {k: sorted(str(x) if isinstance(x, tuple) else x for x in (v or ())) for k, v in info.items()}
    tied = R.is_tied(base.config)
    for key in ("unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(key):
            problems.append(f"base {key}: {info[key]}")
    missing_base = [k for k in info.get("missing_keys", []) if not (tied and k == "lm_head.weight")]
    if missing_base:
        problems.append(f"base missing_keys: {missing_base}")
    if not nf4:
        base.to(device)
    linear4bit = 0
    if nf4:
        import bitsandbytes as bnb
        linear4bit = sum(isinstance(m, bnb.nn.Linear4bit) for m in base.modules())
        if linear4bit == 0:
            problems.append("nf4: no bnb.nn.Linear4bit in the loaded base")

    # ---- the adapters: what the file holds, what peft loaded
    with open(os.path.join(a.adapter, "adapter_config.json")) as f:
        adapter_config = json.load(f)
    file_tensors = load_file(os.path.join(a.adapter, "adapter_model.safetensors"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = PeftModel.from_pretrained(base, a.adapter, is_trainable=True)
    peft_warnings = [str(w.message)[:300] for w in caught
                     if any(s in str(w.message).lower() for s in ("key", "adapter", "lora"))]
    lora = {file_name_of(n): p for n, p in model.named_parameters() if is_lora_param(n)}
    missing, unexpected, mismatched = adapter_problems({n: tuple(t.shape) for n, t in file_tensors.items()},
                                                       {n: tuple(p.shape) for n, p in lora.items()})
    differing = []
    for n in sorted(set(lora) & set(file_tensors)):
        p, t = lora[n].detach().float().cpu(), file_tensors[n].float()
        if tuple(p.shape) == tuple(t.shape) and not torch.equal(p, t):
            differing.append(f"{n}: max abs {float((p - t).abs().max()):.3e}")
    if missing:
        problems.append(f"adapter: LoRA parameters of the model not in the file (left at peft's init): {missing}")
    if unexpected:
        problems.append(f"adapter: tensors of the file the model has no place for: {unexpected}")
    if mismatched:
        problems.append(f"adapter: shapes differ: {mismatched}")
    if differing:
        problems.append(f"adapter: loaded values differ from the file's: {differing[:8]}")
    other_trainable = [n for n, p in model.named_parameters() if p.requires_grad and not is_lora_param(n)]
    if other_trainable:
        problems.append(f"trainable parameters besides the adapters: {other_trainable[:8]}")
    cfg = model.peft_config["default"]
    lora_b_max = max((float(t.abs().max()) for n, t in file_tensors.items() if ".lora_B." in n), default=0.0)
    print(f"peft {peft.__version__} / transformers {transformers.__version__} / torch {torch.__version__}: "
          f"{type(model.get_base_model()).__name__} from {a.base}" + (f" (nf4: {linear4bit} Linear4bit)" if nf4 else "")
          + f"; adapters from {a.adapter}: {len(file_tensors)} tensors, r {cfg.r}, alpha {cfg.lora_alpha}, "
          f"scaling {cfg.lora_alpha / cfg.r:g}, targets {sorted(cfg.target_modules) if not isinstance(cfg.target_modules, str) else cfg.target_modules}, "
          f"max |lora_B| {lora_b_max:.3g}; {len(missing)} missing, {len(unexpected)} unexpected, "
          f"{len(mismatched)} mismatched, {len(differing)} differing")
    for w in peft_warnings:
        print("peft warning:", w)

    # ---- the step
    model.train()
    tokens, _ = R.read_token_file(a.tokens or os.path.join(a.base, "tokens.bin"))
    inputs, targets = R.batch_from_tokens(torch, tokens, B, T, device)
    loss = R.loss_of(torch, model, inputs, targets)
    loss.backward()
    peft_loss = float(loss.item())
    grads = {}
    for n, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if p.grad is None:
            problems.append(f"{n}: no gradient")
            continue
        grads[file_name_of(n)] = p.grad.detach().float().cpu().contiguous()

    work = a.work or tempfile.mkdtemp(prefix="lora_check.")
    os.makedirs(work, exist_ok=True)
    save_file(grads, os.path.join(work, "grads.safetensors"))
    with open(os.path.join(work, "reference.json"), "w") as f:
        json.dump({"loss": peft_loss, "dtype": "fp32", "tie_word_embeddings": tied, "batch": B, "seq": T,
                   "what": "peft's step-1 loss and adapter gradients (lora_check.py)",
                   "quantize_base": a.quantize_base, "peft": peft.__version__,
                   "transformers": transformers.__version__, "torch": torch.__version__}, f, indent=1)

    ours_loss = a.loss if a.loss is not None else loss_from_metadata(a.grads)
    if ours_loss is None:
        problems.append(f"no loss: {a.grads} has no 'loss' metadata and --loss was not given")
    compare_json = os.path.join(work, "compare.json")
    cargs = argparse.Namespace(ref=work, ours=a.grads, loss=ours_loss, rtol=a.rtol, max_rtol=a.max_rtol,
                               loss_rtol=a.loss_rtol, atol=a.atol, tied_head="error", json=compare_json)
    buf = io.StringIO()
    compare_rc = 0
    with contextlib.redirect_stdout(buf):
        try:
            R.cmd_compare(cargs)
        except SystemExit as e:
            compare_rc = e.code if isinstance(e.code, int) else 2
    lines = buf.getvalue().rstrip("\n").split("\n")
    # compare's table and notes; its own JSON line is folded into ours below
    for line in lines:
        if not line.startswith("{"):
            print(line.replace("reference", "peft"))
    compare = {}
    if os.path.exists(compare_json):
        with open(compare_json) as f:
            compare = json.load(f)
        compare.pop("rows", None)

    fused = None
    if nf4:
        try:
            fused = nf4_fused_vs_separate(torch, a.base)
            for group, r in fused.items():
                print(f"nf4, layer {r['layer']} {group}: bitsandbytes per module vs one fused tensor: rel L2 "
                      f"{r['rel_l2']:.3e}, max abs {r['max_abs']:.3e} ({r['max_abs_over_max']:.3e} of max |w|), "
                      f"{100 * r['fraction_differing']:.1f}% of the values differ")
        except Exception as e:  # noqa: BLE001  (informational; never fails the check)
            fused = {"error": f"{type(e).__name__}: {e}"[:300]}
    base_loss = reference.get("loss")
    base_rel = abs(peft_loss - base_loss) / abs(base_loss) if base_loss else None
    if base_loss is not None:
        print(f"peft loss {peft_loss:.8f}; the base alone (reference.json, hf_reference make) {base_loss:.8f}: "
              f"relative {base_rel:.3e}" + (" (what quantising the base to nf4 moves the loss by)" if nf4 else
                                            " (lora_B ~ 0: these should agree)"))
    for p in problems:
        print("PROBLEM:", p)
    name_problems = bool(missing or unexpected or mismatched or differing or other_trainable) or compare_rc == 2 \
        or any(p.startswith("base ") for p in problems)
    rc = 2 if name_problems else (1 if problems or compare_rc != 0 else 0)
    summary = {
        "ok": rc == 0, "check": "lora_check", "quantize_base": a.quantize_base, "base": os.path.abspath(a.base),
        "adapter": os.path.abspath(a.adapter), "grads": os.path.abspath(a.grads), "batch": B, "seq": T,
        "device": str(device), "peft": peft.__version__, "transformers": transformers.__version__,
        "torch": torch.__version__,
        "adapter_load": {"tensors": len(file_tensors), "missing": missing, "unexpected": unexpected,
                         "mismatched": mismatched, "differing": differing, "peft_warnings": peft_warnings,
                         "r": cfg.r, "lora_alpha": cfg.lora_alpha, "config_r": adapter_config.get("r"),
                         "max_abs_lora_B": lora_b_max},
        "loss_peft": peft_loss, "loss_ours": ours_loss,
        "loss_rel_err": compare.get("loss_rel_err"), "loss_base_alone": base_loss, "loss_peft_vs_base_rel": base_rel,
        "tolerance": compare.get("tolerance"), "parameters_compared": compare.get("parameters_compared"),
        "failed": compare.get("failed"), "worst_rel_l2": compare.get("worst_rel_l2"),
        "worst_rel_max": compare.get("worst_rel_max"), "compare_rc": compare_rc, "problems": problems,
        "work": os.path.abspath(work), "nf4_fused_vs_separate": fused,
    }
    line = json.dumps(summary)
    print(line)
    if a.json:
        with open(a.json, "w") as f:
            f.write(line + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
