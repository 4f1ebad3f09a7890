#!/usr/bin/env bash
# zeroplan's Llama path on a GPU machine, in one device call (N = the machine's GPUs); carry
# ["bench/deps", "bench/deepspeed/wheels", "bench/llama/wheels"]:
#   run(command="PARTS='build tests correct speed' bash bench/llama/device_llama.sh", carry=[...], kind="nvidia-h200-x2")
# PARTS (default "build tests correct speed"):
#   build    the CLI and the GPU tests in build-dev (bench/exec/device_common.sh's configuration)
#   tests    the executor's GPU tests (kernels against the CPU reference, whole steps; GTEST_FILTER), beside `correct`
#            on the last GPU, else on every GPU
#   correct  transformers (bench/llama/hf_reference.py make: LlamaForCausalLM / Qwen2ForCausalLM, eager, fp32 and
#            bf16) against `zeroplan run --init-from` on the same weights and tokens, step 1's loss and every
#            parameter's gradient (--save-grads), for TinyLlama-, Llama-3- and Qwen2-shaped configs; then an
#            exported checkpoint loaded by LlamaForCausalLM.from_pretrained gives the same loss
#   speed    TinyLlama 1.1B, micro-batch 4 x 2048, bf16, stages 0-3 on N GPUs beside their plans (SPEED_STAGES), each
#            median step traced beside its plan (speed_sK.trace.json, `zeroplan run --trace`)
#   peers    bench/llama/hf_peer.py on N GPUs in the same call (PEER_MODES; default ddp fsdp2 fsdp2_compile ds_s3)
#   big      Llama-2 7B, micro-batch 2 x 2048, stage 3, with and without the optimizer on the CPU (BIG_ROWS)
#   bigpeers bench/llama/hf_peer.py on Llama-2 7B, micro-batch 2 x 2048, on N GPUs (BIG_PEER_MODES; default fsdp2_compile
#            fsdp2 ds_s3 ds_s3_optcpu: DeepSpeed stage 3, with and without DeepSpeedCPUAdam, the cores over the ranks;
#            fsdp2_optcpu / fsdp2_compile_optcpu: FSDP2's CPUOffloadPolicy, the step on the CPU)
#   attention  the executor's attention kernels (bench/attention_benchmark.cu) against cuDNN's fused attention and
#            FlashAttention-2 through PyTorch's SDPA (bench/llama/attention_peer.py) at GPT-2's and Llama's shapes
#            (ATTENTION_SHAPES, default all), forward and backward, one GPU, before the GPU tests start
# Logs in $OUT/logs.tar.gz, the summary printed last and kept in $OUT/summary.txt.
DEFAULT_PARTS="build tests correct speed" LOG_NAME=llama
source bench/device_call.sh
# The machine's own description (configs/clusters/h200xN.json): without --cluster a run plans on the default
# (h200x4, resized), whose runtime section is not this host's.
CLUSTER=(--cluster h200x$N)
C=bench/llama/configs
R="python3 bench/llama/hf_reference.py"
W=/tmp/llama-work
site=/tmp/llama-site
if [ ! -d $site ] && { [ -d bench/deepspeed/wheels ] || [ -d bench/llama/wheels ]; }; then
  wheels=()
  for w in bench/deepspeed/wheels/*.whl bench/llama/wheels/*.whl; do
    [ -f "$w" ] || continue
    case $(basename "$w") in numpy-*) python3 -c "import numpy" 2>/dev/null && continue ;; esac
    wheels+=("$w")
  done
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $site "${wheels[@]}" \
    > "$L/install.log" 2>&1 || say "wheel install FAILED"
fi
[ -d $site ] && export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"

if has build; then
  targets=(zeroplan)
  has tests && targets+=(zeroplan_exec_cuda_tests)
  has attention && { targets+=(attention_benchmark); export BUILD_BENCHMARKS=ON; }
  build_dev "${targets[@]}"
fi

# Attention kernels, ours and cuDNN's / FlashAttention-2's, timed alone on GPU 0 (nothing else running on it).
if has attention && need 60 "attention"; then
  shapes=${ATTENTION_SHAPES:+--shapes $ATTENTION_SHAPES}
  CUDA_VISIBLE_DEVICES=0 timeout 120 $BUILD/bench/attention_benchmark $shapes > "$L/attention_ours.jsonl" 2> "$L/attention_ours.err" \
    || say "attention_benchmark FAILED: $(tail -2 "$L/attention_ours.err" | tr '\n' ' ')"
  CUDA_VISIBLE_DEVICES=0 timeout 180 python3 bench/llama/attention_peer.py --shapes "$L/attention_ours.jsonl" \
    > "$L/attention_peer.jsonl" 2> "$L/attention_peer.err" || say "attention_peer.py FAILED: $(tail -2 "$L/attention_peer.err" | tr '\n' ' ')"
  say "$(python3 bench/llama/attention_summary.py "$L/attention_ours.jsonl" "$L/attention_peer.jsonl" 2>&1)"
fi

# The GPU tests run on the last GPU while the correctness checks use the first (both are small).
tests_pid=""
if has tests; then
  # Beside `correct` (GPU 0) on the last GPU alone; otherwise on every GPU (the two-GPU tests need two).
  visible=$(seq -s, 0 $((N - 1))); has correct && visible=$((N - 1))
  CUDA_VISIBLE_DEVICES=$visible GTEST_FILTER=${GTEST_FILTER:-*} timeout 240 $BUILD/tests/exec/zeroplan_exec_cuda_tests \
    > "$L/gpu_tests.log" 2>&1 &
  tests_pid=$!
fi
tests_done() {
  [ -z "$tests_pid" ] && return
  wait $tests_pid; local rc=$?
  grep -E "^\[  FAILED|Failure" "$L/gpu_tests.log" | head -30
  say "gpu tests rc=$rc: $(grep -c '\[       OK' "$L/gpu_tests.log") ok, $(grep -c '^\[  FAILED' "$L/gpu_tests.log") failed lines: $(grep '^\[  FAILED' "$L/gpu_tests.log" | head -8 | cut -c14-80 | tr '\n' ' ')"
  tests_pid=""
}

# ours: zeroplan run on one GPU from a `make` folder: the same weights, tokens, batch; step 1's gradients saved
ours() {  # folder, precision, extra flags...
  local dir=$1 prec=$2; shift 2
  local B T; B=$(python3 -c "import json; print(json.load(open('$dir/reference.json'))['batch'])")
  T=$(python3 -c "import json; print(json.load(open('$dir/reference.json'))['seq'])")
  CUDA_VISIBLE_DEVICES=0 timeout 120 $RUN run --model $dir/config.json --init-from $dir --data $dir/tokens.bin --micro-batch $B --seq $T \
    --steps 1 --warmup-steps 0 --precision $prec --gpus 1 --deterministic --force --save-grads $dir/ours_$prec.safetensors "$@" \
    > "$dir/ours_$prec.log" 2>&1
  local rc=$?
  grep -oE 'loss [0-9.]+' "$dir/ours_$prec.log" | head -1 | cut -d' ' -f2
  return $rc
}
if has correct; then
  rm -rf $W; mkdir -p $W
  for cfg in tiny-tinyllama tiny-llama3 tiny-qwen2; do
    need 60 "correctness $cfg" || break
    CUDA_VISIBLE_DEVICES=0 $R make --config $C/$cfg.json --out $W/$cfg --batch 2 --seq 256 > "$L/make_$cfg.log" 2>&1 || { say "make $cfg FAILED: $(tail -2 "$L/make_$cfg.log" | tr '\n' ' ')"; continue; }
    loss=$(ours $W/$cfg fp32); rc=$?
    cp $W/$cfg/ours_fp32.log "$L/ours_fp32_$cfg.log"
    [ $rc -ne 0 ] && { say "ours $cfg fp32 FAILED rc=$rc: $(grep -iE 'error|zeroplan:' $W/$cfg/ours_fp32.log | head -2 | tr '\n' ' ')"; continue; }
    # our loss from the file we wrote (9 digits) rather than the table
    loss=$(python3 -c "
from safetensors import safe_open
with safe_open('$W/$cfg/ours_fp32.safetensors', 'np') as f: print(f.metadata()['loss'])")
    $R compare --ref $W/$cfg --ours $W/$cfg/ours_fp32.safetensors --loss $loss --json "$L/cmp_fp32_$cfg.json" > "$L/cmp_fp32_$cfg.log" 2>&1
    say "fp32 $cfg vs transformers rc=$? (0: within tolerance): $(tail -1 "$L/cmp_fp32_$cfg.log" | cut -c1-300)"
    # bf16: transformers in bf16 against ours in bf16, each against the fp32 reference (the first config only)
    [ $cfg = tiny-llama3 ] || continue
    CUDA_VISIBLE_DEVICES=0 $R make --config $C/$cfg.json --out $W/${cfg}_bf16 --batch 2 --seq 256 --dtype bf16 > "$L/make_${cfg}_bf16.log" 2>&1
    ours $W/$cfg bf16 > /dev/null; cp $W/$cfg/ours_bf16.log "$L/ours_bf16_$cfg.log"
    lb=$(python3 -c "
from safetensors import safe_open
with safe_open('$W/$cfg/ours_bf16.safetensors', 'np') as f: print(f.metadata()['loss'])" 2>/dev/null)
    lt=$(python3 -c "import json; print(json.load(open('$W/${cfg}_bf16/reference.json'))['loss'])" 2>/dev/null)
    $R compare --ref $W/$cfg --ours $W/$cfg/ours_bf16.safetensors --loss ${lb:-nan} --rtol 1 --max-rtol 100 --loss-rtol 1 --json "$L/cmp_bf16_ours_$cfg.json" > "$L/cmp_bf16_ours_$cfg.log" 2>&1
    $R compare --ref $W/$cfg --ours $W/${cfg}_bf16/grads.safetensors --loss ${lt:-nan} --rtol 1 --max-rtol 100 --loss-rtol 1 --json "$L/cmp_bf16_hf_$cfg.json" > "$L/cmp_bf16_hf_$cfg.log" 2>&1
    say "bf16 $cfg against the fp32 reference: ours $(tail -1 "$L/cmp_bf16_ours_$cfg.log" | cut -c1-200) | transformers bf16 $(tail -1 "$L/cmp_bf16_hf_$cfg.log" | cut -c1-200)"
  done
  # export: 2 steps saved, exported under transformers' names, loaded by from_pretrained: the same loss
  cfg=tiny-llama3; d=$W/$cfg
  export CUDA_VISIBLE_DEVICES=0
  if [ -d $d ] && need 60 "export check"; then
    timeout 120 $RUN run --model $d/config.json --init-from $d --data $d/tokens.bin --micro-batch 2 --seq 256 --steps 2 \
      --warmup-steps 0 --precision fp32 --gpus 1 --force --save-dir $W/ck > "$L/export_run.log" 2>&1
    mkdir -p $W/exported && cp $d/config.json $W/exported/
    $RUN export --checkpoint $W/ck --out $W/exported/model.safetensors --dtype fp32 > "$L/export.log" 2>&1
    # our loss on the exported weights: a fresh run from them (step 1's loss is the forward before any update)
    l2=$(timeout 120 $RUN run --model $d/config.json --init-from $W/exported --data $d/tokens.bin --micro-batch 2 \
      --seq 256 --steps 1 --warmup-steps 0 --precision fp32 --gpus 1 --deterministic --force \
      --save-grads $W/exported_grads.safetensors > "$L/export_ours.log" 2>&1 && python3 -c "
from safetensors import safe_open
with safe_open('$W/exported_grads.safetensors', 'np') as f: print(f.metadata()['loss'])")
    $R load-check --dir $W/exported --tokens $d/tokens.bin --batch 2 --seq 256 --expect-loss ${l2:-nan} > "$L/load_check.log" 2>&1
    say "export -> LlamaForCausalLM.from_pretrained rc=$? (ours on the export: $l2): $(head -2 "$L/load_check.log" | tr '\n' ' ' | cut -c1-300)"
  fi
  unset CUDA_VISIBLE_DEVICES
fi
tests_done

if has speed; then
  for s in ${SPEED_STAGES:-0 3 1 2}; do
    need 45 "TinyLlama stage $s" || break
    timeout 200 $RUN run --model $C/tinyllama-1.1b.json "${CLUSTER[@]}" --gpus $N --stage $s --micro-batch 4 --seq 2048 --precision bf16 \
      --steps ${STEPS:-12} --force --report "$L/speed_s$s.json" --trace "$L/speed_s$s.trace.json" > "$L/speed_s$s.log" 2>&1
    say "ours TinyLlama s$s rc=$?: $(grep -E '^  [0-9]+ tokens/s' "$L/speed_s$s.log" | cut -c1-90) | $(grep -E 'step .*predicted' "$L/speed_s$s.log" | head -1 | cut -c1-100) | $(grep -E 'total \(device view\)' "$L/speed_s$s.log" | tr -s ' ')"
  done
fi

# hf_peer.py's flags for a peer mode name: ds_sK is DeepSpeed at stage K, ds_sK_optcpu with DeepSpeedCPUAdam.
peer_args() {
  case $1 in
    ds_s*_optcpu) local stage=${1%_optcpu}; echo "--mode deepspeed --stage ${stage#ds_s} --offload-optimizer cpu" ;;
    fsdp2*_optcpu) echo "--mode ${1%_optcpu} --offload-optimizer cpu" ;;
    ds_s*) echo "--mode deepspeed --stage ${1#ds_s}" ;;
    *) echo "--mode $1" ;;
  esac
}
if has peers; then
  P="torchrun --nproc_per_node $N bench/llama/hf_peer.py --config $C/tinyllama-1.1b.json --micro-batch 4 --seq 2048 --steps 12 --warmup 4"
  for m in ${PEER_MODES:-fsdp2 fsdp2_compile ddp ds_s3}; do
    need 70 "peer $m" || break
    timeout 240 $P $(peer_args $m) > "$L/peer_$m.log" 2>&1
    say "peer $m rc=$?: $(grep '^{' "$L/peer_$m.log" | tail -1 | cut -c1-300)"
  done
fi

if has big; then
  for row in ${BIG_ROWS:-s3 s3_optcpu}; do
    need 90 "Llama-2 7B $row" || break
    extra=""; [ $row = s3_optcpu ] && extra="--offload-optimizer cpu"
    timeout 300 $RUN run --model $C/llama2-7b.json "${CLUSTER[@]}" --gpus $N --stage 3 $extra --micro-batch 2 --seq 2048 --precision bf16 \
      --steps 8 --force --report "$L/big_$row.json" --trace "$L/big_$row.trace.json" > "$L/big_$row.log" 2>&1
    say "ours Llama-2 7B $row rc=$?: $(grep -E '^  [0-9]+ tokens/s' "$L/big_$row.log" | cut -c1-100) | $(grep -E 'step .*predicted' "$L/big_$row.log" | head -1 | cut -c1-100) | $(grep -E 'total \(device view\)' "$L/big_$row.log" | tr -s ' ')"
  done
fi

if has bigpeers; then
  P="torchrun --nproc_per_node $N bench/llama/hf_peer.py --config $C/llama2-7b.json --micro-batch 2 --seq 2048 --steps 8 --warmup 3"
  for m in ${BIG_PEER_MODES:-fsdp2_compile fsdp2 ds_s3 ds_s3_optcpu}; do
    need 100 "Llama-2 7B peer $m" || break
    OMP_NUM_THREADS=$(( $(nproc) / N )) timeout 300 $P $(peer_args $m) > "$L/bigpeer_$m.log" 2>&1
    say "peer Llama-2 7B $m rc=$?: $(grep '^{' "$L/bigpeer_$m.log" | tail -1 | cut -c1-300)"
  done
fi
