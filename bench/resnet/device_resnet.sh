#!/usr/bin/env bash
# zeroplan's layer-list executor on a GPU machine (issue 37: ResNet-101 on CIFAR-10), in one device call (N = the
# machine's GPUs); carry ["bench/deps"] (and ["bench/deepspeed/wheels"] for the ds part):
#   run(command="PARTS='build tests correct speed peers' bash bench/resnet/device_resnet.sh", carry=["bench/deps"])
# PARTS (default "build tests correct speed peers"):
#   build    the CLI and the GPU tests in build-dev (bench/exec/device_common.sh's configuration)
#   tests    the executor's GPU tests (GTEST_FILTER narrows them; default the network trainer's and two whole-step
#            transformer tests)
#   correct  torchvision's resnet101(num_classes=10) in fp32 and in fp64 on the CPU (bench/resnet/tv_reference.py)
#            against `zeroplan run --backend cuda --precision fp32 --init-from` on the same weights and images: step
#            1's loss and every parameter's gradient (bench/llama/hf_reference.py compare), at each batch size of
#            CORRECT_BATCHES (default 8); torchvision's own fp32 against fp64 beside them
#   profile  one step's kernels under Nsight Compute, ours and the eager peer's (PROFILE_PRECISION, default bf16)
#   speed    zeroplan run, fp16, micro-batch MB (128) per GPU, 32x32 synthetic images, the rows SPEED_ROWS
#            (default "s0 s2 s3o": stage 0, stage 2, stage 3 with the optimizer on the CPU) beside their plans
#   peers    bench/resnet/ddp_peer.py on N GPUs in the same call (AMP fp16, channels-last), PEER_MODES (default
#            "eager compile graphs": eager, torch.compile, torch.compile mode reduce-overhead (CUDA graphs))
#   ds       DeepSpeed 0.19.8 on torchvision's ResNet-101 the tutorial's way at the speed rows' stages
#   probe    one GPU, stage 0, micro-batch MB, a few steps: the process's host resident peak (VmHWM) with cuDNN's
#            convolution engines loaded, measured apart from the speed rows (sim/host_memory.h)
#   calibrate `zeroplan calibrate --quick` on the N GPUs (its grouped-call cost is what the planner charges each
#            further NCCL call of a group: core/cluster_description.h grouped_call_seconds), kept as calibrated.json
# Logs in $OUT/logs.tar.gz, the summary printed last and kept in $OUT/summary.txt.
DEFAULT_PARTS="build tests correct speed peers" LOG_NAME=resnet
source bench/device_call.sh
MB=${MB:-128}
STEPS=${STEPS:-30}
CLUSTER=(--cluster h200x$N)
[ $N -eq 1 ] && CLUSTER=(--cluster h200x1)
W=/tmp/resnet-work
mkdir -p $W

if has build; then
  if has tests; then build_dev zeroplan zeroplan_exec_cuda_tests; else build_dev zeroplan; fi
fi

if has calibrate; then
  need 90 "calibrate" && {
    timeout 180 $RUN calibrate --quick --gpus $N --base h200x$N --out $L/calibrated.json --force > "$L/calibrate.log" 2>&1
    say "calibrate rc=$?: $(grep -E 'grouped' "$L/calibrate.log" | tr -s ' ' | tr '\n' ';' | cut -c1-400)"
  }
fi

has tests && gpu_tests 'CudaNetwork*:CudaTrainer.Fp32StepMatchesCpuReference:CudaTrainer.LlamaBf16StepMatchesCpuReference'

