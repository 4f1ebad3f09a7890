#!/usr/bin/env python3
"""bitsandbytes' NF4 codes for fixed seeded weights: the golden file zeroplan's NF4 quantiser is checked against
(core/nf4_quantization.h; tests/core/nf4_quantization_test.cpp reads tests/data/bnb_nf4/bnb_nf4_codes.json).

  bnb_nf4_codes.py OUT_DIR
      On a CUDA machine with torch and bitsandbytes 0.50: for each case below, the weight drawn from
      torch.Generator(seed) as normal(0, std) in fp32 on the CPU, rounded to the case's dtype, moved to the GPU and
      quantised by bitsandbytes.functional.quantize_4bit(w, blocksize=64, compress_statistics=True, quant_type="nf4")
      (QLoRA's Params4bit with bnb_4bit_use_double_quant); the first-level constants come from the same call with
      compress_statistics=False. Writes OUT_DIR/bnb_nf4_codes.json:
        {"bitsandbytes": version, "torch": version, "device": name,
         "nf4_code": [16 floats]  (quant_state.code of the 4-bit state: get_4bit_type("nf4")),
         "cases": [{"name", "shape": [rows, cols], "dtype": "fp16"|"bf16", "seed", "std",
                    "input_bits": hex of the 16-bit values, little-endian, 4 hex digits per element,
                    "codes": hex of the packed uint8 codes (2 hex digits per byte; element 2i in the high nibble),
                    "absmax": [fp32 per block of 64]   (compress_statistics=False),
                    "absmax_q": hex of the uint8 quantised absmax (compress_statistics=True),
                    "offset": fp32, "state2_absmax": [fp32 per 256], "state2_code": [256 fp32],
                    "state2_blocksize": 256, "dequantized_bits": hex of dequantize_4bit's output in the dtype}]}
      Floats are written as Python floats of the fp32 values (exact when read back as doubles and rounded to fp32).

  bnb_nf4_codes.py --model CONFIG.json OUT_DIR
      The same record for every linear layer of a model as QLoRA loads it: transformers builds CONFIG.json's model
      (torch.manual_seed(0), bf16, from_config), save_pretrained's it, and loads it back with from_pretrained(
      quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
      bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=bfloat16)) onto the GPU: each bnb.nn.Linear4bit's
      Params4bit codes and quant_state are what bitsandbytes made of that module's saved bf16 weight. One case per
      module (its path as the name, seed and std null), the first-level absmax and the dequantised weight from
      quantize_4bit(compress_statistics=False) / dequantize_4bit of the same weight and state. Writes
      OUT_DIR/bnb_nf4_linear4bit_<config name>.json with "model": the config's path and "modules": their count.

  Lead's command (GPU machine, bitsandbytes 0.50 wheel installed):
      python3 bench/lora/bnb_nf4_codes.py "$OUT" && cp "$OUT/bnb_nf4_codes.json" tests/data/bnb_nf4/
"""
import json
import os
import sys

CASES = [
    # name, rows, cols, dtype, seed, std: one tensor of a whole 256-constant group and a tail (128x64: 128 blocks),
    # one with 768 blocks (3 full groups), both dtypes; std 0.02 is transformers' Llama init.
    ("w128x64_fp16", 128, 64, "fp16", 1234, 0.02),
    ("w128x64_bf16", 128, 64, "bf16", 1234, 0.02),
    ("w256x192_fp16", 256, 192, "fp16", 4321, 0.02),
    ("w256x192_bf16", 256, 192, "bf16", 4321, 1.0),
]


