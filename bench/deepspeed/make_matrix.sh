#!/bin/bash
# Writes the DeepSpeed configs of issue 13's matrix with `zeroplan plan --emit-ds-config` (the config a user gets for
# each plan) into bench/deepspeed/matrix/, and the list bench/deepspeed/device_matrix.sh runs, matrix.txt, in
# priority order (PART 1 first: the issue's own rows again, so the harness is checked against them; then the
# offload rows with 16 and 1 CPU threads per rank, ResNet-101, GPT-2 350M, fp16, accumulation 4, one GPU).
#   usage: bash bench/deepspeed/make_matrix.sh [ZEROPLAN_BINARY (default build/cli/zeroplan)]
# Matrix (issue 13): stages 0-3 x bf16/fp16 x offload none / optimizer on CPU / optimizer and parameters on CPU
# x gradient accumulation 1 and 4, on 1 and 2 GPUs, for GPT-2 1.5B and 350M; ResNet-101 (CIFAR-10 shapes,
# micro-batch 128, fp16) over the same plans.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
zeroplan="${1:-$repo/build/cli/zeroplan}"
matrix="$here/matrix"
rm -rf "$matrix"
mkdir -p "$matrix"
list="$here/matrix.txt"
echo "# PART NAME MODEL PLANNER_MODEL GPUS CONFIG OMP_THREADS (written by make_matrix.sh)" > "$list"

plans=("0 none none" "1 none none" "1 cpu none" "2 none none" "2 cpu none" "3 none none" "3 cpu none" "3 cpu cpu")
emit() {  # part name model planner_model gpus precision micro accumulation stage opt param threads [cluster]
  local part=$1 name=$2 model=$3 planner=$4 gpus=$5 precision=$6 micro=$7 accumulation=$8 stage=$9 opt=${10}
  local param=${11} threads=${12} cluster=${13:-h200x2}
  local config="bench/deepspeed/matrix/$name.json"
  local seq=()
  [ "$model" != resnet101 ] && seq=(--seq 1024)
  # Without offload the GPU steps with torch's AdamW, as issue 13's rows did; with the optimizer offloaded,
  # DeepSpeedCPUAdam, as issue 12's rows did: with torch_adam true DeepSpeed would step the host partition with
  # torch.optim.AdamW on CPU tensors instead (engine.py _configure_basic_optimizer), 2.6-3.9x slower.
  local base="$here/base_torch_adam.json"
  [ "$opt" != none ] && base="$here/base_cpu_adam.json"
  "$zeroplan" plan --model "$planner" --cluster "$cluster" --gpus "$gpus" --ds-config "$base" \
    "${seq[@]}" --precision "$precision" --micro-batch "$micro" --grad-accum "$accumulation" --stage "$stage" \
    --offload-optimizer "$opt" --offload-param "$param" --emit-ds-config "$repo/$config" --overwrite \
    --format json > /dev/null || true  # the exit status says whether the plan fits; the config is written anyway
  [ -f "$repo/$config" ] || { echo "no config written for $name" >&2; exit 1; }
  echo "$part $name $model $planner $gpus $config $threads" >> "$list"
}
label() { local s=$1 o=$2 p=$3; local l="s$s"; [ "$o" != none ] && l="$l-opt$o"; [ "$p" != none ] && l="$l-param$p"; echo "$l"; }

gpt2_15b="bench/deepspeed/models/gpt2-1.5b-v50304.json"
gpt2_350m="bench/deepspeed/models/gpt2-350m-v50304.json"
# Part 1: issue 13's four rows, and issue 12's offload rows at 16 threads per rank.
for plan in "0 none none" "1 none none" "2 none none" "3 none none" "2 cpu none" "3 cpu none" "3 cpu cpu"; do
  read -r s o p <<< "$plan"
  emit 1 "gpt2-1.5b_bf16_2gpu_a1_$(label $s $o $p)_t16" "$gpt2_15b" "$gpt2_15b" 2 bf16 8 1 "$s" "$o" "$p" 16
