#!/bin/bash
# Builds the bitsandbytes 0.50.0 wheel the GPU machine needs for the QLoRA rows (it has no network and no
# bitsandbytes), slimmed to what it loads there: the PyPI wheel (41 MB) carries a library for every CUDA from 11.8 to
# 13.2, ROCm and XPU, and beside the repository (33 MB tracked) and DeepSpeed's wheels (22 MB) it does not fit the
# 64 MiB a device call may carry. The GPU machine's torch is cu130, whose build bitsandbytes loads
# (libbitsandbytes_cuda130.so; libbitsandbytes_cpu.so for its CPU paths): the other libraries and their RECORD lines
# are dropped. Writes bench/lora/wheels/ (git-ignored, carried with `run`'s carry argument).
#   usage: bash bench/lora/build_wheels.sh [CUDA_TAG (default 130)]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out="$here/wheels"
cuda="${1:-130}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_24_x86_64 bitsandbytes==0.50.0 -d "$work"
wheel=$(ls "$work"/bitsandbytes-0.50.0-*.whl)
rm -rf "$out"
mkdir -p "$out"
python3 - "$wheel" "$out/$(basename "$wheel")" "$cuda" <<'PY'
import re, sys, zipfile
src, dst, cuda = sys.argv[1], sys.argv[2], sys.argv[3]
keep = {f"bitsandbytes/libbitsandbytes_cuda{cuda}.so", "bitsandbytes/libbitsandbytes_cpu.so"}
dropped = lambda n: re.fullmatch(r"bitsandbytes/libbitsandbytes_\w+\.so", n) is not None and n not in keep
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
    if not any(n in zin.namelist() for n in keep if "cuda" in n):
        sys.exit(f"build_wheels.sh: {src} has no libbitsandbytes_cuda{cuda}.so")
    for info in zin.infolist():
        if dropped(info.filename):
            continue
        data = zin.read(info.filename)
        if info.filename.endswith(".dist-info/RECORD"):
            lines = [l for l in data.decode().splitlines() if not dropped(l.split(",")[0])]
            data = ("\n".join(lines) + "\n").encode()
        zout.writestr(info, data)
PY
ls -l "$out"
