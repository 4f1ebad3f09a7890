#!/usr/bin/env bash
# "transformers + DeepSpeed" beside the planner's DeepSpeed engine, in one device call (N = the machine's GPUs):
#   run(command="DEADLINE=540 bash bench/deepspeed/device_hf_matrix.sh",
#       carry=[".gl", "bench/deps", "bench/deepspeed/wheels", "bench/lora/wheels"])
# For each row of HF_ROWS: `zeroplan plan` (the default DeepSpeed engine, -f json kept) writes the row's DeepSpeed
# config (--emit-ds-config), then bench/deepspeed/ds_peer.py trains the Hugging Face config.json with it under
# torchrun on N GPUs (transformers from_config, sdpa, bf16; zero.Init at stage 3; peft LoRA / bitsandbytes QLoRA
# where the row says) and measures device used (peak of cudaMemGetInfo total - free) and the step. Printed last:
# one line per row, predicted vs measured device used (GiB) and step (ms) with the errors.
# PARTS (default "build rows"): build = the CLI (build_dev zeroplan); rows = the rows. Without build, an existing
# build-dev/cli/zeroplan or build/cli/zeroplan is used.
# HF_ROWS: row names (default below, most valuable first); STEPS (8) measured steps after WARMUP (3).
# PROFILE=1: each row also profiles one step after its figures (ds_peer.py --profile: phases synchronised, and
# torch.profiler's 45 largest operators by CPU and by GPU time) into results.tar.gz as hf_ROW.profile.txt.
# MEMTRACE=1: each row also records the caching allocator's history (ds_peer.py --memory-trace) into results.tar.gz
# as hf_ROW.memtrace.json, for bench/deepspeed/memtrace_replay.py (the reserve above the allocated peak);
# MEMTRACE_FROM_START=1 records from before deepspeed.initialize (where the first step's lazy states land).
# $OUT holds four files (a call brings back 8 at most): summary.txt, table.txt, logs.tar.gz and results.tar.gz,
# rewritten after every row: each row's ds_peer JSON (hf_ROW.json, the bench/deepspeed/results/ schema), its plan
# JSON (ROW.plan.json) and its DeepSpeed config at the path the JSON names (bench/deepspeed/matrix/hf-CLUSTER/ROW.json,
# written in the working tree there). Store them: tar xzf results.tar.gz -C <repo> (the configs), then move
# hf_*.json into bench/deepspeed/results/ (see README.md).
DEFAULT_PARTS="build rows" LOG_NAME=hf_ds
source bench/device_call.sh
HF_ROWS=${HF_ROWS:-tl_s0 tl_s1 tl_s2 tl_s3 tl_s2o tl_s3_gc q05_s0 q05_s3 tl_lora_s0 tl_lora_s3 tl_qlora_s0}
STEPS=${STEPS:-8}
WARMUP=${WARMUP:-3}
CLUSTER=h200x$N
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100 && CLUSTER=h100x1
THREADS=$(( $(nproc) / N )); [ $THREADS -gt 16 ] && THREADS=16  # CPU Adam threads per rank (offload rows)
W=/tmp/hf-ds-work
CONFIGS=bench/deepspeed/matrix/hf-$CLUSTER  # the DeepSpeed configs, where the results JSON names them
mkdir -p $CONFIGS $W/pack/$CONFIGS
pack() { tar czf "$FINAL_OUT/results.tar.gz" -C $W/pack . ; }

has build && build_dev zeroplan
[ -x "$RUN" ] || RUN=build/cli/zeroplan
[ -x "$RUN" ] || { say "no zeroplan CLI (PARTS without build and no build-dev/cli/zeroplan)"; exit 1; }

