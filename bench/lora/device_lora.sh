#!/usr/bin/env bash
# zeroplan's LoRA / QLoRA executor on a GPU machine (issue 38), in one device call (N = the machine's GPUs; one
# H200 is enough); carry ["bench/deps", "bench/lora/wheels"] (bitsandbytes 0.50's wheel: the GPU machine has
# torch, transformers and peft, not bitsandbytes):
#   run(command="DEADLINE=540 PARTS='build check speed' bash bench/lora/device_lora.sh", carry=[...])
# PARTS (default "build check speed"):
#   build  the CLI in build-dev (the configuration of bench/resnet/device_resnet.sh; + the GPU tests with `tests`)
#   tests  the executor's GPU tests whose names say LoRA or NF4 (GTEST_FILTER narrows or widens them)
#   check  correctness against peft, fp32, per config of CHECK_CONFIGS (default tiny-tinyllama: TinyLlama's
#          widths, 2 layers): bench/llama/hf_reference.py make writes the base (fp32, seeded) and the tokens;
#          `zeroplan run --init-from BASE --lora-rank 8 --lora-alpha 16` on every linear module (CHECK_TARGETS;
#          q/k/v share our fused QKV tensor and gate/up our fused FC, so all seven exercise every slice) for one
#          step at --lr 1e-30 from an adapter whose B is not zero (--init-adapter: three steps at lr 1e-3 exported
#          first, so that lora_A's gradients are not zero; the adapters do not move: what it saves is what step 1
#          ran with),
#          --save-grads; `zeroplan export --adapter`; bench/lora/lora_check.py loads base + adapter with
#          PeftModel.from_pretrained (fails on missing/unexpected keys or values), runs the same step and compares
#          the loss (rtol 1e-5) and every lora_A / lora_B gradient (rel L2 1e-4, max/max 1e-3). Variants
#          (CHECK_VARIANTS, default "cuda_s0 cuda_nf4 cpu_s0 cuda_s3"): cuda_sK = --backend cuda --stage K,
#          cpu_sK = the CPU backend, cuda_nf4 / cpu_nf4 = --quantize-base nf4 at stage 0 against peft on
#          bitsandbytes' 4-bit base with compute dtype fp32 (the same fp32 weights quantised by bitsandbytes: the
#          loss and gradients agree only as far as the two quantisations do; its line also gives how far
#          quantising moved the loss from the fp32 base's, the scale to read that against).
#   speed  rows (SPEED_ROWS, default "tl_lora tl_qlora l7_lora l7_qlora"): TinyLlama-1.1B micro-batch TL_MB (4) x
#          TL_SEQ (1024), Llama-2-7B L7_MB (2) x L7_SEQ (1024), bf16, LoRA r RANK (16) alpha ALPHA (32) on TARGETS
#          (q_proj,k_proj,v_proj,o_proj: the attention projections, the common LoRA recipe; PEFT's own default for
#          Llama is q_proj,v_proj), the *_qlora rows with --quantize-base nf4; stage 0 on N GPUs. Per row:
#          `zeroplan plan --engine zeroplan` and the default (DeepSpeed) engine's plan (the planner has no peft
#          engine), `zeroplan run --backend cuda --report`, and bench/lora/peft_peer.py (transformers + peft
#          + bitsandbytes, torchrun on N > 1 GPUs) in the same call; the table last (bench/lora/lora_summary.py).
# Every part is guarded by the call's deadline (DEADLINE seconds after the start, default 540) and every command by
# timeout. Logs in $OUT/logs.tar.gz, the speed figures in $OUT/lora_speed.json, the summary printed last and kept
# in $OUT/summary.txt.
DEFAULT_PARTS="build check speed" LOG_NAME=lora
source bench/device_call.sh
CLUSTER=(--cluster h200x$N)
[ -f configs/clusters/h200x$N.json ] || CLUSTER=(--cluster h200x4)  # resized to --gpus
C=bench/llama/configs
W=${WORK:-/tmp/lora-work}
mkdir -p $W
py_json() {  # FILE EXPR: print EXPR of the JSON document in FILE (as d), or nothing
  python3 -c "
import json, sys
try:
    d = json.load(open(sys.argv[1]))
    print($2)
except Exception as e:
    print('(unreadable: %s)' % type(e).__name__)" "$1" 2>/dev/null
}

