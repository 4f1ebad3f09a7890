#!/bin/bash
# One device call that checks bench/llama's Python on the GPU machine (any H200 kind; N = its GPU count):
#   run(command="bash bench/llama/device_check.sh", carry=["bench/deepspeed/wheels", "bench/llama/wheels"])
# PARTS (default "ref peers"): ref    hf_reference.py make / compare / load-check on the small configs;
#                                      save_pretrained of a tied model (qwen2-0.5b: is lm_head.weight saved?)
#                              peers  hf_peer.py on N GPUs: ddp, fsdp2, fsdp2_compile, deepspeed stages 0-3
#                                      (PEER_CONFIG, default tinyllama-1.1b; PEER_MB x PEER_SEQ, default 4 x 2048;
#                                      PEER_MODES picks some of: ddp fsdp2 fsdp2_compile ds_s0 ds_s1 ds_s2 ds_s3)
#                              offload  deepspeed stage 2 with DeepSpeedCPUAdam (builds its op first: minutes)
#                              titan  imports torchtitan 0.3's Llama model code from the carried wheels
# Logs in $OUT (one tarball), the summary printed last.
set -u
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
PARTS=${PARTS:-ref peers}
has() { [[ " $PARTS " == *" $1 "* ]]; }
repo=$(pwd)
OUT=${OUT:-/tmp/llama-check}
mkdir -p "$OUT"
L="$OUT/logs"
mkdir -p "$L"
N=$(nvidia-smi -L | wc -l)
summary=()
say() { summary+=("$*"); }

