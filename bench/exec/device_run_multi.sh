#!/usr/bin/env bash
# One device call on nvidia-h200-x2: build, the GPU tests, `zeroplan run --gpus 2` at stages 0, 1, 2 (GPT-2 1.5B,
# micro-batch 8, seq 1024, bf16) beside their plans, the one-GPU figure, and the PyTorch peers (DDP,
# ZeroRedundancyOptimizer, FSDP SHARD_GRAD_OP) in the same call. Full logs under $OUT; a short table last.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/zeroplan-out}
mkdir -p "$OUT"
BUILD=build-dev
STEPS=${STEPS:-20}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
t0=$(date +%s)
cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DZEROPLAN_BUILD_GUI=OFF -DZEROPLAN_BUILD_BENCHMARKS=OFF \
  -DZEROPLAN_BUILD_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > "$OUT/build.log" 2>&1
grep "zeroplan:" "$OUT/build.log"
if ! ninja -C $BUILD -j32 zeroplan_exec_cuda_tests zeroplan >> "$OUT/build.log" 2>&1; then
  grep -E "error|FAILED" "$OUT/build.log" | head -40; exit 1
fi
echo "build: $(( $(date +%s) - t0 )) s"
RUN=$BUILD/cli/zeroplan
summary=()
timeout 300 $BUILD/tests/exec/zeroplan_exec_cuda_tests > "$OUT/gpu_tests.log" 2>&1; rc=$?
grep -E "FAILED|Failure|Expected|Which is|actual" "$OUT/gpu_tests.log" | head -30
summary+=("gpu tests rc=$rc ($(grep -c '\[       OK' "$OUT/gpu_tests.log") ok)")
COMMON="--model gpt2-1.5b --cluster h200x4 --micro-batch 8 --seq 1024 --precision bf16 --checkpointing none --steps $STEPS --warmup-steps 5"
# equivalence at GPT-2 124M scale: 2 ranks against 1 rank with the same global batch (fp32 and bf16)
for prec in fp32 bf16; do
  for st in 0 1 2; do
    timeout 120 $RUN run --model gpt2-124m --micro-batch 4 --seq 256 --grad-accum 2 --precision $prec --stage $st --gpus 2 \
      --steps 20 --warmup-steps 2 --report "$OUT/eq_${prec}_s${st}.json" > "$OUT/eq_${prec}_s${st}.log" 2>&1
  done
  timeout 120 $RUN run --model gpt2-124m --micro-batch 4 --seq 256 --grad-accum 4 --precision $prec --stage 0 --gpus 1 \
    --steps 20 --warmup-steps 2 --report "$OUT/eq_${prec}_one.json" > "$OUT/eq_${prec}_one.log" 2>&1
done
python3 - "$OUT" <<'PY' | tee "$OUT/equivalence.txt"
import json, sys
out = sys.argv[1]
for prec in ("fp32", "bf16"):
    ref = json.load(open(f"{out}/eq_{prec}_one.json"))["measured"]["loss"]
    for st in (0, 1, 2):
        try:
            l = json.load(open(f"{out}/eq_{prec}_s{st}.json"))["measured"]["loss"]
            rel = max(abs(a - b) / abs(b) for a, b in zip(l, ref))
            print(f"{prec} stage {st} 2 ranks vs 1 rank: max relative loss difference over {len(l)} steps {rel:.3g}")
        except Exception as e:
            print(f"{prec} stage {st}: no result ({e})")
PY
timeout 200 $RUN run $COMMON --gpus 1 > "$OUT/run_1gpu.log" 2>&1
summary+=("1 GPU: $(grep -E '^  [0-9]+ tokens/s' "$OUT/run_1gpu.log")")
for st in 0 1 2; do
  timeout 240 $RUN run $COMMON --gpus 2 --stage $st --report "$OUT/run_s${st}.json" > "$OUT/run_s${st}.log" 2>&1
  echo "stage $st rc=$?"; sed -n '/^memory per GPU/,$p' "$OUT/run_s${st}.log" | head -40
  summary+=("stage $st, 2 GPUs: $(grep -E '^  [0-9]+ tokens/s' "$OUT/run_s${st}.log" | cut -c1-60) | $(grep -E 'total \(device' "$OUT/run_s${st}.log" | tr -s ' ')")
done
cd bench/exec
for mode in ddp zero1 fsdp_grad_op; do
  PYTHONUNBUFFERED=1 timeout 200 torchrun --nproc_per_node 2 pytorch_peers_multi.py --mode $mode --steps $STEPS > "$OUT/peer_$mode.log" 2>&1
  summary+=("peer $mode: $(grep '^{' "$OUT/peer_$mode.log" | tail -1)")
done
echo "================ summary ================"
for s in "${summary[@]}"; do echo "$s"; done
