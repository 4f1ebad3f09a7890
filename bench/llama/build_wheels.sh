#!/bin/bash
# The wheels the GPU machine needs for the Llama peers beyond what it has (it has no network; torch 2.11,
# transformers, safetensors and peft are there, DeepSpeed and torchtitan are not), for its Python (Ubuntu 24.04:
# CPython 3.12, manylinux x86_64):
#   DeepSpeed 0.19.8   bench/deepspeed/wheels/ (bench/deepspeed/build_wheels.sh: the pure-Python DeepSpeed wheel
#                      and its dependencies); built here only when its deepspeed wheel is missing (or --rebuild)
#   torchtitan 0.3.0   bench/llama/wheels/: torchtitan and the requirements of its METADATA the machine lacks:
#                      torchdata, torch_checkpointing, datasets (with dill and multiprocess at the versions it
#                      pins), tyro (docstring-parser, typeguard), spmd_types 0.2.3. Not wandb (20 MB with its
#                      OpenTelemetry requirements; torchtitan imports it only when its wandb logging is on) unless
#                      WITH_WANDB=1. Already on the machine (KINDS.md's package list): tokenizers, safetensors,
#                      tensorboard, einops, pillow, numpy, requests, urllib3, pyarrow, pandas, xxhash, fsspec,
#                      huggingface-hub, httpx, pyyaml, tqdm, packaging, filelock, typing-extensions (DeepSpeed's
#                      wheels carry a recent one too).
# bench/llama/wheels/ is git-ignored through .git/info/exclude (this script adds the line). Both folders are
# carried to the device together (run's carry), so their sum must stay under the 64 MiB a call may carry (less
# the working tree's own size): checked at the end.
#   usage: bash bench/llama/build_wheels.sh [--rebuild] [TARGET_PYTHON_VERSION (default 3.12)]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
rebuild=0
if [ "${1:-}" = "--rebuild" ]; then rebuild=1; shift; fi
python_version="${1:-3.12}"
out="$here/wheels"
ds_wheels="$repo/bench/deepspeed/wheels"

# git-ignore bench/llama/wheels/ locally (not .gitignore)
exclude="$(git -C "$repo" rev-parse --git-path info/exclude)"
case "$exclude" in /*) ;; *) exclude="$repo/$exclude" ;; esac
mkdir -p "$(dirname "$exclude")"
grep -qxF "/bench/llama/wheels/" "$exclude" 2>/dev/null || echo "/bench/llama/wheels/" >> "$exclude"

# DeepSpeed: the existing script, unless its wheels are there already
if [ "$rebuild" = 1 ] || ! ls "$ds_wheels"/deepspeed-0.19.8-*.whl > /dev/null 2>&1; then
  bash "$repo/bench/deepspeed/build_wheels.sh" "$python_version"
fi

rm -rf "$out"
mkdir -p "$out"
platforms=(--platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64
           --platform any)
get() {  # binary wheels for the target, no dependency resolution (each requirement named here)
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$python_version" \
    --implementation cp "${platforms[@]}" -d "$out" "$@"
}
get "torchtitan==0.3.0"
get "torchdata>=0.8.0" "torch_checkpointing>=0.1.0" "spmd_types==0.2.3"
get "datasets>=3.6.0,<4.8.0" "dill>=0.3.0,<0.4.1" "multiprocess<0.70.19"
get "tyro" "docstring-parser>=0.16" "typeguard>=4.0.0"
if [ "${WITH_WANDB:-0}" = 1 ]; then
  get "wandb" "cwevals==0.0.1b1" "opentelemetry-api>=1.43.0" "opentelemetry-sdk>=1.43.0" \
    "opentelemetry-exporter-otlp-proto-http>=1.43.0" "opentelemetry-exporter-otlp-proto-common" \
    "opentelemetry-proto" "opentelemetry-semantic-conventions" "googleapis-common-protos" "platformdirs"
fi

# What torchtitan's METADATA asks for, against what is here and what the machine has
echo "torchtitan 0.3.0 Requires-Dist (extras left out):"
unzip -p "$out"/torchtitan-0.3.0-*.whl '*/METADATA' | grep '^Requires-Dist' | grep -v 'extra ==' | sed 's/^/  /'

size() { du -sb "$1" | cut -f1; }
mib() { python3 -c "print(f'{$1 / 2**20:.1f} MiB')"; }
ds_bytes=$(size "$ds_wheels")
tt_bytes=$(size "$out")
echo
echo "bench/llama/wheels ($(ls "$out" | wc -l) files):"
(cd "$out" && ls -l *.whl | awk '{printf "  %10d  %s\n", $5, $9}')
echo "bench/deepspeed/wheels: $(ls "$ds_wheels" | wc -l) files, $ds_bytes bytes ($(mib "$ds_bytes"))"
echo "bench/llama/wheels:     $(ls "$out" | wc -l) files, $tt_bytes bytes ($(mib "$tt_bytes"))"
total=$((ds_bytes + tt_bytes))
tree=$(git -C "$repo" ls-files -z | (cd "$repo" && xargs -0 du -cb 2>/dev/null) | tail -1 | cut -f1)
echo "together:               $total bytes ($(mib "$total")); with the tracked tree ($(mib "$tree")): $(mib $((total + tree)))"
if [ $((total + tree)) -ge $((64 * 1024 * 1024)) ]; then
  echo "too large to carry to the device together with the working tree (64 MiB at most)" >&2
  exit 1
fi