# bitsandbytes 0.50 from its wheel (pure Python + its prebuilt CUDA libraries; needs only torch, numpy, packaging)
install_wheels /tmp/bnb-site "no bench/lora/wheels/bitsandbytes-0.50.0-*.whl (carry bench/lora/wheels): the nf4 rows will fail" \
  bench/lora/wheels/bitsandbytes-0.50.0-*.whl
python_versions torch transformers peft

if has build; then
  targets=(zeroplan); has tests && targets+=(zeroplan_exec_cuda_tests)
  build_dev "${targets[@]}"
fi
[ -x $RUN ] || { say "no $RUN: build first (PARTS='build ...')"; exit 1; }

has tests && gpu_tests '*Lora*:*LoRA*:*lora*:*Nf4*:*NF4*'

# ---------------------------------------------------------------------------------------------------- check
CHECK_LORA=(--lora-rank ${CHECK_RANK:-8} --lora-alpha ${CHECK_ALPHA:-16}
            --lora-targets ${CHECK_TARGETS:-q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj})
check_variant() {  # CONFIG BASE_DIR B T VARIANT
  local cfg=$1 base=$2 B=$3 T=$4 v=$5
  local out=$W/check/$cfg/$v backend=cuda stage=0 q=none tag=${cfg}_$v
  case $v in
    cuda_s[0-3]) stage=${v#cuda_s} ;;
    cpu_s[0-3]) backend=cpu; stage=${v#cpu_s} ;;
    cuda_nf4) q=nf4 ;;
    cpu_nf4) backend=cpu; q=nf4 ;;
    *) say "check: unknown variant $v (cuda_sK, cpu_sK, cuda_nf4, cpu_nf4)"; return ;;
  esac
  rm -rf "$out"; mkdir -p "$out"
  # The adapters the step starts from: PEFT's initialisation has B = 0, where every lora_A gradient is 0 in both
  # frameworks and checks nothing; three steps at lr 1e-3 move B off zero, and both start from that adapter
  # (ours through --init-adapter, peft through PeftModel.from_pretrained).
  CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=$(nproc) timeout 180 $RUN run --model $base/config.json --init-from $base \
    --data $base/tokens.bin --backend $backend --precision fp32 --gpus 1 --stage 0 "${CLUSTER[@]}" \
    --micro-batch $B --seq $T --steps 3 --warmup-steps 0 --lr 1e-3 --deterministic "${CHECK_LORA[@]}" \
    --quantize-base $q --save-dir $out/ck0 --force > "$L/ours_seed_$tag.log" 2>&1 &&
    timeout 60 $RUN export --checkpoint $out/ck0 --adapter $out/adapter0 >> "$L/ours_seed_$tag.log" 2>&1 || {
    say "check $tag: the starting adapter FAILED: $(grep -iE 'error' "$L/ours_seed_$tag.log" | head -2 | tr '\n' ' ' | cut -c1-300)"
    return; }
  CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=$(nproc) timeout 180 $RUN run --model $base/config.json --init-from $base \
    --data $base/tokens.bin --backend $backend --precision fp32 --gpus 1 --stage $stage "${CLUSTER[@]}" \
    --micro-batch $B --seq $T --steps 1 --warmup-steps 0 --lr 1e-30 --deterministic "${CHECK_LORA[@]}" \
    --quantize-base $q --init-adapter $out/adapter0 --save-dir $out/ck --save-grads $out/grads.safetensors --force \
    > "$L/ours_$tag.log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then
    say "check $tag: zeroplan run FAILED rc=$rc: $(grep -iE 'error' "$L/ours_$tag.log" | head -2 | tr '\n' ' ' | cut -c1-300)"
    return
  fi
  timeout 60 $RUN export --checkpoint $out/ck --adapter $out/adapter > "$L/export_$tag.log" 2>&1 || {
    say "check $tag: zeroplan export --adapter FAILED: $(tail -2 "$L/export_$tag.log" | tr '\n' ' ' | cut -c1-300)"; return; }
  cp $out/adapter/adapter_config.json "$L/adapter_config_$tag.json" 2>/dev/null
  CUDA_VISIBLE_DEVICES=0 timeout 240 python3 bench/lora/lora_check.py --base $base --adapter $out/adapter \
    --grads $out/grads.safetensors --quantize-base $q --work $out/peft --json "$L/check_$tag.json" \
    > "$L/check_$tag.log" 2>&1
  rc=$?
  say "check $tag rc=$rc (0 within tolerance, 1 outside, 2 names/shapes): $(py_json "$L/check_$tag.json" "
