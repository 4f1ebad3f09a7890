#!/usr/bin/env python3
"""The Hugging Face reference for zeroplan's Llama-family executor: one forward and backward of transformers'
LlamaForCausalLM / Qwen2ForCausalLM, whose starting weights, tokens, loss and gradients the executor's step 1 is
checked against, and the checks themselves.

  hf_reference.py make --config CONFIG.json --out DIR [--seed S] [--batch B] [--seq T]
                       [--dtype fp32|bf16|bf16-autocast] [--attn eager|sdpa] [--device auto|cuda|cpu]
      (`make` may be left out: `hf_reference.py --config ... --out DIR` is the same)
      Builds the model from CONFIG.json (random init from the seed, fp32, on the CPU so that the weights do not
      depend on the GPU) and writes
        DIR/config.json, DIR/model.safetensors  save_pretrained (fp32 weights; one file, no shards)
        DIR/tokens.bin      llm.c token file: 256 int32 header (20240520, version 1 = uint16 tokens when the
                            vocabulary is at most 65536, else version 2 = uint32, the count), then B*T+1 tokens
                            drawn uniformly from the vocabulary with the seed
        DIR/reference.json  the loss, every parameter's gradient L2 norm (transformers names), what was run
        DIR/grads.safetensors  every gradient in fp32, by transformers name
      The step, the executor's convention: inputs tokens[0:B*T] as (B, T) (row b = tokens [b*T, b*T+T)), targets
      tokens[1:B*T+1], the loss the mean cross-entropy over all B*T positions of logits.float() (not the model's
      labels= path, which shifts inside each row and drops each row's last position). dtype fp32: fp32 weights
      and math (TF32 off); bf16: the fp32 weights rounded to bf16 parameters (buffers, RoPE's inv_freq among them,
      stay fp32, as FSDP2's param_dtype does), bf16 gradients saved as fp32; bf16-autocast: fp32 parameters under
      torch.autocast(bf16), fp32 gradients.

  hf_reference.py compare --ref DIR --ours OURS.safetensors [--loss X] [--rtol R] [--max-rtol M] [--loss-rtol L]
                          [--atol A] [--tied-head error|sum|ignore] [--json FILE]
      Per parameter of DIR/grads.safetensors: the relative L2 error ||ours - ref|| / ||ref||, the max abs error and
      the max abs error over max |ref|; the loss's relative error. A table, then one JSON line (also to --json).
      Exit 0 within tolerance, 1 outside, 2 when names or shapes do not match.

  hf_reference.py load-check --dir EXPORTED_DIR --tokens TOKENS.bin --batch B --seq T
                             [--expect-loss X | --ref DIR] [--loss-rtol L] [--weights FILE.safetensors]
      Loads an exported checkpoint with transformers (AutoModelForCausalLM.from_pretrained, fp32: LlamaForCausalLM
      or Qwen2ForCausalLM by its config.json), fails on missing, unexpected or mismatched tensors, computes the same
      loss on the first B*T+1 tokens and compares it with --expect-loss (or the loss in DIR/reference.json); with
      --weights, also compares every loaded tensor with that safetensors file (a 0-step export round trip).
"""
import argparse
import inspect
import json
import math
import os
import sys
import time

import numpy as np

LLMC_MAGIC = 20240520
HEADER_INTS = 256


# ---------------------------------------------------------------------------------------------------- token file
def write_token_file(path, tokens, vocab):
    """llm.c's format (dev/data/data_common.py write_datafile): version 1 (uint16) when every id fits, else 2."""
    version = 1 if vocab <= 65536 else 2
    header = np.zeros(HEADER_INTS, dtype=np.int32)
    header[0], header[1], header[2] = LLMC_MAGIC, version, len(tokens)
    data = np.asarray(tokens, dtype=np.uint16 if version == 1 else np.uint32)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(data.tobytes())
    return version


def read_token_file(path):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(HEADER_INTS * 4), dtype=np.int32)
        if header.size != HEADER_INTS or header[0] != LLMC_MAGIC:
            raise SystemExit(f"{path}: not an llm.c token file (magic {header[0] if header.size else None})")
        version, count = int(header[1]), int(header[2])
        if version not in (1, 2):
            raise SystemExit(f"{path}: version {version}, expected 1 (uint16) or 2 (uint32)")
        data = np.frombuffer(f.read(), dtype=np.uint16 if version == 1 else np.uint32)
    if data.size != count:
        raise SystemExit(f"{path}: header says {count} tokens, the file holds {data.size}")
    return data.astype(np.int64), version