# One batch size B: torchvision's step in fp32 and in fp64 (the exact step, to within fp64) on the same weights and
# images, ours in fp32 on the GPU; ours and torchvision's fp32 each against fp64, and ours against torchvision's fp32.
# Torchvision's own fp32 distance from fp64 is the floor any fp32 implementation of this step is held to.
correct_at() {
  local B=$1 D=$W/b$1
  python3 bench/resnet/tv_reference.py --out $D/tv --batch $B --device cpu > "$L/tv_reference_b$B.log" 2>&1 || say "tv_reference FAILED: $(tail -2 "$L/tv_reference_b$B.log" | tr '\n' ' ')"
  python3 bench/resnet/tv_reference.py --out $D/tv64 --batch $B --device cpu --dtype float64 > "$L/tv_reference64_b$B.log" 2>&1 || say "tv_reference fp64 FAILED: $(tail -2 "$L/tv_reference64_b$B.log" | tr '\n' ' ')"
  timeout 180 $RUN run --model resnet101 --backend cuda --precision fp32 --data $D/tv/cifar --micro-batch $B --steps 1 \
    --warmup-steps 0 --init-from $D/tv/model.safetensors --save-grads $D/ours.safetensors --deterministic --force \
    "${CLUSTER[@]}" > "$L/ours_fp32_b$B.log" 2>&1; rc=$?
  [ $rc -ne 0 ] && say "ours fp32 FAILED rc=$rc: $(grep -iE 'error|zeroplan:' "$L/ours_fp32_b$B.log" | head -2 | tr '\n' ' ')"
  local loss tvloss
  loss=$(python3 -c "
from safetensors import safe_open
with safe_open('$D/ours.safetensors', 'np') as f: print(f.metadata()['loss'])" 2>/dev/null)
  tvloss=$(python3 -c "import json; print(json.load(open('$D/tv/reference.json'))['loss'])" 2>/dev/null)
  for pair in "ours:tv:$D/ours.safetensors:${loss:-nan}" "ours:tv64:$D/ours.safetensors:${loss:-nan}" \
              "torchvision-fp32:tv64:$D/tv/grads.safetensors:${tvloss:-nan}"; do
    IFS=: read -r who ref grads l <<< "$pair"
    python3 bench/llama/hf_reference.py compare --ref $D/$ref --ours $grads --loss $l --json "$L/cmp_${who}_${ref}_b$B.json" \
      > "$L/cmp_${who}_${ref}_b$B.log" 2>&1
    say "B=$B $who vs $ref rc=$?: $(python3 -c "
import json; r = json.load(open('$L/cmp_${who}_${ref}_b$B.json'))
print(f\"loss rel {r['loss_rel_err']:.2e}, worst grad rel L2 {r['worst_rel_l2']['value']:.2e} ({r['worst_rel_l2']['name']}), worst max/max {r['worst_rel_max']['value']:.2e}, {len(r['failed'])} outside\")" 2>/dev/null)"
  done
}
if has correct; then
  for B in ${CORRECT_BATCHES:-8}; do
    need 90 "correctness against torchvision at batch $B" && correct_at $B
  done
fi

# Where one step's GPU time goes, ours and PyTorch's (eager, bf16: no loss scaler whose warm-up would need many
# profiled steps), kernel by kernel (Nsight Compute's gpu__time_duration; bench/resnet/kernel_profile.py).
if has profile; then
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  NCU_FLAGS=(--clock-control none --metrics gpu__time_duration.sum --csv --print-units base)
  if [ -z "$NCU" ]; then say "profile skipped: no ncu"; else
    need 150 "profile ours" && {
      timeout 300 $NCU "${NCU_FLAGS[@]}" --log-file $L/ncu_ours.csv $RUN run --model resnet101 --backend cuda \
        --precision ${PROFILE_PRECISION:-bf16} --micro-batch $MB --steps 4 --warmup-steps 1 --force "${CLUSTER[@]}" \
        > "$L/ncu_ours.log" 2>&1; rc=$?
      python3 bench/resnet/kernel_profile.py $L/ncu_ours.csv --top 30 --json $L/profile_ours.json > $L/profile_ours.txt 2>&1
      say "profile ours rc=$rc: $(head -1 $L/profile_ours.txt)"; cat $L/profile_ours.txt
    }
    need 150 "profile peer" && {
      timeout 300 $NCU "${NCU_FLAGS[@]}" --log-file $L/ncu_peer.csv python3 bench/resnet/ddp_peer.py --micro-batch $MB \
        --steps 3 --warmup 2 --precision ${PROFILE_PRECISION:-bf16} > "$L/ncu_peer.log" 2>&1; rc=$?
      python3 bench/resnet/kernel_profile.py $L/ncu_peer.csv --top 30 --json $L/profile_peer.json > $L/profile_peer.txt 2>&1
      say "profile peer rc=$rc: $(head -1 $L/profile_peer.txt)"; cat $L/profile_peer.txt
    }
  fi
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

if has probe; then
  need 60 "probe" && {
    CUDA_VISIBLE_DEVICES=0 timeout 120 $RUN run --model resnet101 --backend cuda --precision fp16 --gpus 1 \
      --micro-batch $MB --steps 8 --warmup-steps 3 --stage 0 --cluster h200x1 --force --report $L/probe_1gpu.json \
      > "$L/probe_1gpu.log" 2>&1
    say "probe 1 GPU rc=$?: $(grep -E 'resident|samples/s' "$L/probe_1gpu.log" | tr -s ' ' | tr '\n' ';' | cut -c1-300)"
  }
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