def main(argv):
    if len(argv) == 4 and argv[1] == "--model":
        return model_codes(argv[2], argv[3])
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out_dir = argv[1]
    import numpy as np
    import torch
    import bitsandbytes
    import bitsandbytes.functional as F

    if not torch.cuda.is_available():
        print("bnb_nf4_codes.py: needs a CUDA GPU (bitsandbytes' CUDA kernels are the reference)", file=sys.stderr)
        return 2
    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}
    doc = {"bitsandbytes": bitsandbytes.__version__, "torch": torch.__version__,
           "device": torch.cuda.get_device_name(0), "cases": []}

    def hex16(t):
        return t.contiguous().view(torch.int16).cpu().numpy().astype("<i2").tobytes().hex()

    def floats(t):
        return [float(v) for v in t.detach().float().cpu().reshape(-1).tolist()]

    for name, rows, cols, dtype, seed, std in CASES:
        g = torch.Generator().manual_seed(seed)
        w = (torch.randn(rows, cols, generator=g, dtype=torch.float32) * std).to(dtypes[dtype]).cuda()
        codes, state = F.quantize_4bit(w, blocksize=64, compress_statistics=True, quant_type="nf4")
        _, plain = F.quantize_4bit(w, blocksize=64, compress_statistics=False, quant_type="nf4")
        deq = F.dequantize_4bit(codes, state, quant_type="nf4")
        if "nf4_code" not in doc:
            doc["nf4_code"] = floats(state.code)
        doc["cases"].append({
            "name": name, "shape": [rows, cols], "dtype": dtype, "seed": seed, "std": std,
            "input_bits": hex16(w),
            "codes": codes.contiguous().view(torch.uint8).cpu().numpy().tobytes().hex(),
            "absmax": floats(plain.absmax),
            "absmax_q": state.absmax.contiguous().view(torch.uint8).cpu().numpy().tobytes().hex(),
            "offset": float(np.float32(state.offset if not torch.is_tensor(state.offset) else state.offset.item())),
            "state2_absmax": floats(state.state2.absmax),
            "state2_code": floats(state.state2.code),
            "state2_blocksize": int(state.state2.blocksize),
            "dequantized_bits": hex16(deq.to(dtypes[dtype])),
        })
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "bnb_nf4_codes.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    print(f"wrote {path}: {len(doc['cases'])} cases, bitsandbytes {doc['bitsandbytes']}, torch {doc['torch']}")
    return 0


def model_codes(config_path, out_dir):
    import tempfile

    import numpy as np
    import torch
    import bitsandbytes
    import bitsandbytes.functional as F
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM, BitsAndBytesConfig

    if not torch.cuda.is_available():
        print("bnb_nf4_codes.py: needs a CUDA GPU (bitsandbytes' CUDA kernels are the reference)", file=sys.stderr)
        return 2
    config = AutoConfig.from_pretrained(config_path)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    doc = {"bitsandbytes": bitsandbytes.__version__, "torch": torch.__version__,
           "device": torch.cuda.get_device_name(0), "model": config_path, "cases": []}
    with tempfile.TemporaryDirectory() as base:
        model.save_pretrained(base)
        saved = load_file(os.path.join(base, "model.safetensors"))
        quantized = AutoModelForCausalLM.from_pretrained(
            base, dtype=torch.bfloat16, device_map={"": 0},
            quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                   bnb_4bit_use_double_quant=True,
                                                   bnb_4bit_compute_dtype=torch.bfloat16))

    def hex16(t):
        return t.contiguous().view(torch.int16).cpu().numpy().astype("<i2").tobytes().hex()

    def floats(t):
        return [float(v) for v in t.detach().float().cpu().reshape(-1).tolist()]

    for path, module in quantized.named_modules():
        if not isinstance(module, bitsandbytes.nn.Linear4bit):
            continue
        w = saved[path + ".weight"].cuda()
        state = module.weight.quant_state
        if "nf4_code" not in doc:
            doc["nf4_code"] = floats(state.code)
        _, plain = F.quantize_4bit(w, blocksize=64, compress_statistics=False, quant_type="nf4")
        deq = F.dequantize_4bit(module.weight.data, state, quant_type="nf4")
        doc["cases"].append({
            "name": path, "shape": list(w.shape), "dtype": "bf16", "seed": None, "std": None,
            "blocksize": int(state.blocksize), "nested": bool(state.nested),
            "input_bits": hex16(w),
            "codes": module.weight.data.contiguous().view(torch.uint8).cpu().numpy().tobytes().hex(),
            "absmax": floats(plain.absmax),
            "absmax_q": state.absmax.contiguous().view(torch.uint8).cpu().numpy().tobytes().hex(),
            "offset": float(np.float32(state.offset if not torch.is_tensor(state.offset) else state.offset.item())),
            "state2_absmax": floats(state.state2.absmax),
            "state2_code": floats(state.state2.code),
            "state2_blocksize": int(state.state2.blocksize),
            "dequantized_bits": hex16(deq.to(torch.bfloat16)),
        })
    doc["modules"] = len(doc["cases"])
    os.makedirs(out_dir, exist_ok=True)
    name = os.path.splitext(os.path.basename(config_path))[0]
    path = os.path.join(out_dir, f"bnb_nf4_linear4bit_{name}.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    print(f"wrote {path}: {doc['modules']} Linear4bit modules, bitsandbytes {doc['bitsandbytes']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