# ---------------------------------------------------------------------------------------------------- the model
def load_config(path):
    from transformers import AutoConfig
    with open(path) as f:
        d = json.load(f)
    if d.get("model_type") not in ("llama", "mistral", "qwen2"):
        raise SystemExit(f"{path}: model_type {d.get('model_type')!r}; this reference builds llama, mistral and "
                         f"qwen2")
    return AutoConfig.for_model(**d)


def is_tied(config):
    return bool(getattr(config, "tie_word_embeddings", False))


def batch_from_tokens(torch, tokens, batch, seq, device, offset=0):
    need = offset + batch * seq + 1
    if tokens.size < need:
        raise SystemExit(f"the token file holds {tokens.size} tokens; batch {batch} x seq {seq} needs {need}")
    window = torch.from_numpy(np.ascontiguousarray(tokens[offset:need])).to(device)
    return window[:-1].view(batch, seq), window[1:].view(batch, seq)


def loss_of(torch, model, inputs, targets):
    """Mean cross-entropy over every position from the logits in fp32 (the executor's loss)."""
    logits = model(input_ids=inputs, use_cache=False).logits
    return torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


def quiet_transformers():
    """No progress bars (save_pretrained's "Writing model shards", from_pretrained's "Loading weights")."""
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()


def strict_fp32(torch):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def pick_device(torch, name):
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def save_model(model, out):
    """save_pretrained into one model.safetensors (no shards). transformers 5 always writes safetensors and has no
    safe_serialization argument; 4 takes it."""
    kwargs = {"max_shard_size": "1000GB"}
    if "safe_serialization" in inspect.signature(model.save_pretrained).parameters:
        kwargs["safe_serialization"] = True
    model.save_pretrained(out, **kwargs)


# ---------------------------------------------------------------------------------------------------- make
def cmd_make(a):
    import torch
    import transformers
    from safetensors import safe_open
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    strict_fp32(torch)
    quiet_transformers()
    device = pick_device(torch, a.device)
    config = load_config(a.config)
    if a.seq > config.max_position_embeddings:
        print(f"warning: seq {a.seq} > max_position_embeddings {config.max_position_embeddings}", file=sys.stderr)
    os.makedirs(a.out, exist_ok=True)

    # Random init on the CPU from the seed (the CPU generator: the same weights on any machine), fp32.
    torch.manual_seed(a.seed)
    model = AutoModelForCausalLM.from_config(config, attn_implementation=a.attn, dtype=torch.float32)
    model.config.use_cache = False
    save_model(model, a.out)
    with safe_open(os.path.join(a.out, "model.safetensors"), framework="pt") as f:
        saved_names = sorted(f.keys())
    param_names = [n for n, _ in model.named_parameters()]
    tied = is_tied(config)
    lm_head_saved = "lm_head.weight" in saved_names

    # B*T+1 tokens from the seed (a generator of their own, apart from the weights')
    vocab = config.vocab_size
    g = torch.Generator().manual_seed(a.seed)
    tokens = torch.randint(0, vocab, (a.batch * a.seq + 1,), generator=g).numpy()
    version = write_token_file(os.path.join(a.out, "tokens.bin"), tokens, vocab)

    model.to(device)
    if a.dtype == "bf16":
        # parameters only: buffers (RoPE's inv_freq) stay fp32, as under FSDP2's param_dtype
        for p in model.parameters():
            p.data = p.data.to(torch.bfloat16)
    model.train()  # no dropout in these configs (attention_dropout 0): train() changes nothing numerically
    inputs, targets = batch_from_tokens(torch, tokens, a.batch, a.seq, device)
    start = time.perf_counter()
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.dtype == "bf16-autocast"):
        loss = loss_of(torch, model, inputs, targets)
    loss.backward()
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start

    grads, params = {}, {}
    total_sq = 0.0
    for name, p in model.named_parameters():
        if p.grad is None:
            raise SystemExit(f"{name}: no gradient")
        g32 = p.grad.detach().float().cpu().contiguous()
        grads[name] = g32
        norm = float(torch.linalg.vector_norm(g32.double()))
        total_sq += norm * norm
        params[name] = {"shape": list(p.shape), "grad_norm": norm, "grad_dtype": str(p.grad.dtype).replace("torch.", "")}
    save_file(grads, os.path.join(a.out, "grads.safetensors"))

    reference = {
        "loss": float(loss.item()),
        "grad_norm_total": math.sqrt(total_sq),
        "config": os.path.abspath(a.config),
        "model_type": config.model_type,
        "architecture": type(model).__name__,
        "seed": a.seed,
        "batch": a.batch,
        "seq": a.seq,
        "dtype": a.dtype,
        "attn_implementation": a.attn,
        "device": str(device) + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "tie_word_embeddings": tied,
        # save_pretrained leaves out tensors tied to others: with tie_word_embeddings true lm_head.weight is not in
        # model.safetensors (and not among the parameters: one tensor, named model.embed_tokens.weight, whose
        # gradient holds the head's and the embedding's contributions together)
        "lm_head_in_model_safetensors": lm_head_saved,
        "saved_tensors_not_parameters": sorted(set(saved_names) - set(param_names)),
        "parameters_not_saved": sorted(set(param_names) - set(saved_names)),
        "tokens": {"file": "tokens.bin", "version": version, "count": int(tokens.size),
                   "inputs": f"tokens[0:{a.batch * a.seq}] as ({a.batch}, {a.seq})",
                   "targets": f"tokens[1:{a.batch * a.seq + 1}]"},
        "forward_backward_seconds": seconds,
        "grads": params,
    }
    with open(os.path.join(a.out, "reference.json"), "w") as f:
        json.dump(reference, f, indent=1)
    print(f"{type(model).__name__} {reference['parameters']:,} parameters, {a.dtype} on {reference['device']}, "
          f"attn {a.attn}: loss {reference['loss']:.8f} (ln V = {math.log(vocab):.4f}), "
          f"grad norm {reference['grad_norm_total']:.6g}")
    print(f"tie_word_embeddings {tied}: lm_head.weight {'in' if lm_head_saved else 'NOT in'} model.safetensors; "
          f"{len(saved_names)} tensors saved, {len(param_names)} parameters")
    print(f"wrote {a.out}/: config.json model.safetensors tokens.bin (version {version}, {tokens.size} tokens) "
          f"reference.json grads.safetensors")


