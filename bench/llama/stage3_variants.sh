#!/usr/bin/env bash
# Llama at stage 3 taken apart by variants, in one device call (issue 35: Llama-2 7B at stage 3 runs 1.2x FSDP2 +
# compile on 2x H200 where the goal is 1.3x, with ~3 ms of exposed communication a step: the collectives' kernels
# run beside the GEMMs on the same SMs). Each variant is one `zeroplan run` (bf16) with NCCL settings or flags
# beside the model, its median step traced beside the plan's (`zeroplan run --trace`: $name.trace.json, and .rank1
# for the second GPU, in the logs):
#   run(command="bash bench/llama/stage3_variants.sh", kind="nvidia-h200-x2", carry=["bench/deps"])
# VARIANTS lines: name|environment|model|flags (model: a config under bench/llama/configs, else a bundled model name
# or a path; flags with --gpus K run on K of the machine's GPUs, with CUDA_VISIBLE_DEVICES in the environment).
DEFAULT_PARTS="build variants" LOG_NAME=l3var
source bench/device_call.sh
C=bench/llama/configs
has build && build_dev zeroplan
BIG="--micro-batch 2 --seq 2048 --stage 3"
SMALL="--micro-batch 4 --seq 2048 --stage 3"
VARIANTS=${VARIANTS:-"l7_s3||llama2-7b.json|$BIG
l7_s3_cta16|NCCL_MAX_CTAS=16|llama2-7b.json|$BIG
l7_s3_cta8|NCCL_MAX_CTAS=8|llama2-7b.json|$BIG
l7_s3_cta4|NCCL_MAX_CTAS=4|llama2-7b.json|$BIG
tl_s3||tinyllama-1.1b.json|$SMALL
tl_s3_cta8|NCCL_MAX_CTAS=8|tinyllama-1.1b.json|$SMALL"}
if has variants; then
  while IFS='|' read -r name envs model flags; do
    [ -z "$name" ] && continue
    need 70 "variant $name" || break
    m=$model; [ -f "$C/$model" ] && m=$C/$model
    gpus="--gpus $N"; [[ " $flags " == *" --gpus "* ]] && gpus=""  # a variant may run on fewer GPUs
    env $envs timeout 200 $RUN run --model $m --cluster h200x$N $gpus --precision bf16 $flags \
      --steps ${STEPS:-10} --force --report $L/$name.json --trace $L/$name.trace.json > "$L/$name.log" 2>&1
    rc=$?
    say "$name rc=$rc [$envs $flags]: $(grep -E '^  (step .*predicted|forward .*backward|exposed|reduce_scatter|all_gather)|^  [0-9]+ tokens/s' "$L/$name.log" | sed -E 's/ +/ /g' | tr '\n' ';' | cut -c1-600)"
  done <<< "$VARIANTS"
fi
