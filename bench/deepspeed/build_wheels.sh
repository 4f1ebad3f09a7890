#!/bin/bash
# Builds the wheels the GPU machine needs to run DeepSpeed 0.19.8 (it has no network and no DeepSpeed): DeepSpeed's
# pure-Python wheel (DS_BUILD_OPS=0: its ops, CPU Adam included, build themselves there on first use with the
# machine's ninja and nvcc) and the dependencies DeepSpeed needs beyond the machine's torch, as binary wheels for
# its Python (Ubuntu 24.04: CPython 3.12, manylinux x86_64). Writes them to bench/deepspeed/wheels/ (git-ignored,
# carried to the device with `run`'s carry argument) and checks they fit the 64 MiB a carry may hold.
#   usage: bash bench/deepspeed/build_wheels.sh [TARGET_PYTHON_VERSION (default 3.12)]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out="$here/wheels"
python_version="${1:-3.12}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

rm -rf "$out"
mkdir -p "$out"
# A private build environment: building the wheel needs `wheel` and `setuptools`, nothing of this machine's Python.
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet wheel setuptools

# DeepSpeed from its source distribution, as a pure-Python wheel (no torch here: setup.py skips every op).
"$work/venv/bin/pip" download --quiet --no-deps --no-binary :all: deepspeed==0.19.8 -d "$work"
tar xzf "$work/deepspeed-0.19.8.tar.gz" -C "$work"
(cd "$work/deepspeed-0.19.8" && DS_BUILD_OPS=0 "$work/venv/bin/pip" wheel --quiet --no-deps --no-build-isolation -w "$out" .)

# Its requirements (requirements/requirements.txt of the sdist: einops, hjson, msgpack, ninja, numpy, packaging,
# psutil, py-cpuinfo, pydantic>=2, torch, tqdm) without torch, which the machine has; pydantic 2 brings
# pydantic-core, annotated-types, typing-inspection and a recent typing-extensions. Binary wheels for the target.
"$work/venv/bin/pip" download --quiet --only-binary=:all: --python-version "$python_version" \
  --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux_2_28_x86_64 --platform any -d "$out" \
  einops hjson msgpack numpy packaging psutil py-cpuinfo "pydantic>=2" pydantic-core annotated-types \
  typing-inspection "typing-extensions>=4.12" tqdm

ls -1 "$out"
bytes=$(du -sb "$out" | cut -f1)
echo "wheels: $(ls "$out" | wc -l) files, $bytes bytes in $out"
if [ "$bytes" -ge $((64 * 1024 * 1024)) ]; then
  echo "too large to carry to the device (64 MiB at most)" >&2
  exit 1
fi
