#!/usr/bin/env bash
# One device call: configure + build the executor, run the GPU tests, GPT-2 1.5B (mb 8, seq 1024, bf16) with
# `zeroplan run`, the PyTorch peer in the same call for the ratio, and GPT-2 124M on the shipped text; full logs
# under $OUT, a short table last. Usage: bench/exec/device_run.sh [tests] [big] [modes] [peer] [text]
# (default: all but modes)
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/zeroplan-out}
mkdir -p "$OUT"
PARTS="${*:-tests big peer text}"
has() { [[ " $PARTS " == *" $1 "* ]]; }
BUILD=build-dev
# liburing is not on the GPU machines: bench/exec/carry_deps.sh makes bench/deps/liburing, carried with the call
[ -d bench/deps/liburing ] && export PKG_CONFIG_PATH="$PWD/bench/deps/liburing/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
ZLIB_HINT=(); [ -f /usr/include/zlib.h ] || ZLIB_HINT=(-DZLIB_ROOT="$PWD/bench/deps/zlib")
STEPS_BIG=${STEPS_BIG:-20}
STEPS_TEXT=${STEPS_TEXT:-300}
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader 2>&1
t0=$(date +%s)
cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DZEROPLAN_BUILD_GUI=OFF -DZEROPLAN_BUILD_BENCHMARKS=OFF \
  -DZEROPLAN_BUILD_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 "${ZLIB_HINT[@]}" > "$OUT/build.log" 2>&1
targets="zeroplan_exec_cpu_tests zeroplan_exec_cuda_tests zeroplan"
if ! ninja -C $BUILD -j16 $targets >> "$OUT/build.log" 2>&1; then
  grep -E "error|FAILED" "$OUT/build.log" | head -40; exit 1
fi
echo "build: $(( $(date +%s) - t0 )) s"
RUN=$BUILD/cli/zeroplan
summary=()
if has tests; then
  $BUILD/tests/exec/zeroplan_exec_cpu_tests > "$OUT/cpu_tests.log" 2>&1; cpu_rc=$?
  timeout 300 $BUILD/tests/exec/zeroplan_exec_cuda_tests > "$OUT/gpu_tests.log" 2>&1; gpu_rc=$?
  grep -E "FAILED|Failure|error|Expected|Which is|actual|rel_err|  [A-Za-z_]+ " "$OUT/gpu_tests.log" | head -60
  summary+=("cpu tests rc=$cpu_rc ($(grep -c '\[       OK' "$OUT/cpu_tests.log") ok); gpu tests rc=$gpu_rc ($(grep -c '\[       OK' "$OUT/gpu_tests.log") ok, $(grep -c '\[  FAILED  \]' "$OUT/gpu_tests.log") failed lines)")
fi
if has big; then
  timeout 240 $RUN run --model gpt2-1.5b --cluster h200x4 --micro-batch 8 --seq 1024 --precision bf16 \
    --checkpointing none --steps $STEPS_BIG --warmup-steps 5 --report "$OUT/gpt2-1.5b-report.json" > "$OUT/run_1.5b.log" 2>&1
  echo "1.5B rc=$?"; grep -A40 "per-step time by op" "$OUT/run_1.5b.log"; tail -22 "$OUT/run_1.5b.log" | grep -v "^step"
  summary+=("ours: $(grep -E '^  [0-9]+ tokens/s' "$OUT/run_1.5b.log")")
fi
if has modes; then  # the other precisions and full recompute at GPT-2 1.5B scale (memory vs plan, loss scaling)
  for mode in "--precision fp16 --checkpointing none" "--precision bf16 --checkpointing full"; do
    timeout 120 $RUN run --model gpt2-1.5b --cluster h200x4 --micro-batch 8 --seq 1024 $mode --steps 12 \
      --warmup-steps 4 > "$OUT/run_mode.log" 2>&1
    echo "1.5B $mode rc=$?"; grep -E "^step   12|activations|total \(device|tokens/s,|step .* predicted" "$OUT/run_mode.log"
    summary+=("1.5B $mode: $(grep -E '^  [0-9]+ tokens/s' "$OUT/run_mode.log" | cut -c1-45), $(grep -E 'total \(device' "$OUT/run_mode.log" | tr -s ' ')")
  done
fi
if has peer; then
  PYTHONUNBUFFERED=1 timeout 200 python3 bench/exec/pytorch_peer.py --steps 20 > "$OUT/peer.log" 2>&1
  echo "peer rc=$?"; tail -c 600 "$OUT/peer.log"; echo
  summary+=("peer: $(python3 -c "import json;d=json.loads(open('$OUT/peer.log').read().strip().splitlines()[-1]);print(f\"{d['tokens_per_second']:.0f} tokens/s, {d['step_seconds_median']*1e3:.1f} ms, peak alloc {d['peak_allocated_gib']:.2f} GiB\")" 2>&1)")
fi
if has text; then
  timeout 200 $RUN run --model gpt2-124m --cluster h200x4 --micro-batch 16 --seq 1024 --precision bf16 \
    --steps $STEPS_TEXT --warmup-steps 10 --lr 6e-4 --data data/sample_stories.txt \
    --report "$OUT/gpt2-124m-text-report.json" > "$OUT/run_124m_text.log" 2>&1
  echo "124M rc=$?"; tail -16 "$OUT/run_124m_text.log"
  summary+=("124M text: $(grep -E 'loss .* -> ' "$OUT/run_124m_text.log")")
fi
echo "================ summary ================"
for s in "${summary[@]}"; do echo "$s"; done
