#!/bin/bash
# The DeepSpeed matrix of issue 13 on the GPU machine (nvidia-h200-x2), one device command per part:
#   run(command="bash bench/deepspeed/device_matrix.sh 1", carry=["bench/deepspeed/wheels"], kind="nvidia-h200-x2")
# Installs the carried wheels (bench/deepspeed/build_wheels.sh) into bench/deepspeed/.site without network, then
# runs every line of matrix.txt of the PART given (make_matrix.sh wrote them, PART 1 first) under torchrun with
# bench/deepspeed/ds_peer.py, OMP_NUM_THREADS as the line says, until BUDGET seconds (default 540: a command may run
# 600) would be exceeded. Each run writes NAME.json in the schema of bench/deepspeed/results/ and NAME.log, packed into $OUT/part_PART.tar.gz;
# the last lines printed are one table row per run. Copy the JSON files into bench/deepspeed/results/ and
# tests/sim/deepspeed_measurements_test.cpp checks the planner against them.
#   usage: [PROFILE=1] [MEMTRACE=1] bash bench/deepspeed/device_matrix.sh PART [BUDGET_SECONDS [NAME_REGEX]]
set -uo pipefail
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on these machines (KINDS.md)
repo=$(cd "$(dirname "$0")/../.." && pwd)
final_out="${OUT:?set by the device tool: the folder whose files come back}"
# The runs write into a scratch folder packed at the end: a call brings back 8 files.
out=$(mktemp -d /tmp/ds-matrix.XXXX)
part="${1:?PART: which part of bench/deepspeed/matrix.txt to run}"
budget="${2:-540}"
only="${3:-}"  # an extended regular expression: only the part's rows whose names match it
# PROFILE=1: each run also writes NAME.profile.txt (ds_peer.py --profile: phases and torch.profiler tables).
# MEMTRACE=1: each run also writes NAME.memtrace.json (ds_peer.py --memory-trace: the caching allocator over 2 steps).
start=$(date +%s)
source "$repo/bench/deepspeed/install_wheels.sh"

{ nvidia-smi; nproc; free -g; python3 --version; } > "$out/machine.txt" 2>&1
ds_install_wheels "$out" || { cp "$out"/* "$final_out/" 2> /dev/null; exit 1; }
export PYTHONPATH="$PYTHONPATH:$repo/bench/exec"
python3 -c "import deepspeed, torch; print('DeepSpeed', deepspeed.__version__, 'torch', torch.__version__)" |
  tee "$out/versions.txt"

# The rows are planned on the description of the machine kind they run on: h200x2 on the two-GPU H200 machine (its
# GEMM curve measured through PyTorch, whose GEMMs DeepSpeed runs), h200x1 on the one-GPU H200 machine and h100x1 on
# the H100 (zeroplan calibrate on each, with DeepSpeed's terms): the one-GPU machines have 16 cores, the x2 machine
# 32, and the CPU optimizer's rate under offload is the host's (bench/deepspeed/results-pending/README.md). A call for
# an H200 kind may be given an H100.
gpus_here=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
cluster=h200x2
[ "$gpus_here" -eq 1 ] && cluster=h200x1
[ "$gpus_here" -eq 4 ] && cluster=h200x4
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100 && cluster=h100x1
summary="$out/summary.txt"
: > "$summary"
while read -r line_part name model planner_model gpus config threads; do
  [[ "$line_part" == "#"* || -z "$line_part" ]] && continue
  [ "$line_part" != "$part" ] && continue
  if [ -n "$only" ] && ! [[ "$name" =~ $only ]]; then continue; fi
  if [ "$gpus" -gt "$gpus_here" ]; then
    echo "$name: skipped, it needs $gpus GPUs and this machine has $gpus_here" >> "$summary"
    continue
  fi
  left=$((budget - ($(date +%s) - start)))
  if [ "$left" -lt 90 ]; then
    echo "budget spent: $name and the rest of part $part not run" | tee -a "$summary"
    break
  fi
  # The matrix's thread counts are the x2 host's (32 cores): on a host with fewer cores per rank the row runs with
  # what there is (cores / ranks), and ds_peer.py records the threads it ran with (cpu_threads_per_rank).
  cores_per_rank=$(( $(nproc) / gpus ))
  if [ "$threads" -gt "$cores_per_rank" ]; then
    echo "$name: $threads threads per rank asked, $cores_per_rank run ($(nproc) cores, $gpus ranks)" >> "$summary"
    threads=$cores_per_rank
  fi
  # A model is a description's path in the repo, or a name ds_peer.py builds itself (resnet101: torchvision).
  model_arg="$model"
  [ -f "$repo/$model" ] && model_arg="$repo/$model"
  t0=$(date +%s)
  OMP_NUM_THREADS="$threads" timeout "$left" torchrun --standalone --nproc_per_node="$gpus" \
    "$repo/bench/deepspeed/ds_peer.py" --model "$model_arg" --planner-model "$planner_model" \
    --ds-config "$repo/$config" --cluster "$cluster" --name "$name" --out "$out/$name.json" \
    ${PROFILE:+--profile "$out/$name.profile.txt"} ${MEMTRACE:+--memory-trace "$out/$name.memtrace.json"} \
    > "$out/$name.log" 2>&1
  status=$?
  if [ $status -eq 0 ] && [ -f "$out/$name.json" ]; then
    python3 - "$out/$name.json" "$(( $(date +%s) - t0 ))" >> "$summary" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))["runs"][0]
m = run["measured"]
print(f"{run['name']:<48} step {1e3 * m['step_seconds']:8.1f} ms  device {m['device_used_gib']:6.2f} GiB  "
      f"allocated {m['peak_allocated_gib']:6.2f} GiB  host {m['host_gib_per_rank']:6.2f} GiB/rank  ({sys.argv[2]} s)")
PY
  else
    echo "$name FAILED (status $status): $(grep -m1 -E 'Error|error|OOM|out of memory' "$out/$name.log" | cut -c1-160)" >> "$summary"
  fi
done < "$repo/bench/deepspeed/matrix.txt"
tar czf "$final_out/part_$part.tar.gz" -C "$out" .
cp "$summary" "$final_out/summary.txt"
echo "--- part $part ($(( $(date +%s) - start )) s) ---"
cat "$summary"
