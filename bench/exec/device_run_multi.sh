#!/usr/bin/env bash
# Device calls on nvidia-h200-x2 (each under the 600 s limit of one call; the second finds the build in place
# when it follows within the machine's idle window):
#   bench/exec/device_run_multi.sh correctness   build, the GPU tests, N ranks against one rank (GPT-2 124M, stages
#                                                0-3, fp32 and bf16), --deterministic repeats, checkpoints of GPT-2
#                                                1.5B at stages 2 and 3 (save, resume, size and time)
#   bench/exec/device_run_multi.sh speed         GPT-2 1.5B, micro-batch 8, seq 1024, bf16 at stages 0-3 on 2 GPUs
#                                                and stage 0 on 1 GPU beside their plans, then the PyTorch peers (DDP,
#                                                ZeroRedundancyOptimizer, FSDP SHARD_GRAD_OP, FSDP FULL_SHARD, FSDP2)
# Full logs under $OUT; a short summary last.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
MODE=${1:-correctness}
OUT=${OUT:-/tmp/zeroplan-out}
mkdir -p "$OUT"
BUILD=build-dev
# liburing is not on the GPU machines: bench/exec/carry_deps.sh makes bench/deps/liburing, carried with the call
[ -d bench/deps/liburing ] && export PKG_CONFIG_PATH="$PWD/bench/deps/liburing/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
ZLIB_HINT=(); [ -f /usr/include/zlib.h ] || ZLIB_HINT=(-DZLIB_ROOT="$PWD/bench/deps/zlib")
STEPS=${STEPS:-20}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
t0=$(date +%s)
cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DZEROPLAN_BUILD_GUI=OFF -DZEROPLAN_BUILD_BENCHMARKS=OFF \
  -DZEROPLAN_BUILD_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 "${ZLIB_HINT[@]}" > "$OUT/build.log" 2>&1
grep "zeroplan:" "$OUT/build.log"
if ! ninja -C $BUILD -j32 zeroplan_exec_cuda_tests zeroplan >> "$OUT/build.log" 2>&1; then
  grep -E "error|FAILED" "$OUT/build.log" | head -40; exit 1
fi
echo "build: $(( $(date +%s) - t0 )) s"
RUN=$BUILD/cli/zeroplan
summary=()
tokens() { grep -E '^  [0-9]+ tokens/s' "$1" | cut -c1-70; }

if [ "$MODE" = correctness ]; then
  timeout 240 $BUILD/tests/exec/zeroplan_exec_cuda_tests > "$OUT/gpu_tests.log" 2>&1; rc=$?
  grep -E "FAILED|Failure|Expected|Which is|actual" "$OUT/gpu_tests.log" | head -30
  summary+=("gpu tests rc=$rc ($(grep -c '\[       OK' "$OUT/gpu_tests.log") ok)")
  # N ranks against one rank at GPT-2 124M: the same global batch (2 ranks x 2 micro-steps against 1 x 4)
  for prec in fp32 bf16; do
    for st in 0 1 2 3; do
      timeout 90 $RUN run --model gpt2-124m --micro-batch 4 --seq 256 --grad-accum 2 --precision $prec --stage $st \
        --gpus 2 --steps 20 --warmup-steps 2 --report "$OUT/eq_${prec}_s${st}.json" > "$OUT/eq_${prec}_s${st}.log" 2>&1
    done
    timeout 90 $RUN run --model gpt2-124m --micro-batch 4 --seq 256 --grad-accum 4 --precision $prec --stage 0 --gpus 1 \
      --steps 20 --warmup-steps 2 --report "$OUT/eq_${prec}_one.json" > "$OUT/eq_${prec}_one.log" 2>&1
  done
  python3 - "$OUT" <<'PY' | tee "$OUT/equivalence.txt"
import json, sys
out = sys.argv[1]
for prec in ("fp32", "bf16"):
    try:
        ref = json.load(open(f"{out}/eq_{prec}_one.json"))["measured"]["loss"]
    except Exception as e:
        print(f"{prec}: no one-rank reference ({e})"); continue
    for st in (0, 1, 2, 3):
        try:
            l = json.load(open(f"{out}/eq_{prec}_s{st}.json"))["measured"]["loss"]
            rel = max(abs(a - b) / abs(b) for a, b in zip(l, ref))
            print(f"{prec} stage {st} 2 ranks vs 1 rank: max relative loss difference over {len(l)} steps {rel:.3g}")
        except Exception as e:
            print(f"{prec} stage {st}: no result ({e})")