done
# Part 2: the offload rows at torchrun's one thread per rank; ResNet-101 on CIFAR-10 shapes.
for plan in "2 cpu none" "3 cpu none" "3 cpu cpu"; do
  read -r s o p <<< "$plan"
  emit 2 "gpt2-1.5b_bf16_2gpu_a1_$(label $s $o $p)_t1" "$gpt2_15b" "$gpt2_15b" 2 bf16 8 1 "$s" "$o" "$p" 1
done
for plan in "3 cpu none" "0 none none" "2 none none" "3 none none"; do
  read -r s o p <<< "$plan"
  emit 2 "resnet101_fp16_2gpu_a1_$(label $s $o $p)_t16" resnet101 resnet101 2 fp16 128 1 "$s" "$o" "$p" 16
done
# Part 3: GPT-2 350M, and 1.5B in fp16, without offload.
for plan in "0 none none" "1 none none" "2 none none" "3 none none"; do
  read -r s o p <<< "$plan"
  emit 3 "gpt2-350m_bf16_2gpu_a1_$(label $s $o $p)_t16" "$gpt2_350m" "$gpt2_350m" 2 bf16 8 1 "$s" "$o" "$p" 16
  emit 3 "gpt2-1.5b_fp16_2gpu_a1_$(label $s $o $p)_t16" "$gpt2_15b" "$gpt2_15b" 2 fp16 8 1 "$s" "$o" "$p" 16
done
# Part x4 (issue 36): four GPUs (nvidia-h200-x4, 64 cores: 16 CPU Adam threads per rank), planned on h200x4.
for plan in "0 none none" "1 none none" "2 none none" "3 none none" "2 cpu none" "3 cpu none" "3 cpu cpu"; do
  read -r s o p <<< "$plan"
  emit x4 "gpt2-1.5b_bf16_4gpu_a1_$(label $s $o $p)_t16" "$gpt2_15b" "$gpt2_15b" 4 bf16 8 1 "$s" "$o" "$p" 16 h200x4
done
for plan in "0 none none" "2 none none" "3 cpu none"; do
  read -r s o p <<< "$plan"
  emit x4 "resnet101_fp16_4gpu_a1_$(label $s $o $p)_t16" resnet101 resnet101 4 fp16 128 1 "$s" "$o" "$p" 16 h200x4
done
# Part 4: accumulation 4 and one GPU, bf16 1.5B.
for plan in "0 none none" "1 none none" "2 none none" "3 none none"; do
  read -r s o p <<< "$plan"
  emit 4 "gpt2-1.5b_bf16_2gpu_a4_$(label $s $o $p)_t16" "$gpt2_15b" "$gpt2_15b" 2 bf16 8 4 "$s" "$o" "$p" 16
  emit 4 "gpt2-1.5b_bf16_1gpu_a1_$(label $s $o $p)_t32" "$gpt2_15b" "$gpt2_15b" 1 bf16 8 1 "$s" "$o" "$p" 32
done
# Part 5 on: the rest of the matrix.
part=5
count=0
for model in gpt2-1.5b gpt2-350m resnet101; do
  for precision in bf16 fp16; do
    [ "$model" = resnet101 ] && [ "$precision" = bf16 ] && continue
    for gpus in 2 1; do
      for accumulation in 1 4; do
        for plan in "${plans[@]}"; do
          read -r s o p <<< "$plan"
          threads=$((32 / gpus))
          name="${model}_${precision}_${gpus}gpu_a${accumulation}_$(label $s $o $p)_t$threads"
          grep -q " $name " "$list" && continue
          case $model in
            gpt2-1.5b) path=$gpt2_15b; micro=8 ;;
            gpt2-350m) path=$gpt2_350m; micro=8 ;;
            resnet101) path=resnet101; micro=128 ;;
          esac
          emit "$part" "$name" "$path" "$path" "$gpus" "$precision" "$micro" "$accumulation" "$s" "$o" "$p" "$threads"
          count=$((count + 1))
          if [ $((count % 12)) -eq 0 ]; then part=$((part + 1)); fi
        done
      done
    done
  done
done
echo "$(grep -vc '^#' "$list") runs in $list, $(ls "$matrix" | wc -l) configs in $matrix"
