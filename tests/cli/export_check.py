#!/usr/bin/env python3
"""Reads a zeroplan checkpoint step directory on its own (manifest.json and the ranks' fp32 files, without
zeroplan's reader) and checks that `zeroplan export` wrote the same tensors, as the `safetensors` package reads
them, under Hugging Face GPT-2's names and layouts (Conv1D weights [in, out], token embedding without padding).

usage: export_check.py STEP_DIR MODEL.safetensors fp32|bf16
"""
import json
import os
import sys

import numpy as np
from safetensors import safe_open


def checkpoint_tensors(step_dir):
    with open(os.path.join(step_dir, "manifest.json")) as f:
        manifest = json.load(f)
    pieces = {}
    for entry in manifest["files"]:
        raw = np.fromfile(os.path.join(step_dir, entry["file"]), dtype="<f4")
        master = raw[: entry["elements"]]  # sections: master, momentum, variance
        for name, tensor_offset, count, offset in entry["segments"]:
            pieces.setdefault(name, []).append((tensor_offset, master[offset : offset + count]))
    tensors = {}
    for name, parts in pieces.items():
        numel = max(o + len(v) for o, v in parts)
        values = np.zeros(numel, dtype=np.float32)
        for o, v in parts:
            values[o : o + len(v)] = v
        tensors[name] = values
    return manifest["shape"], tensors


def hugging_face_form(shape, name, values):
    C = shape["hidden"]
    if name == "wte":
        return "wte.weight", values.reshape(shape["padded_vocab"], C)[: shape["vocab"]]
    if name == "wpe":
        return "wpe.weight", values.reshape(shape["max_seq"], C)
    rows = {"attn.c_attn.weight": 3 * C, "attn.c_proj.weight": C, "mlp.c_fc.weight": 4 * C, "mlp.c_proj.weight": C}
    for suffix, r in rows.items():
        if name.endswith(suffix):
            return name, values.reshape(r, -1).T  # ours [out, in]; GPT-2's Conv1D [in, out]
    return name, values


def to_bf16_bits(x):
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def main():
    step_dir, path, dtype = sys.argv[1], sys.argv[2], sys.argv[3]
    shape, tensors = checkpoint_tensors(step_dir)
    with safe_open(path, framework="numpy") as f:
        keys = set(f.keys())
        expected = dict(hugging_face_form(shape, n, v) for n, v in tensors.items())
        if keys != set(expected):
            sys.exit(f"names differ: only in file {sorted(keys - set(expected))}, "
                     f"only in checkpoint {sorted(set(expected) - keys)}")
        for name, want in expected.items():
            piece = f.get_slice(name)
            if list(piece.get_shape()) != list(want.shape):
                sys.exit(f"{name}: shape {piece.get_shape()} != {list(want.shape)}")
            if dtype == "fp32":
                got = f.get_tensor(name)
                if got.dtype != np.float32 or not np.array_equal(got, want):
                    sys.exit(f"{name}: values differ")
            else:
                if piece.get_dtype() != "BF16":
                    sys.exit(f"{name}: dtype {piece.get_dtype()} != BF16")
    if dtype == "bf16":
        # numpy has no bfloat16: the raw bytes after the header, at the offsets the package reported above.
        with open(path, "rb") as raw:
            n = int.from_bytes(raw.read(8), "little")
            header = json.loads(raw.read(n))
            data = raw.read()
        for name, want in expected.items():
            begin, end = header[name]["data_offsets"]
            got = np.frombuffer(data[begin:end], dtype="<u2")
            if not np.array_equal(got, to_bf16_bits(want).ravel()):
                sys.exit(f"{name}: bf16 values differ")
    print(f"{len(expected)} tensors equal ({dtype})")


if __name__ == "__main__":
    main()