PY
  # --deterministic: two runs, the same losses bit for bit (2 ranks, bf16, stage 2)
  for k in 1 2; do
    timeout 90 $RUN run --model gpt2-124m --micro-batch 4 --seq 256 --grad-accum 2 --precision bf16 --stage 2 --gpus 2 \
      --steps 10 --warmup-steps 2 --deterministic --report "$OUT/det_$k.json" > "$OUT/det_$k.log" 2>&1
  done
  summary+=("deterministic repeat: $(python3 -c "import json,sys; a,b=(json.load(open(f'$OUT/det_{k}.json'))['measured']['loss'] for k in (1,2)); print('bit-identical losses' if a==b else f'DIFFERENT {a} {b}')" 2>&1)")
  # checkpoints of GPT-2 1.5B on 2 GPUs: save at step 3, resume to step 6, against 6 uninterrupted steps
  for st in 2 3; do
    rm -rf "/tmp/ck_whole_$st" "/tmp/ck_parts_$st"
    C="--model gpt2-1.5b --cluster h200x4 --micro-batch 8 --seq 1024 --precision bf16 --gpus 2 --stage $st --warmup-steps 0"
    timeout 150 $RUN run $C --steps 6 --save-dir /tmp/ck_whole_$st --report "$OUT/ck_whole_$st.json" > "$OUT/ck_whole_$st.log" 2>&1
    timeout 120 $RUN run $C --steps 3 --save-dir /tmp/ck_parts_$st > "$OUT/ck_save_$st.log" 2>&1
    timeout 150 $RUN run $C --steps 6 --resume /tmp/ck_parts_$st --save-dir /tmp/ck_parts_$st \
      --report "$OUT/ck_parts_$st.json" > "$OUT/ck_resume_$st.log" 2>&1
    same=$(cmp -s /tmp/ck_whole_$st/step-00000006/rank-00000.bin /tmp/ck_parts_$st/step-00000006/rank-00000.bin &&
           cmp -s /tmp/ck_whole_$st/step-00000006/rank-00001.bin /tmp/ck_parts_$st/step-00000006/rank-00001.bin &&
           echo "bit-identical" || echo "DIFFERENT")
    summary+=("checkpoint stage $st: $(grep '^checkpoint:' "$OUT/ck_save_$st.log") | resumed states $same")
  done
  python3 - "$OUT" <<'PY' | tee -a "$OUT/equivalence.txt"
import json, sys
out = sys.argv[1]
for st in (2, 3):
    try:
        a = json.load(open(f"{out}/ck_whole_{st}.json"))["measured"]["loss"][3:]
        b = json.load(open(f"{out}/ck_parts_{st}.json"))["measured"]["loss"]
        print(f"checkpoint stage {st}: losses of steps 4-6 {'equal' if a == b else 'DIFFER'}: {a} vs {b}")
    except Exception as e:
        print(f"checkpoint stage {st}: no result ({e})")
PY
fi

if [ "$MODE" = speed ]; then
  COMMON="--model gpt2-1.5b --cluster h200x4 --micro-batch 8 --seq 1024 --precision bf16 --checkpointing none --steps $STEPS --warmup-steps 5"
  timeout 100 $RUN run $COMMON --gpus 1 > "$OUT/run_1gpu.log" 2>&1
  summary+=("1 GPU stage 0: $(tokens "$OUT/run_1gpu.log")")
  for st in 0 1 2 3; do
    timeout 100 $RUN run $COMMON --gpus 2 --stage $st --report "$OUT/run_s${st}.json" > "$OUT/run_s${st}.log" 2>&1
    echo "stage $st rc=$?"; sed -n '/^memory per GPU/,$p' "$OUT/run_s${st}.log" | head -45
    summary+=("stage $st, 2 GPUs: $(tokens "$OUT/run_s${st}.log") | $(grep -E 'total \(device' "$OUT/run_s${st}.log" | tr -s ' ')")
  done
  cd bench/exec
  for mode in ddp zero1 fsdp_grad_op fsdp_full fsdp2; do
    PYTHONUNBUFFERED=1 timeout 75 torchrun --nproc_per_node 2 pytorch_peers_multi.py --mode $mode --steps $STEPS > "$OUT/peer_$mode.log" 2>&1
    summary+=("peer $mode: $(grep '^{' "$OUT/peer_$mode.log" | tail -1)")
  done
fi
echo "================ summary ($MODE) ================"
for s in "${summary[@]}"; do echo "$s"; done