# The carried wheels, without network, into one folder on PYTHONPATH (the machine's numpy kept)
site=/tmp/llama-site
if [ -d bench/deepspeed/wheels ] || [ -d bench/llama/wheels ]; then
  wheels=()
  for w in bench/deepspeed/wheels/*.whl bench/llama/wheels/*.whl; do
    [ -f "$w" ] || continue
    case $(basename "$w") in numpy-*) python3 -c "import numpy" 2>/dev/null && continue ;; esac
    wheels+=("$w")
  done
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "${wheels[@]}" \
    > "$L/install.log" 2>&1 || say "wheel install FAILED: $(tail -3 "$L/install.log" | tr '\n' ' ')"
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
say "$(python3 -c "import sys, torch, transformers, safetensors; print('python', sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__, 'safetensors', safetensors.__version__)" 2>&1 | tail -1)"
say "GPUs: $N x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"

R="python3 bench/llama/hf_reference.py"
C=bench/llama/configs
W=/tmp/llama-ref
if has ref; then
  rm -rf $W; mkdir -p $W
  # tiny-ci: on the CPU and on the GPU, fp32 eager; the GPU's gradients compared with the CPU's
  $R make --config $C/tiny-ci.json --out $W/ci_cpu --batch 4 --seq 64 --device cpu > "$L/ci_cpu.log" 2>&1
  say "make tiny-ci cpu rc=$?: $(head -2 "$L/ci_cpu.log" | tr '\n' ' ')"
  $R make --config $C/tiny-ci.json --out $W/ci_gpu --batch 4 --seq 64 --device cuda > "$L/ci_gpu.log" 2>&1
  say "make tiny-ci cuda rc=$?: $(head -1 "$L/ci_gpu.log")"
  cmp -s $W/ci_cpu/model.safetensors $W/ci_gpu/model.safetensors && cmp -s $W/ci_cpu/tokens.bin $W/ci_gpu/tokens.bin \
    && say "  cpu and cuda runs wrote identical model.safetensors and tokens.bin" || say "  model/tokens DIFFER between cpu and cuda"
  $R compare --ref $W/ci_cpu --ours $W/ci_gpu/grads.safetensors --loss "$(python3 -c "import json; print(json.load(open('$W/ci_gpu/reference.json'))['loss'])")" \
    > "$L/cmp_cpu_gpu.log" 2>&1
  say "compare tiny-ci cuda vs cpu rc=$?: $(tail -1 "$L/cmp_cpu_gpu.log" | cut -c1-400)"
  # a perturbed gradient must fail
  python3 - $W <<'PY' > "$L/perturb.log" 2>&1
import sys, torch
from safetensors.torch import load_file, save_file
w = sys.argv[1]
g = load_file(f"{w}/ci_cpu/grads.safetensors")
g["model.layers.1.mlp.down_proj.weight"] *= 1.001
save_file(g, f"{w}/perturbed.safetensors")
PY
  $R compare --ref $W/ci_cpu --ours $W/perturbed.safetensors > "$L/cmp_perturbed.log" 2>&1
  say "compare perturbed (0.1% on one tensor; must exit 1) rc=$?: $(grep OUTSIDE "$L/cmp_perturbed.log" | head -1 | tr -s ' ')"
  # load-check: the make folder itself is an export at step 0
  $R load-check --dir $W/ci_cpu --tokens $W/ci_cpu/tokens.bin --batch 4 --seq 64 --ref $W/ci_cpu \
    --weights $W/ci_cpu/model.safetensors --device cpu > "$L/load_ci.log" 2>&1
  say "load-check tiny-ci rc=$?: $(head -1 "$L/load_ci.log")"
  for cfg in tiny-ci-llama3 tiny-ci-qwen2; do
    $R make --config $C/$cfg.json --out $W/$cfg --batch 4 --seq 64 --device cpu > "$L/$cfg.log" 2>&1
    say "make $cfg cpu rc=$?: $(head -2 "$L/$cfg.log" | tr '\n' ' ')"
  done
  # the GPU correctness variants, fp32 eager, and sdpa / bf16 beside
  for cfg in tiny-tinyllama tiny-llama3 tiny-qwen2; do
    $R make --config $C/$cfg.json --out $W/$cfg --batch 2 --seq 256 > "$L/$cfg.log" 2>&1
    say "make $cfg fp32 eager rc=$?: $(head -2 "$L/$cfg.log" | tr '\n' ' ')"
  done
  $R make --config $C/tiny-llama3.json --out $W/tiny-llama3-sdpa --batch 2 --seq 256 --attn sdpa > "$L/l3_sdpa.log" 2>&1
  $R compare --ref $W/tiny-llama3 --ours $W/tiny-llama3-sdpa/grads.safetensors \
    --loss "$(python3 -c "import json; print(json.load(open('$W/tiny-llama3-sdpa/reference.json'))['loss'])")" > "$L/cmp_sdpa.log" 2>&1
  say "compare tiny-llama3 sdpa vs eager (fp32) rc=$?: $(tail -1 "$L/cmp_sdpa.log" | cut -c1-400)"
  $R make --config $C/tiny-llama3.json --out $W/tiny-llama3-bf16 --batch 2 --seq 256 --dtype bf16 > "$L/l3_bf16.log" 2>&1
  $R compare --ref $W/tiny-llama3 --ours $W/tiny-llama3-bf16/grads.safetensors --rtol 1 --max-rtol 10 --loss-rtol 1 \
    --loss "$(python3 -c "import json; print(json.load(open('$W/tiny-llama3-bf16/reference.json'))['loss'])")" > "$L/cmp_bf16.log" 2>&1
  say "bf16 vs fp32 tiny-llama3 (how far bf16 lands): $(tail -1 "$L/cmp_bf16.log" | python3 -c "import json,sys; d=json.loads(sys.stdin.read()); print('loss rel', d['loss_rel_err'], 'worst rel L2', d['worst_rel_l2'], 'worst max', d['worst_rel_max'])" 2>&1)"
  # a tied model: does save_pretrained keep lm_head.weight?
  $R make --config $C/qwen2-0.5b.json --out $W/qwen2-0.5b --batch 1 --seq 128 > "$L/qwen2_05b.log" 2>&1
  say "make qwen2-0.5b (tied) rc=$?: $(head -2 "$L/qwen2_05b.log" | tr '\n' ' ')"
  $R load-check --dir $W/qwen2-0.5b --tokens $W/qwen2-0.5b/tokens.bin --batch 1 --seq 128 --ref $W/qwen2-0.5b \
    --weights $W/qwen2-0.5b/model.safetensors > "$L/load_qwen2.log" 2>&1
  say "load-check qwen2-0.5b rc=$?: $(head -1 "$L/load_qwen2.log")"
  python3 -c "import json; d=json.load(open('$W/qwen2-0.5b/reference.json')); print({k: d[k] for k in ('tie_word_embeddings','lm_head_in_model_safetensors','saved_tensors_not_parameters','parameters_not_saved','parameters')})" >> "$L/qwen2_05b.log" 2>&1
  say "  $(tail -1 "$L/qwen2_05b.log")"
  # a tied model's reference has one tensor for head and embedding: an lm_head.weight in ours is refused unless
  # --tied-head says what it is (here: the whole gradient put under model.embed_tokens.weight, lm_head zero)
  python3 - $W <<'PY' > "$L/tied.log" 2>&1
import sys, torch
from safetensors.torch import load_file, save_file
w = sys.argv[1]
g = load_file(f"{w}/qwen2-0.5b/grads.safetensors")
g["lm_head.weight"] = torch.zeros_like(g["model.embed_tokens.weight"])
save_file(g, f"{w}/tied_split.safetensors")
PY
  $R compare --ref $W/qwen2-0.5b --ours $W/tied_split.safetensors > "$L/cmp_tied_err.log" 2>&1
  say "compare tied, ours with lm_head.weight, default (must exit 2) rc=$?"
  $R compare --ref $W/qwen2-0.5b --ours $W/tied_split.safetensors --tied-head sum > "$L/cmp_tied_sum.log" 2>&1
  say "compare tied --tied-head sum rc=$?: $(tail -1 "$L/cmp_tied_sum.log" | cut -c1-200)"
  cp $W/ci_cpu/reference.json "$L/tiny-ci-reference.json"
fi

P="torchrun --nproc_per_node $N bench/llama/hf_peer.py --config $C/${PEER_CONFIG:-tinyllama-1.1b}.json --micro-batch ${PEER_MB:-4} --seq ${PEER_SEQ:-2048} --steps ${PEER_STEPS:-12} --warmup ${PEER_WARMUP:-4}"
peer() {  # name, then the flags
  local name=$1; shift
  timeout ${PEER_TIMEOUT:-240} $P "$@" > "$L/peer_$name.log" 2>&1
  local rc=$?
  say "peer $name rc=$rc: $(grep '^{' "$L/peer_$name.log" | tail -1 | python3 -c "import json,sys; d=json.loads(sys.stdin.read()); print(f\"{d['tokens_per_second']:,.0f} tok/s, {d['step_ms']:.1f} ms, MFU {100*d['mfu']:.1f}%, peak {d['peak_allocated_gib']:.1f} GiB (steps {d['peak_allocated_steps_gib']:.1f}), loss {d['loss_last']:.3f}, {d.get('optimizer')}\")" 2>&1 | tail -1)"
}
if has peers; then
  for m in ${PEER_MODES:-ddp fsdp2 fsdp2_compile ds_s0 ds_s1 ds_s2 ds_s3}; do
    case $m in ds_s*) peer $m --mode deepspeed --stage ${m#ds_s} ;; *) peer $m --mode $m ;; esac
  done
fi
if has offload; then
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-8} peer ds_s2_offopt --mode deepspeed --stage 2 --offload-optimizer cpu
fi
if has titan; then
  python3 -c "
import torchtitan, torch
from torchtitan.models.llama3 import Llama3Model, parallelize_llama
print('torchtitan', getattr(torchtitan, '__version__', '?'), 'imports its llama3 model code')" > "$L/titan.log" 2>&1
  say "torchtitan import rc=$?: $(tail -1 "$L/titan.log")"
fi

printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
tar czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$L"