'loss ours %.8f peft %.8f rel %.2e | %s tensors compared, worst rel L2 %.2e (%s), worst max/max %.2e, %d outside | adapter: %d tensors, %d missing, %d unexpected, %d differing | peft vs the base alone %.2e' % (
 d['loss_ours'] or float('nan'), d['loss_peft'], d['loss_rel_err'] if d['loss_rel_err'] is not None else float('nan'),
 d['parameters_compared'], (d['worst_rel_l2'] or {}).get('value', float('nan')), (d['worst_rel_l2'] or {}).get('name', '-').replace('base_model.model.model.', ''),
 (d['worst_rel_max'] or {}).get('value', float('nan')), len(d['failed'] or []), d['adapter_load']['tensors'],
 len(d['adapter_load']['missing']), len(d['adapter_load']['unexpected']), len(d['adapter_load']['differing']),
 d['loss_peft_vs_base_rel'] if d['loss_peft_vs_base_rel'] is not None else float('nan'))")"
  [ $rc -ne 0 ] && say "    $(grep -E '^PROBLEM|Error|error' "$L/check_$tag.log" | head -3 | tr '\n' ' ' | cut -c1-400)"
  [ $q = nf4 ] && say "    $(grep -E '^nf4, layer' "$L/check_$tag.log" | tr '\n' ' ' | cut -c1-400)"
}
if has check; then
  for cfg in ${CHECK_CONFIGS:-tiny-tinyllama}; do
    need 90 "check $cfg" || break
    B=${CHECK_BATCH:-2}
    case $cfg in tiny-ci*) T=${CHECK_SEQ:-64} ;; *) T=${CHECK_SEQ:-256} ;; esac  # tiny-ci: 64 positions
    base=$W/check/$cfg/base
    rm -rf $W/check/$cfg; mkdir -p $W/check/$cfg
    CUDA_VISIBLE_DEVICES=0 timeout 180 python3 bench/llama/hf_reference.py make --config $C/$cfg.json --out $base \
      --batch $B --seq $T --dtype fp32 > "$L/make_$cfg.log" 2>&1 || {
      say "check $cfg: hf_reference make FAILED: $(tail -2 "$L/make_$cfg.log" | tr '\n' ' ' | cut -c1-300)"; continue; }
    for v in ${CHECK_VARIANTS:-cuda_s0 cuda_nf4 cpu_s0 cuda_s3}; do
      need 45 "check $cfg $v" || break
      check_variant $cfg $base $B $T $v
    done
  done
fi