# ---------------------------------------------------------------------------------------------------- compare
DEFAULT_TOL = {  # (rtol of the L2 error, rtol of the max abs error over max |ref|, loss rtol)
    "fp32": (1e-4, 1e-3, 1e-5),
    "bf16": (5e-2, 2.5e-1, 1e-2),
    "bf16-autocast": (5e-2, 2.5e-1, 1e-2),
}


def cmd_compare(a):
    import torch
    from safetensors.torch import load_file

    with open(os.path.join(a.ref, "reference.json")) as f:
        reference = json.load(f)
    rtol_d, max_rtol_d, loss_rtol_d = DEFAULT_TOL.get(reference.get("dtype"), DEFAULT_TOL["fp32"])
    rtol = a.rtol if a.rtol is not None else rtol_d
    max_rtol = a.max_rtol if a.max_rtol is not None else max_rtol_d
    loss_rtol = a.loss_rtol if a.loss_rtol is not None else loss_rtol_d
    ref = load_file(os.path.join(a.ref, "grads.safetensors"))
    ours = load_file(a.ours)
    problems = []
    notes = []
    if reference.get("tie_word_embeddings") and "lm_head.weight" in ours and "lm_head.weight" not in ref:
        if a.tied_head == "sum":
            ours["model.embed_tokens.weight"] = ours["model.embed_tokens.weight"].float() + ours.pop("lm_head.weight").float()
            notes.append("tied: ours' lm_head.weight added into model.embed_tokens.weight")
        elif a.tied_head == "ignore":
            ours.pop("lm_head.weight")
            notes.append("tied: ours' lm_head.weight ignored (model.embed_tokens.weight taken as the whole gradient)")
        else:
            problems.append("tied model: ours has lm_head.weight, the reference has one tensor "
                            "(model.embed_tokens.weight, head and embedding together); --tied-head sum|ignore")
    missing = sorted(set(ref) - set(ours))
    extra = sorted(set(ours) - set(ref))
    if missing:
        problems.append(f"missing from ours: {missing}")
    if extra:
        problems.append(f"not in the reference: {extra}")

    rows, failed = [], []
    for name in ref:
        if name not in ours:
            continue
        r = ref[name].double()
        o = ours[name].double()
        if tuple(o.shape) != tuple(r.shape):
            problems.append(f"{name}: shape {tuple(o.shape)}, reference {tuple(r.shape)}")
            continue
        diff = o - r
        ref_norm = float(torch.linalg.vector_norm(r))
        ref_max = float(r.abs().max()) if r.numel() else 0.0
        err_norm = float(torch.linalg.vector_norm(diff))
        max_abs = float(diff.abs().max()) if r.numel() else 0.0
        rel_l2 = err_norm / ref_norm if ref_norm > 0 else (0.0 if err_norm <= a.atol else math.inf)
        rel_max = max_abs / ref_max if ref_max > 0 else (0.0 if max_abs <= a.atol else math.inf)
        nonfinite = not bool(torch.isfinite(o).all())
        ok = (not nonfinite) and (rel_l2 <= rtol or err_norm <= a.atol) and (rel_max <= max_rtol or max_abs <= a.atol)
        rows.append({"name": name, "shape": list(r.shape), "ref_norm": ref_norm, "ours_norm": float(torch.linalg.vector_norm(o)),
                     "rel_l2": rel_l2, "max_abs": max_abs, "rel_max": rel_max, "ok": ok, "nonfinite": nonfinite})
        if not ok:
            failed.append(name)

    width = max([len(r["name"]) for r in rows] + [9])
    print(f"{'parameter':<{width}} {'shape':>16} {'|ref|':>11} {'|ours|':>11} {'rel L2 err':>11} {'max abs err':>11} "
          f"{'max/max|ref|':>12}")
    for r in rows:
        flag = "" if r["ok"] else ("  NON-FINITE" if r["nonfinite"] else "  OUTSIDE")
        print(f"{r['name']:<{width}} {'x'.join(map(str, r['shape'])):>16} {r['ref_norm']:11.4e} {r['ours_norm']:11.4e} "
              f"{r['rel_l2']:11.3e} {r['max_abs']:11.3e} {r['rel_max']:12.3e}{flag}")
    loss_ok, loss_rel = True, None
    if a.loss is not None:
        loss_rel = abs(a.loss - reference["loss"]) / abs(reference["loss"])
        loss_ok = loss_rel <= loss_rtol and math.isfinite(a.loss)
        print(f"loss: ours {a.loss:.8f}, reference {reference['loss']:.8f}, relative error {loss_rel:.3e} "
              f"({'within' if loss_ok else 'OUTSIDE'} {loss_rtol:g})")
    for n in notes:
        print(n)
    for p in problems:
        print("PROBLEM:", p)
    worst = max(rows, key=lambda r: r["rel_l2"]) if rows else None
    worst_max = max(rows, key=lambda r: r["rel_max"]) if rows else None
    summary = {
        "ok": not failed and not problems and loss_ok,
        "reference": os.path.abspath(a.ref), "ours": os.path.abspath(a.ours), "dtype": reference.get("dtype"),
        "tolerance": {"rtol_l2": rtol, "rtol_max": max_rtol, "atol": a.atol, "loss_rtol": loss_rtol},
        "loss_reference": reference["loss"], "loss_ours": a.loss, "loss_rel_err": loss_rel, "loss_ok": loss_ok,
        "parameters_compared": len(rows), "failed": failed, "problems": problems, "notes": notes,
        "worst_rel_l2": {"name": worst["name"], "value": worst["rel_l2"]} if worst else None,
        "worst_rel_max": {"name": worst_max["name"], "value": worst_max["rel_max"]} if worst_max else None,
    }
    line = json.dumps(summary)
    print(line)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({**summary, "rows": rows}, f, indent=1)
    if problems:
        sys.exit(2)
    sys.exit(0 if summary["ok"] else 1)


