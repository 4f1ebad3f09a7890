#!/usr/bin/env bash
# zeroplan's layer-list executor on a GPU machine (issue 37: ResNet-101 on CIFAR-10), in one device call (N = the
# machine's GPUs); carry ["bench/deps"] (and ["bench/deepspeed/wheels"] for the ds part):
#   run(command="PARTS='build tests correct speed peers' bash bench/resnet/device_resnet.sh", carry=["bench/deps"])
# PARTS (default "build tests correct speed peers"):
#   build    the CLI and the GPU tests in build-dev (bench/exec/device_common.sh's configuration)
#   tests    the executor's GPU tests (GTEST_FILTER narrows them; default the network trainer's and two whole-step
#            transformer tests)
#   correct  torchvision's resnet101(num_classes=10) in fp32 on the CPU (bench/resnet/tv_reference.py, TF32 off)
#            against `zeroplan run --backend cuda --precision fp32 --init-from` on the same weights and images: step
#            1's loss and every parameter's gradient (bench/llama/hf_reference.py compare)
#   speed    zeroplan run, fp16, micro-batch MB (128) per GPU, 32x32 synthetic images, the rows SPEED_ROWS
#            (default "s0 s2 s3o": stage 0, stage 2, stage 3 with the optimizer on the CPU) beside their plans
#   peers    bench/resnet/ddp_peer.py on N GPUs in the same call (AMP fp16, channels-last), PEER_MODES (default
#            "eager compile graphs": eager, torch.compile, torch.compile mode reduce-overhead (CUDA graphs))
#   ds       DeepSpeed 0.19.8 on torchvision's ResNet-101 the tutorial's way at the speed rows' stages
# Logs in $OUT/logs.tar.gz, the summary printed last and kept in $OUT/summary.txt.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
PARTS=${PARTS:-build tests correct speed peers}
has() { [[ " $PARTS " == *" $1 "* ]]; }
FINAL_OUT=${OUT:-/tmp/zeroplan-out}
L=$(mktemp -d /tmp/resnet-logs.XXXX)
mkdir -p "$FINAL_OUT"
N=$(nvidia-smi -L | wc -l)
MB=${MB:-128}
STEPS=${STEPS:-30}
summary=("GPUs: $N x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(nproc) cores")
say() { summary+=("$*"); echo "$*"; }
START=$(date +%s)
time_left() { echo $(( ${DEADLINE:-540} - ($(date +%s) - START) )); }
need() { if [ "$(time_left)" -lt "$1" ]; then say "skipped (deadline): $2"; return 1; fi; }
finish() {
  printf '%s\n' "${summary[@]}" > "$FINAL_OUT/summary.txt"
  tar czf "$FINAL_OUT/logs.tar.gz" -C "$L" .
  echo "================ summary ($PARTS) ================"; cat "$FINAL_OUT/summary.txt"
}
trap finish EXIT
BUILD=build-dev
RUN=$BUILD/cli/zeroplan
CLUSTER=(--cluster h200x$N)
[ $N -eq 1 ] && CLUSTER=(--cluster h200x1)
W=/tmp/resnet-work
mkdir -p $W

if has build; then
  t0=$(date +%s)
  [ -d bench/deps/liburing ] && export PKG_CONFIG_PATH="$PWD/bench/deps/liburing/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  ZLIB_HINT=(); [ -f /usr/include/zlib.h ] || ZLIB_HINT=(-DZLIB_ROOT="$PWD/bench/deps/zlib")
  cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DZEROPLAN_BUILD_GUI=OFF -DZEROPLAN_BUILD_BENCHMARKS=OFF \
    -DZEROPLAN_BUILD_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 "${ZLIB_HINT[@]}" > "$L/build.log" 2>&1
  grep "zeroplan:\|CUDNN" "$L/build.log" | head -3
  if ! ninja -C $BUILD -j"$(nproc)" zeroplan zeroplan_exec_cuda_tests >> "$L/build.log" 2>&1; then
    grep -E "error|FAILED" "$L/build.log" | head -30; say "build FAILED"; exit 1
  fi
  say "build: $(( $(date +%s) - t0 )) s"
fi

if has tests; then
  need 60 "gpu tests" && {
    GTEST_FILTER=${GTEST_FILTER:-'CudaNetwork*:CudaTrainer.Fp32StepMatchesCpuReference:CudaTrainer.LlamaBf16StepMatchesCpuReference'} \
      timeout 300 $BUILD/tests/exec/zeroplan_exec_cuda_tests > "$L/gpu_tests.log" 2>&1; rc=$?
    grep -E "^\[  FAILED|Failure|Expected|Which is|actual|error" "$L/gpu_tests.log" | head -30
    say "gpu tests rc=$rc: $(grep -c '\[       OK' "$L/gpu_tests.log") ok, $(grep -c '^\[  FAILED' "$L/gpu_tests.log") failed lines: $(grep '^\[  FAILED' "$L/gpu_tests.log" | head -8 | cut -c14-90 | tr '\n' ' ')"
  }
fi

