#!/usr/bin/env python3
"""Reads a `zeroplan export --adapter DIR` back as PEFT would find it: DIR/adapter_model.safetensors through the
safetensors package (numpy) and DIR/adapter_config.json. Prints one JSON line: {"tensors": {name: shape},
"nonzero_b": count of lora_B tensors not all zero, "finite": all values finite, "config": the config}; with a second
folder also "equal_to_other": the same tensor names with bitwise equal values.

  adapter_check.py DIR [OTHER_DIR]
"""
import json
import os
import sys


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    import numpy as np
    from safetensors.numpy import load_file

    tensors = load_file(os.path.join(argv[1], "adapter_model.safetensors"))
    with open(os.path.join(argv[1], "adapter_config.json")) as f:
        config = json.load(f)
    out = {"tensors": {k: list(v.shape) for k, v in tensors.items()},
           "nonzero_b": sum(1 for k, v in tensors.items() if k.endswith("lora_B.weight") and np.any(v != 0)),
           "finite": bool(all(np.all(np.isfinite(v)) for v in tensors.values())),
           "config": config}
    if len(argv) == 3:
        other = load_file(os.path.join(argv[2], "adapter_model.safetensors"))
        out["equal_to_other"] = sorted(other) == sorted(tensors) and all(
            other[k].dtype == v.dtype and np.array_equal(other[k].view(np.uint8), v.view(np.uint8))
            for k, v in tensors.items())
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