# ---------------------------------------------------------------------------------------------------- load-check
def cmd_load_check(a):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    strict_fp32(torch)
    quiet_transformers()
    device = pick_device(torch, a.device)
    expect = a.expect_loss
    if expect is None and a.ref:
        with open(os.path.join(a.ref, "reference.json")) as f:
            expect = json.load(f)["loss"]
    model, info = AutoModelForCausalLM.from_pretrained(a.dir, dtype=torch.float32, attn_implementation=a.attn,
                                                       output_loading_info=True)
    tied = is_tied(model.config)
    # transformers 5 gives sets here, 4 lists; mismatched_keys holds (name, shape, shape) tuples
    info = {k: sorted(str(x) if isinstance(x, tuple) else x for x in (v or ())) for k, v in info.items()}
    problems = []
    missing = [k for k in info.get("missing_keys", []) if not (tied and k == "lm_head.weight")]
    for key in ("unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(key):
            problems.append(f"{key}: {info[key]}")
    if missing:
        problems.append(f"missing_keys: {missing}")
    weights = None
    if a.weights:
        other = load_file(a.weights)
        state = model.state_dict()
        worst, names_off = 0.0, []
        for name, t in other.items():
            if name not in state:
                names_off.append(name)
                continue
            worst = max(worst, float((state[name].double() - t.double().to(state[name].device)).abs().max()))
        weights = {"file": a.weights, "max_abs_diff": worst, "names_not_in_model": names_off}
        if worst > a.weights_atol or names_off:
            problems.append(f"weights differ from {a.weights}: max abs {worst:g}, names not in the model {names_off}")
    model.to(device).eval()
    tokens, _ = read_token_file(a.tokens)
    inputs, targets = batch_from_tokens(torch, tokens, a.batch, a.seq, device, a.offset)
    with torch.no_grad():
        loss = float(loss_of(torch, model, inputs, targets).item())
    loss_rel = None
    if expect is not None:
        loss_rel = abs(loss - expect) / abs(expect)
        if not (loss_rel <= a.loss_rtol):
            problems.append(f"loss {loss:.8f} vs expected {expect:.8f}: relative error {loss_rel:.3e} > {a.loss_rtol:g}")
    summary = {"ok": not problems, "dir": os.path.abspath(a.dir), "architecture": type(model).__name__,
               "tie_word_embeddings": tied, "loss": loss, "expected_loss": expect, "loss_rel_err": loss_rel,
               "missing_keys": info.get("missing_keys", []), "unexpected_keys": info.get("unexpected_keys", []),
               "weights": weights, "problems": problems}
    print(f"{type(model).__name__} from {a.dir}: loss {loss:.8f}" +
          (f", expected {expect:.8f}, relative error {loss_rel:.3e}" if expect is not None else ""))
    for p in problems:
        print("PROBLEM:", p)
    print(json.dumps(summary))
    sys.exit(0 if not problems else 1)


# ---------------------------------------------------------------------------------------------------- main
def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in ("make", "compare", "load-check", "-h", "--help"):
        argv.insert(0, "make")  # hf_reference.py --config ... is `make`
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    m = sub.add_parser("make", help="build, save, one forward+backward, write the reference")
    m.add_argument("--config", required=True, help="a transformers config.json (llama or qwen2)")
    m.add_argument("--out", required=True, help="the folder to write")
    m.add_argument("--seed", type=int, default=1234)
    m.add_argument("--batch", type=int, default=2)
    m.add_argument("--seq", type=int, default=64)
    m.add_argument("--dtype", choices=["fp32", "bf16", "bf16-autocast"], default="fp32")
    m.add_argument("--attn", choices=["eager", "sdpa"], default="eager",
                   help="transformers' attn_implementation (eager: plain matmul + softmax, for fp32 exactness)")
    m.add_argument("--device", default="auto", help="auto (cuda when there is one), cuda, cuda:N or cpu")

    c = sub.add_parser("compare", help="our step-1 gradients (safetensors, transformers names) against DIR")
    c.add_argument("--ref", required=True, help="the folder `make` wrote")
    c.add_argument("--ours", required=True, help="our gradients: safetensors by transformers name (any float dtype)")
    c.add_argument("--loss", type=float, help="our step-1 loss")
    c.add_argument("--rtol", type=float, help="bound on ||ours-ref||/||ref|| per parameter (default by the "
                   "reference's dtype: fp32 1e-4, bf16 5e-2)")
    c.add_argument("--max-rtol", type=float, help="bound on max|ours-ref|/max|ref| per parameter (fp32 1e-3, bf16 0.25)")
    c.add_argument("--loss-rtol", type=float, help="bound on the loss's relative error (fp32 1e-5, bf16 1e-2)")
    c.add_argument("--atol", type=float, default=1e-10, help="absolute errors below this pass (zero gradients)")
    c.add_argument("--tied-head", choices=["error", "sum", "ignore"], default="error",
                   help="tied models: what to do with an lm_head.weight in ours (the reference has none)")
    c.add_argument("--json", help="also write the summary and every row to this file")

    l = sub.add_parser("load-check", help="load an exported checkpoint with transformers, check the loss")
    l.add_argument("--dir", required=True, help="the exported folder (config.json + model.safetensors)")
    l.add_argument("--tokens", required=True, help="llm.c token file")
    l.add_argument("--batch", type=int, required=True)
    l.add_argument("--seq", type=int, required=True)
    l.add_argument("--offset", type=int, default=0, help="first token of the window (default 0)")
    l.add_argument("--expect-loss", type=float)
    l.add_argument("--ref", help="a `make` folder: take the expected loss from its reference.json")
    l.add_argument("--loss-rtol", type=float, default=1e-5)
    l.add_argument("--weights", help="also compare every tensor of this safetensors file with the loaded model")
    l.add_argument("--weights-atol", type=float, default=0.0)
    l.add_argument("--attn", choices=["eager", "sdpa"], default="eager")
    l.add_argument("--device", default="auto")

    a = ap.parse_args(argv)
    {"make": cmd_make, "compare": cmd_compare, "load-check": cmd_load_check}[a.cmd](a)


if __name__ == "__main__":
    main()