# ---------------------------------------------------------------------------------------------------- speed
SPEED_LORA=(--lora-rank ${RANK:-16} --lora-alpha ${ALPHA:-32} --lora-targets ${TARGETS:-q_proj,k_proj,v_proj,o_proj})
row_spec() {  # ROW -> "model micro-batch seq quantize seconds-needed"
  case $1 in
    tl_lora) echo "tinyllama-1.1b ${TL_MB:-4} ${TL_SEQ:-1024} none 90" ;;
    tl_qlora) echo "tinyllama-1.1b ${TL_MB:-4} ${TL_SEQ:-1024} nf4 120" ;;
    l7_lora) echo "llama2-7b ${L7_MB:-2} ${L7_SEQ:-1024} none 150" ;;
    l7_qlora) echo "llama2-7b ${L7_MB:-2} ${L7_SEQ:-1024} nf4 240" ;;
    *) return 1 ;;
  esac
}
if has speed; then
  rows_done=()
  for row in ${SPEED_ROWS:-tl_lora tl_qlora l7_lora l7_qlora}; do
    spec=$(row_spec $row) || { say "speed: unknown row $row (tl_lora tl_qlora l7_lora l7_qlora)"; continue; }
    read -r model mb seq q secs <<< "$spec"
    need $secs "speed $row" || continue  # a later, shorter row may still fit
    common=(--model $C/$model.json "${CLUSTER[@]}" --gpus $N --stage 0 --micro-batch $mb --seq $seq --precision bf16
            "${SPEED_LORA[@]}" --quantize-base $q)
    timeout 60 $RUN plan "${common[@]}" --engine zeroplan --format json > "$L/plan_zp_$row.json" 2> "$L/plan_zp_$row.err" \
      || say "plan zp $row FAILED: $(head -2 "$L/plan_zp_$row.err" | tr '\n' ' ')"
    timeout 60 $RUN plan "${common[@]}" --format json > "$L/plan_ds_$row.json" 2> "$L/plan_ds_$row.err" \
      || say "plan ds $row FAILED: $(head -2 "$L/plan_ds_$row.err" | tr '\n' ' ')"
    timeout 240 $RUN run "${common[@]}" --backend cuda --steps ${STEPS:-12} --warmup-steps ${WARMUP:-3} --force \
      --report "$L/ours_$row.json" > "$L/ours_$row.log" 2>&1; rc=$?
    say "ours $row ($model mb $mb x $seq, $q) rc=$rc: $(grep -E '^  [0-9]+ tokens/s' "$L/ours_$row.log" | head -1 | cut -c1-90) | $(grep -E 'total \(device view\)' "$L/ours_$row.log" | head -1 | tr -s ' ' | cut -c1-120)"
    [ $rc -ne 0 ] && say "    $(grep -iE 'error' "$L/ours_$row.log" | head -2 | tr '\n' ' ' | cut -c1-300)"
    if [ $N -gt 1 ]; then launch=(torchrun --standalone --nproc_per_node=$N); else launch=(python3); fi
    timeout 300 "${launch[@]}" bench/lora/peft_peer.py --config $C/$model.json --quantize-base $q \
      --base-dir $W/base_$model --micro-batch $mb --seq $seq "${SPEED_LORA[@]}" --warmup 3 --steps ${PEER_STEPS:-10} \
      --name $row --json-out "$L/peft_$row.json" > "$L/peft_$row.log" 2>&1; rc=$?
    say "peft $row rc=$rc: $(py_json "$L/peft_$row.json" "'%.1f ms, %.0f tokens/s, device used %.2f GiB (allocated %.2f, reserved %.2f), %s' % (d['step_ms'], d['tokens_per_second'], d['device_used_peak_gib'], d['peak_allocated_gib'], d['peak_reserved_gib'], d['print_trainable_parameters'])")"
    [ $rc -ne 0 ] && say "    $(grep -E 'Error|error' "$L/peft_$row.log" | tail -3 | tr '\n' ' ' | cut -c1-400)"
    rows_done+=($row)
  done
  if [ ${#rows_done[@]} -gt 0 ]; then
    python3 bench/lora/lora_summary.py "$L" "${rows_done[@]}" --json "$FINAL_OUT/lora_speed.json" > "$L/lora_summary.txt" 2>&1
    say "speed (ms: median step; GiB: device used at the peak; zp = --engine zeroplan's plan, err vs ours; ds = the DeepSpeed engine's plan, err vs peft; trainable: peft's print_trainable_parameters = the planner's):"
    while IFS= read -r line; do [[ $line == "{"* ]] || say "  $line"; done < "$L/lora_summary.txt"
  fi
fi