if has correct && need 90 "correctness against torchvision"; then
  B=${CORRECT_BATCH:-8}
  python3 bench/resnet/tv_reference.py --out $W/tv --batch $B --device cpu > "$L/tv_reference.log" 2>&1 || say "tv_reference FAILED: $(tail -2 "$L/tv_reference.log" | tr '\n' ' ')"
  timeout 180 $RUN run --model resnet101 --backend cuda --precision fp32 --data $W/tv/cifar --micro-batch $B --steps 1 \
    --warmup-steps 0 --init-from $W/tv/model.safetensors --save-grads $W/ours.safetensors --deterministic --force \
    "${CLUSTER[@]}" > "$L/ours_fp32.log" 2>&1; rc=$?
  [ $rc -ne 0 ] && say "ours fp32 FAILED rc=$rc: $(grep -iE 'error|zeroplan:' "$L/ours_fp32.log" | head -2 | tr '\n' ' ')"
  loss=$(python3 -c "
from safetensors import safe_open
with safe_open('$W/ours.safetensors', 'np') as f: print(f.metadata()['loss'])" 2>/dev/null)
  python3 bench/llama/hf_reference.py compare --ref $W/tv --ours $W/ours.safetensors --loss ${loss:-nan} \
    --json "$L/cmp_fp32.json" > "$L/cmp_fp32.log" 2>&1
  say "fp32 resnet101 (cuda) vs torchvision rc=$? (0: within tolerance): $(tail -1 "$L/cmp_fp32.log" | cut -c1-300)"
fi

row_flags() {  # s0 | s1 | s2 | s3 | s3o (stage 3 + optimizer on the CPU)
  case $1 in
    s3o) echo "--stage 3 --offload-optimizer cpu" ;;
    s*) echo "--stage ${1#s}" ;;
  esac
}
if has speed; then
  for row in ${SPEED_ROWS:-s0 s2 s3o}; do
    need 60 "speed $row" || break
    timeout 240 $RUN run --model resnet101 --backend cuda --precision fp16 --gpus $N --micro-batch $MB --steps $STEPS \
      --warmup-steps 5 $(row_flags $row) "${CLUSTER[@]}" --force --report $L/ours_$row.json > "$L/ours_$row.log" 2>&1; rc=$?
    say "ours $row rc=$rc: $(grep -E 'samples/s' "$L/ours_$row.log" | tail -1 | cut -c1-150)"
    [ $rc -ne 0 ] && say "    $(grep -iE 'error' "$L/ours_$row.log" | head -2 | tr '\n' ' ' | cut -c1-300)"
    grep -E "^  (step|device|activations|params|grads|optimizer|workspace|logits)" "$L/ours_$row.log" | head -12 | sed 's/^/    /' | while read -r l; do say "    $l"; done
  done
fi

# The peers only where ours ran (PEERS_ALWAYS=1 runs them regardless): their ratio is the point of the call.
if has peers && has speed && [ -z "${PEERS_ALWAYS:-}" ] && ! grep -q "samples/s" $L/ours_s*.log 2>/dev/null; then
  say "peers skipped: no speed row of ours ran"
elif has peers; then
  for mode in ${PEER_MODES:-eager compile graphs}; do
    need 120 "peer $mode" || break
    extra=()
    [ $mode = compile ] && extra=(--compile)
    [ $mode = graphs ] && extra=(--compile --compile-mode reduce-overhead)  # torch.compile with CUDA graphs
    if [ $N -gt 1 ]; then launch=(torchrun --standalone --nproc_per_node=$N); else launch=(python3); fi
    timeout ${PEER_TIMEOUT:-300} "${launch[@]}" bench/resnet/ddp_peer.py --micro-batch $MB --steps $STEPS --warmup 10 \
      --precision fp16 "${extra[@]}" --out $L/peer_$mode.json > "$L/peer_$mode.log" 2>&1; rc=$?
    say "peer ddp $mode rc=$rc: $(grep -E '^resnet101' "$L/peer_$mode.log" | tail -1 | cut -c1-160)"
  done
fi

if has ds; then
  site=/tmp/ds-site
  if [ ! -d $site ] && [ -d bench/deepspeed/wheels ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target $site bench/deepspeed/wheels/*.whl > "$L/ds_install.log" 2>&1 || say "ds install FAILED"
  fi
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  for row in ${DS_ROWS:-s0 s2 s3o}; do
    need 150 "deepspeed $row" || break
    stage=${row#s}; stage=${stage%o}
    flags=(--stage $stage); [ "${row: -1}" = o ] && flags+=(--offload-optimizer cpu)
    $RUN plan --model resnet101 --micro-batch $MB --precision fp16 --gpus $N "${flags[@]}" "${CLUSTER[@]}" \
      --emit-ds-config $W/ds_$row.json > "$L/ds_plan_$row.log" 2>&1
    OMP_NUM_THREADS=16 timeout 300 torchrun --standalone --nproc_per_node=$N bench/deepspeed/ds_peer.py --model resnet101 \
      --ds-config $W/ds_$row.json --cluster h200x$N --name resnet101_$row --out $L/ds_$row.json > "$L/ds_$row.log" 2>&1; rc=$?
    say "deepspeed $row rc=$rc: $(python3 -c "
import json; r = json.load(open('$L/ds_$row.json'))['runs'][0]['measured']
print(f\"step {1e3 * r['step_seconds']:.1f} ms, device {r['device_used_gib']:.2f} GiB\")" 2>/dev/null)"
  done
fi