# DeepSpeed 0.19.8 and its dependencies from the carried wheels (the machine's numpy kept), bitsandbytes 0.50 too.
install_wheels /tmp/hfds-site "no wheels in bench/deepspeed/wheels (carry it): DeepSpeed must already be installed" \
  bench/deepspeed/wheels/*.whl bench/lora/wheels/bitsandbytes-*.whl
python_versions torch transformers peft deepspeed

TL=bench/llama/configs/tinyllama-1.1b.json
Q05=bench/llama/configs/qwen2-0.5b.json
L7=bench/llama/configs/llama2-7b.json
L3=bench/llama/configs/llama3-8b.json
M7=bench/llama/configs/mistral-7b.json
Q15=bench/llama/configs/qwen2-1.5b.json
L13=bench/llama/configs/llama2-13b.json
LORA="--lora-rank 16 --lora-alpha 32 --lora-targets q_proj,k_proj,v_proj,o_proj"
# A row: MODEL|plan flags (stage, offload, checkpointing, LoRA)|ds_peer flags|seconds it is given (timeout)|
# seconds left that it needs to start (need)|micro-batch (default 4). Every row bf16, seq 2048, 3 + 8 steps. Expected
# ~30-40 s a row (torchrun and imports ~15 s, the model built on the GPU or under zero.Init, initialize, 11 steps
# of 0.1-0.7 s, two host probes); the first row also compiles DeepSpeed's fused Adam (JIT, cached for the rest),
# the offload row its CPU Adam, the QLoRA row first writes its bf16 base checkpoint: ~+30-60 s each. All eleven:
# ~400-450 s on one H200 after the ~50 s build; the last rows are skipped (and said) when the deadline nears.
row_spec() {
  case $1 in
    tl_s0)       echo "$TL|--stage 0||180|90" ;;
    tl_s1)       echo "$TL|--stage 1||120|40" ;;
    tl_s2)       echo "$TL|--stage 2||120|40" ;;
    tl_s3)       echo "$TL|--stage 3||120|40" ;;
    tl_s2o)      echo "$TL|--stage 2 --offload-optimizer cpu||180|90" ;;
    tl_s3_gc)    echo "$TL|--stage 3 --checkpointing full|--gradient-checkpointing|120|40" ;;
    tl_s0_gc)    echo "$TL|--stage 0 --checkpointing full|--gradient-checkpointing|120|40" ;;
    tl_s3o)      echo "$TL|--stage 3 --offload-optimizer cpu||200|150" ;;
    q05_s0)      echo "$Q05|--stage 0||120|35" ;;
    q05_s3)      echo "$Q05|--stage 3||120|35" ;;
    tl_lora_s0)  echo "$TL|--stage 0 $LORA|$LORA|120|40" ;;
    tl_lora_s3)  echo "$TL|--stage 3 $LORA|$LORA|120|40" ;;
    tl_qlora_s0) echo "$TL|--stage 0 $LORA --quantize-base nf4|$LORA --quantize-base nf4 --base-dir $W/base_tl|150|60" ;;
    q15_s0)      echo "$Q15|--stage 0||120|40" ;;
    q15_s3)      echo "$Q15|--stage 3||120|40" ;;
    # Mistral-7B (GQA 32/8, sliding window 4096 > the sequence) and Llama-3-8B (vocabulary 128,256), LoRA.
    m7_lora_s0)  echo "$M7|--stage 0 $LORA|$LORA|200|110" ;;
    m7_qlora_s0) echo "$M7|--stage 0 $LORA --quantize-base nf4|$LORA --quantize-base nf4 --base-dir $W/base_m7|300|220" ;;
    l3_lora_s0)  echo "$L3|--stage 0 $LORA|$LORA|200|110" ;;
    # Llama-2 7B: built on the GPU (~15 s); its QLoRA base (13.5 GB bf16) is written to local disk first.
    l7_lora_s0)  echo "$L7|--stage 0 $LORA|$LORA|200|110" ;;
    l7_qlora_s0) echo "$L7|--stage 0 $LORA --quantize-base nf4|$LORA --quantize-base nf4 --base-dir $W/base_l7|300|220" ;;
    # Llama-2 7B full fine-tuning on two H200 (planned 127 and 66 GiB a GPU at micro-batch 4): under zero.Init.
    l7_s3)       echo "$L7|--stage 3||240|150" ;;
    l7_s3o)      echo "$L7|--stage 3 --offload-optimizer cpu||300|220" ;;
    # Llama-2 13B on two H200: stage 3 at micro-batch 1 (planned 125.6 GiB a GPU), and with DeepSpeedCPUAdam at 4
    # (planned 93.8 GiB a GPU and 235.5 GiB of the node's 251.8 GiB host memory; ~8 s a step).
    m7_s3)       echo "$M7|--stage 3||240|150" ;;
    l13_s3)      echo "$L13|--stage 3||300|200|1" ;;
    l13_s3o)     echo "$L13|--stage 3 --offload-optimizer cpu||540|400|4" ;;
    *) return 1 ;;
  esac
}

rows_done=()
if has rows; then
  for row in $HF_ROWS; do
    spec=$(row_spec $row) || { say "$row: unknown row (see row_spec in bench/deepspeed/device_hf_matrix.sh)"; continue; }
    IFS='|' read -r model plan_flags peer_flags limit expect micro_batch <<< "$spec"
    need $expect "row $row (~$expect s)" || continue
    left=$(( $(time_left) - 15 )); [ $left -lt $limit ] && limit=$left
    # The optimizer as bench/deepspeed/make_matrix.sh gives the GPT-2 rows: torch's AdamW on the GPU (torch_adam; the
    # default FusedAdam is a JIT build, whose arch parsing fails on torch 2.11's "9.0a"), DeepSpeedCPUAdam offloaded.
    base=bench/deepspeed/base_torch_adam.json
    [[ "$plan_flags" == *"--offload-optimizer cpu"* ]] && base=bench/deepspeed/base_cpu_adam.json
    flags="--model $model --ds-config $base --micro-batch ${micro_batch:-4} --seq 2048 --precision bf16 --gpus $N --cluster $CLUSTER $plan_flags --cpu-threads-per-rank $THREADS"
    ds=$CONFIGS/$row.json
    rm -f $ds
    timeout 60 $RUN plan $flags --emit-ds-config $ds --overwrite -f json > $W/$row.plan.json 2> "$L/$row.plan.log"; rc=$?
    cp $W/$row.plan.json $W/pack/ 2>/dev/null; cp $ds $W/pack/$CONFIGS/ 2>/dev/null
    if [ $rc -ne 0 ] || [ ! -f $ds ]; then
      say "$row: plan FAILED rc=$rc: $(grep -iE 'error|zeroplan' "$L/$row.plan.log" | head -2 | tr '\n' ' ' | cut -c1-200)"; continue
    fi
    t0=$(date +%s)
    # shellcheck disable=SC2086  # the flags are words
    OMP_NUM_THREADS=$THREADS timeout $limit torchrun --standalone --nproc_per_node=$N bench/deepspeed/ds_peer.py \
      --model $model --ds-config $ds --cluster $CLUSTER --seq 2048 --steps $STEPS --warmup $WARMUP \
      $peer_flags ${MEMTRACE:+--memory-trace $W/pack/hf_$row.memtrace.json} ${MEMTRACE_FROM_START:+--memory-trace-from-start} \
      ${PROFILE:+--profile $W/pack/hf_$row.profile.txt} \
      --name hf_$row --out $W/$row.json --planner-flags "$flags" --plan-json $W/$row.plan.json \
      > "$L/$row.log" 2>&1; rc=$?
    secs=$(( $(date +%s) - t0 ))
    if [ $rc -eq 0 ] && [ -f $W/$row.json ]; then
      cp $W/$row.json $W/pack/hf_$row.json
      rows_done+=("$row")
      say "$row: ran in $secs s"
    else
      why=$(grep -m2 -E 'Error|error:|OOM|out of memory|Killed' "$L/$row.log" | tr '\n' ' ' | cut -c1-220)
      [ $rc -eq 124 ] && why="ran past its $limit s ($why)"
      say "$row: FAILED rc=$rc after $secs s: $why"
    fi
    pack
  done
fi

# The table: predicted (plan JSON) vs measured (ds_peer JSON).
if [ ${#rows_done[@]} -gt 0 ]; then
  table=$(python3 - $W "${rows_done[@]}" <<'PY'
import json, os, sys
work, rows = sys.argv[1], sys.argv[2:]
gib = 2.0 ** 30
print(f"{'row':<12} {'device pred':>11} {'meas':>7} {'err':>7}   {'step pred':>9} {'meas':>8} {'err':>7}   "
      f"{'alloc':>6} {'host':>6}  trainable")
for row in rows:
    try:
        plan = json.load(open(os.path.join(work, row + ".plan.json")))["plans"][0]
        run = json.load(open(os.path.join(work, row + ".json")))["runs"][0]
    except Exception as e:  # noqa: BLE001 (one unreadable row does not lose the table)
        print(f"{row:<12} unreadable: {type(e).__name__}: {e}")
        continue
    m = run["measured"]
    device_pred = max(plan.get("timeline_peak_gpu_bytes") or plan["gpu_bytes"]["total"],
                      plan.get("init_peak_gpu_bytes") or 0) / gib
    step_pred = 1e3 * plan["step_seconds"]
    device, step = m["device_used_gib"], 1e3 * m["step_seconds"]
    lora = run.get("lora") or {}
    print(f"{row:<12} {device_pred:9.2f} G {device:7.2f} {100 * (device_pred / device - 1):+6.1f}%   "
          f"{step_pred:7.1f}ms {step:8.1f} {100 * (step_pred / step - 1):+6.1f}%   "
          f"{m['peak_allocated_gib']:6.2f} {m['host_gib_per_rank']:6.2f}  {lora.get('trainable_params', '')}")
PY
)
  echo "$table" > "$FINAL_OUT/table.txt"
  say "predicted (zeroplan plan, DeepSpeed engine, $CLUSTER) vs measured (ds_peer.py, $N GPU(s)); alloc/host GiB measured:"
  while IFS= read -r l; do say "  $l"; done <<< "$table"
fi
