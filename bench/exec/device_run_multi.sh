#!/usr/bin/env bash
# Device calls on the multi-GPU kinds (nvidia-h200-x2, -x4, -x8; N = every GPU of the machine), each under the
# 600 s limit of one call; a call within the machine's idle window finds the build in place. Carry bench/deps
# (bench/exec/carry_deps.sh: liburing and zlib are missing there):
#   run(command="bash bench/exec/device_run_multi.sh tests equivalence", carry=["bench/deps"], kind="nvidia-h200-x2")
#   bench/exec/device_run_multi.sh PART...   (default: tests equivalence)
#   tests        the executor's GPU tests (GTEST_FILTER narrows them)
#   equivalence  N ranks against one rank at the same stage, the same global batch (GPT-2 124M, stages 0-3, fp32,
#                bf16, bf16 with fp32 accumulation and reductions); bf16's floor; --deterministic repeats on N ranks
#   checkpoint   GPT-2 1.5B on N ranks with --deterministic at stages $CK_STAGES (default "2 3"): save at step 3,
#                resume to 6, against 6 uninterrupted steps; the disk's raw write rate beside the save rate
#   faults       one rank of N failing mid-run: kill -9 from outside, a hang (test-only switch), an injected CUDA
#                error, out of memory; each: time until every process is gone, exit status, the message, GPU
#                processes left
#   speed        GPT-2 1.5B, micro-batch 8, seq 1024, bf16 at stages 0-3 (stage 3 also with selective recompute)
#                on N GPUs beside their plans, and the PyTorch peers (DDP, ZeroRedundancyOptimizer, FSDP
#                SHARD_GRAD_OP, FSDP FULL_SHARD, FSDP2) under torchrun on the same N GPUs, issue 11's rows first,
#                within SPEED_BUDGET seconds of the call's start (default 900: split it over calls), and stage 2
#                with 2e8-element buckets (bench/exec/models/ds-stage2-bucket-2e8.json); SPEED_ROWS picks rows
#   offload      the same model at stage 2 and 3 with the optimizer on the CPU, and stage 3 with optimizer and
#                parameters on the CPU, beside their plans
#   nvme         ZeRO-Infinity's optimizer offload to the machine's disk (--offload-optimizer nvme, stage 3) at GPT-2
#                124M and 355M, beside the same runs with the optimizer on the CPU (--deterministic: equal losses
#                expected) and their plans; then its parameter offload (--offload-param nvme, optimizer on the
#                CPU) beside --offload-param cpu (equal losses expected; NVMe bytes per step beside the plan's);
#                the disk's raw rates (dd) beside
#   param_nvme   the nvme part's parameter offload only (issue 39's runs, on any N)
#   largest      the largest GPT-2-family model the planner fits on 2x H200 at stage 3 but not at stage 2
#                (bench/exec/models/gpt2-h6144-l36.json, 16.6B; issue 11), 10 steps beside its plan
#   largest_offload  host-bound (issue 12): the largest layer count of that width the planner fits at stage 3 with
#                optimizer and parameters on the CPU given the host memory available then
#                (bench/exec/largest_offload_model.py; LARGEST_LAYERS=K runs K layers instead), 10 steps beside
#                its plan
#   scaling      the speed part's stages on 1 and 2 of the GPUs (CUDA_VISIBLE_DEVICES): tokens/s per GPU for the
#                README's scaling picture
#   headline     the README's first plan (Llama-2 13B, micro-batch 2, seq 4096) on N GPUs, and the executor's own plan's
#                choice of it run (`--engine zeroplan`'s fastest plan that fits)
#   calibrate    zeroplan calibrate over the N GPUs (NCCL busbw per collective 1 MiB-1 GiB, GEMMs, PCIe, CPU AdamW,
#                disk): $OUT/h200xN.json comes back, to ship in configs/clusters/
# Issue 15 (4 and 8 GPUs), per kind: "tests equivalence", "checkpoint faults", "speed", "offload calibrate".
# Logs and reports go into $OUT/logs.tar.gz (a call brings back 8 files at most); the summary is printed last and
# kept in $OUT/summary.txt.
DEFAULT_PARTS="tests equivalence"
source bench/exec/device_common.sh
# The bundled description of this kind (a call for an H200 kind may be given H100s: then theirs).
case "$GPU_NAME" in *H100*) CLUSTER=h100x$N; FALLBACK=h100x8 ;; *) CLUSTER=h200x$N; FALLBACK=h200x4 ;; esac
[ -f configs/clusters/$CLUSTER.json ] || CLUSTER=$FALLBACK
BIG="--model gpt2-1.5b --cluster $CLUSTER --micro-batch 8 --seq 1024 --precision bf16 --checkpointing none"

if has equivalence; then
  # N ranks against one rank at GPT-2 124M: the same global batch (N ranks x 8/N micro-steps against 1 x 8)
  for prec in fp32 bf16; do
    for st in 0 1 2 3; do
      timeout 90 $RUN run --model gpt2-124m --micro-batch 2 --seq 256 --grad-accum $((8 / N)) --precision $prec --stage $st \
        --gpus $N --steps 20 --warmup-steps 2 --report "$OUT/eq_${prec}_s${st}.json" > "$OUT/eq_${prec}_s${st}.log" 2>&1
    done
    # the one-rank references: the same stage (its own rounding of gradient sums: stage 2 rounds each micro-step's
    # reduced chunk into the 16-bit partition, as DeepSpeed's does) on one GPU, 1 x 8 micro-steps
    for st in 0 1 2 3; do
      timeout 90 $RUN run --model gpt2-124m --micro-batch 2 --seq 256 --grad-accum 8 --precision $prec --stage $st \
        --gpus 1 --steps 20 --warmup-steps 2 --report "$OUT/eq_${prec}_one_s${st}.json" > "$OUT/eq_${prec}_one_s${st}.log" 2>&1
    done
  done
  # bf16's own floor: one rank, the same global batch grouped as 4 micro-steps of 4 sequences instead of 8 of 2
  # (nothing but the order in which bf16 gradients are summed differs)
  timeout 90 $RUN run --model gpt2-124m --micro-batch 4 --seq 256 --grad-accum 4 --precision bf16 --stage 0 --gpus 1 \
    --steps 20 --warmup-steps 2 --report "$OUT/eq_bf16_regrouped.json" > "$OUT/eq_bf16_regrouped.log" 2>&1
  # bf16 with fp32 gradient accumulation and fp32 reductions (DeepSpeed's data_types.grad_accum_dtype and
  # communication_data_type; DeepSpeed refuses the former at stage 0): N ranks against one at stages 1-3
  for st in 1 2 3; do
    printf '{"bf16": {"enabled": true}, "zero_optimization": {"stage": %d}, "communication_data_type": "fp32", "data_types": {"grad_accum_dtype": "fp32"}}\n' \
      $st > "$OUT/ds_fp32_grads_s$st.json"
    timeout 90 $RUN run --model gpt2-124m --micro-batch 2 --seq 256 --grad-accum $((8 / N)) --ds-config "$OUT/ds_fp32_grads_s$st.json" \
      --gpus $N --steps 20 --warmup-steps 2 --report "$OUT/eq_bf16acc32_s${st}.json" > "$OUT/eq_bf16acc32_s${st}.log" 2>&1
  done
  for st in 1 2 3; do
    timeout 90 $RUN run --model gpt2-124m --micro-batch 2 --seq 256 --grad-accum 8 --ds-config "$OUT/ds_fp32_grads_s$st.json" \
      --gpus 1 --steps 20 --warmup-steps 2 --report "$OUT/eq_bf16acc32_one_s$st.json" > "$OUT/eq_bf16acc32_one_s$st.log" 2>&1
  done
  python3 - "$OUT" "$N" <<'PY' | tee "$OUT/equivalence.txt"
import json, sys
out, n = sys.argv[1], sys.argv[2]
def losses(name):
    return json.load(open(f"{out}/eq_{name}.json"))["measured"]["loss"]
def max_rel(l, ref):
    return max(abs(a - b) / abs(b) for a, b in zip(l, ref))
# issue 10: fp32 within 1e-6; bf16 within 1e-4 of the same stage on one rank: N ranks sum a bucket's gradients in
# another order before the one rounding to bf16 that one rank makes too. bf16's floor for comparison: one rank, the
# same global batch in other micro-steps (nothing but the bf16 summation order differs).
try:
    floor = max_rel(losses("bf16_regrouped"), losses("bf16_one_s0"))
    print(f"bf16 floor: 1 rank, stage 0, 4 x 4 sequences vs 8 x 2: max relative loss difference {floor:.3g}")
except Exception as e:
    print(f"bf16 floor: no result ({e})")
for prec, stages in (("fp32", (0, 1, 2, 3)), ("bf16", (0, 1, 2, 3)), ("bf16acc32", (1, 2, 3))):
    for st in stages:
        try:
            l, ref = losses(f"{prec}_s{st}"), losses(f"{prec}_one_s{st}")
            rel = max_rel(l, ref)
            tol = 1e-6 if prec == "fp32" else 1e-4
            verdict = "within" if rel <= tol else "OUTSIDE"
            label = "bf16, fp32 accumulation + reductions" if prec == "bf16acc32" else prec
            against_s0 = ""
            if prec != "fp32" and st > min(stages):
                s0 = min(stages)
                against_s0 = f"; vs 1 rank at stage {s0} {max_rel(l, losses(f'{prec}_one_s{s0}')):.3g}"
            print(f"{label} stage {st} {n} ranks vs 1 rank at stage {st}: max relative loss difference over {len(l)} steps {rel:.3g} "
                  f"({verdict} {tol:g}){against_s0}")
        except Exception as e:
            print(f"{prec} stage {st}: no result ({e})")
PY
  while read -r line; do summary+=("$line"); done < "$OUT/equivalence.txt"
  for k in 1 2; do
    timeout 90 $RUN run --model gpt2-124m --micro-batch 2 --seq 256 --grad-accum $((8 / N)) --precision bf16 --stage 2 \
      --gpus $N --steps 10 --warmup-steps 2 --deterministic --report "$OUT/det_$k.json" > "$OUT/det_$k.log" 2>&1
  done
  summary+=("deterministic repeat: $(python3 -c "import json; a,b=(json.load(open(f'$OUT/det_{k}.json'))['measured']['loss'] for k in (1,2)); print('bit-identical losses' if a==b else f'DIFFERENT {a} {b}')" 2>&1)")
fi

if has checkpoint; then
  CK=${CK_DIR:-/tmp/zeroplan-ck}
  mkdir -p "$CK"
  dd if=/dev/zero of=$CK/dd.bin bs=16M count=256 oflag=direct conv=fsync 2> "$OUT/dd.log"
  summary+=("disk raw write (dd 4 GiB, direct): $(tail -1 "$OUT/dd.log")")
  rm -f $CK/dd.bin
  for st in ${CK_STAGES:-2 3}; do
    rm -rf "$CK"; mkdir -p "$CK"
    C="$BIG --gpus $N --stage $st --warmup-steps 0 --deterministic"
    timeout 150 $RUN run $C --steps 6 --save-dir $CK/whole --report "$OUT/ck_whole_$st.json" > "$OUT/ck_whole_$st.log" 2>&1
    timeout 120 $RUN run $C --steps 3 --save-dir $CK/parts > "$OUT/ck_save_$st.log" 2>&1
    timeout 150 $RUN run $C --steps 6 --resume $CK/parts --save-dir $CK/parts \
      --report "$OUT/ck_parts_$st.json" > "$OUT/ck_resume_$st.log" 2>&1
    same=bit-identical
    for f in $CK/whole/step-00000006/rank-*.bin; do
      cmp -s "$f" "$CK/parts/step-00000006/$(basename "$f")" || same=DIFFERENT
    done
    summary+=("checkpoint stage $st: $(grep '^checkpoint:' "$OUT/ck_save_$st.log" | head -1) | resumed state $same")
    summary+=("  losses: $(python3 -c "import json; a=json.load(open('$OUT/ck_whole_$st.json'))['measured']['loss'][3:]; b=json.load(open('$OUT/ck_parts_$st.json'))['measured']['loss']; print('steps 4-6 equal' if a==b else f'DIFFER {a} {b}')" 2>&1)")
    # N -> N/2 ranks: the step-3 checkpoint resumed on half the GPUs with twice the micro-steps (the same global
    # batch); bf16 gradients are then summed in another order, so the losses agree to bf16's rounding, not bit for bit.
    if [ "$N" -ge 2 ]; then
      timeout 150 $RUN run ${C/--gpus $N/--gpus $((N / 2))} --grad-accum 2 --steps 6 --resume $CK/parts/step-00000003 \
        --report "$OUT/ck_reshard_$st.json" > "$OUT/ck_reshard_$st.log" 2>&1
      summary+=("  resumed on $((N / 2)) ranks (rc=$?): $(python3 -c "import json; a=json.load(open('$OUT/ck_whole_$st.json'))['measured']['loss'][3:]; b=json.load(open('$OUT/ck_reshard_$st.json'))['measured']['loss']; print('steps 4-6 max relative loss difference %.2g' % max(abs(x - y) / abs(x) for x, y in zip(a, b)), b)" 2>&1 | cut -c1-200)")
    fi
    rm -rf "$CK"
  done
fi

if has faults; then
  # One rank of N fails before step 3 (rank 1; the launcher's other ranks wait in a collective for it). Each case:
  # seconds until the launcher has exited (the issue's bound: 60), its exit status, the message, GPU processes left.
  F="$BIG --gpus $N --stage 2 --steps 8 --warmup-steps 0 --collective-timeout 30"
  fault_case() {  # name, then the environment for the run
    local name=$1; shift
    local s e rc left
    s=$(date +%s.%N)
    env "$@" timeout 150 $RUN run $F > "$OUT/fault_$name.log" 2>&1; rc=$?
    e=$(date +%s.%N); sleep 2
    left=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)
    summary+=("fault $name: exit $rc after $(python3 -c "print(f'{$e-$s:.1f}')") s, GPU processes left $left: $(grep -E 'rank [0-9]+' "$OUT/fault_$name.log" | tail -1 | cut -c1-200)")
  }
  # FAULT_CASES="kill9" runs that case only (default every case)
  fault_wanted() { [[ " ${FAULT_CASES:-hang cuda_error oom kill9} " == *" $1 "* ]]; }
  fault_wanted hang && fault_case hang ZEROPLAN_TEST_FAULT=hang:1:3
  fault_wanted cuda_error && fault_case cuda_error ZEROPLAN_TEST_FAULT=error:1:3
  fault_wanted oom && fault_case oom ZEROPLAN_TEST_FAULT=oom:1:3
  if fault_wanted kill9; then
  # kill -9 from outside, mid-step: the last rank process the launcher started, once step 3 is printed.
  s=$(date +%s.%N)
  timeout 150 $RUN run $F > "$OUT/fault_kill9.log" 2>&1 &
  launcher=$!
  for _ in $(seq 1 600); do
    grep -q '^step *3' "$OUT/fault_kill9.log" && break
    kill -0 "$launcher" 2> /dev/null || break  # the run ended on its own: nothing to kill
    sleep 0.2
  done
  victim=
  zl=$(pgrep -P "$launcher" | head -1)                  # timeout's child: zeroplan's launcher
  [ -n "$zl" ] && victim=$(pgrep -P "$zl" | tail -1)    # the launcher's last rank process
  [ -n "$victim" ] && kill -9 "$victim"
  wait "$launcher"; rc=$?
  e=$(date +%s.%N); sleep 2
  left=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)
  summary+=("fault kill9 (pid $victim): exit $rc after $(python3 -c "print(f'{$e-$s:.1f}')") s from start, GPU processes left $left: $(grep -E 'rank [0-9]+' "$OUT/fault_kill9.log" | tail -1 | cut -c1-200)")
  fi
fi

if has speed; then
  # Issue 11's rows first (stage 3 with and without selective recompute, FSDP FULL_SHARD, FSDP2), then issue 10's
  # stage and its peer pairs; a row starts only while SPEED_BUDGET seconds (default 900) since the call's start allow.
  speed_left() { [ $(( $(date +%s) - t0 )) -lt "${SPEED_BUDGET:-900}" ] || { summary+=("speed: budget spent before $1"); return 1; }; }
  # SPEED_ROWS="s0 ddp ..." runs those rows only (ours by name, the peers by mode); default every row.
  wanted() { [ -z "${SPEED_ROWS:-}" ] || [[ " $SPEED_ROWS " == *" $1 "* ]]; }
  ours() {  # name, stage, checkpointing[, more flags]
    wanted "$1" || return 0
    speed_left "$1" || return 0
    timeout 100 $RUN run ${BIG/--checkpointing none/--checkpointing $3} --gpus $N --stage $2 --steps $STEPS \
      --warmup-steps 5 ${4:-} --report "$OUT/run_$1.json" > "$OUT/run_$1.log" 2>&1
    echo "$1 rc=$?"; sed -n '/^memory per GPU/,$p' "$OUT/run_$1.log" | head -45
    summary+=("stage $2 ($3), $N GPUs: $(tokens "$OUT/run_$1.log") | $(grep -E 'total \(device' "$OUT/run_$1.log" | tr -s ' ')")
  }
  peer() {
    wanted "$1" || return 0
    speed_left "peer $1" || return 0
    # torch.compile under 4 ranks took more than 90 s to compile on 2026-11-28: the compiled peers get 240 s.
    local limit=90; [[ $1 == *compile ]] && limit=240
    (cd bench/exec && PYTHONUNBUFFERED=1 timeout ${PEER_TIMEOUT:-$limit} torchrun --nproc_per_node $N pytorch_peers_multi.py --mode $1 \
      --steps $STEPS) > "$OUT/peer_$1.log" 2>&1
    summary+=("peer $1: $(grep '^{' "$OUT/peer_$1.log" | tail -1 | cut -c1-200)")
  }
  ours s3 3 none; ours s3_selective 3 selective; peer fsdp_full; peer fsdp2; peer fsdp2_compile
  ours s0 0 none; peer ddp; peer ddp_compile; ours s2 2 none; peer fsdp_grad_op; ours s1 1 none; peer zero1
  # Stage 2 with 2e8-element buckets (a DeepSpeed config): the bucket buffers the peak holds, 1.6 GiB less.
  ours s2_bucket2e8 2 none "--ds-config bench/exec/models/ds-stage2-bucket-2e8.json"
  # fp32 gradient accumulation (data_types.grad_accum_dtype), at stage 1 with fp32 reductions too, 2 micro-steps
  ours s2_acc32 2 none "--grad-accum 2 --ds-config bench/exec/models/ds-stage2-fp32-accumulation.json"
  ours s1_acc32_comm32 1 none "--grad-accum 2 --ds-config bench/exec/models/ds-stage1-fp32-accumulation-and-reductions.json"
  # The executor's own one-GPU figure (issue 10: N GPUs at least 0.95 N x it)
  if wanted one && speed_left one; then
    timeout 100 $RUN run $BIG --gpus 1 --stage 0 --steps $STEPS --warmup-steps 5 --report "$OUT/run_one.json" \
      > "$OUT/run_one.log" 2>&1
    summary+=("stage 0, 1 GPU: $(tokens "$OUT/run_one.log")")
  fi
fi

if has offload; then
  for o in "2 --offload-optimizer cpu" "3 --offload-optimizer cpu" "3 --offload-optimizer cpu --offload-param cpu"; do
    st=${o%% *}; flags=${o#* }; name="s${st}$(echo "$flags" | tr -d ' -' | sed 's/offload//g')"
    timeout 150 $RUN run $BIG --gpus $N --stage $st $flags --steps 10 --warmup-steps 3 --report "$OUT/off_$name.json" \
      > "$OUT/off_$name.log" 2>&1
    summary+=("offload stage $st $flags: $(tokens "$OUT/off_$name.log") | $(grep -E 'step .* predicted' "$OUT/off_$name.log" | tr -s ' ')")
    summary+=("  host: $(grep -E '^  (pinned|resident peak|node host)' "$OUT/off_$name.log" | tr -s ' ' | tr '\n' ' ') | VmHWM per rank: $(grep -E '^  rank [0-9]' "$OUT/off_$name.log" | awk '{print $(NF-1)}' | tr '\n' ' ')")
  done
fi
if has nvme || has param_nvme; then
  NV=${NVME_DIR:-/var/tmp/zeroplan-nvme}
  mkdir -p "$NV"
  dd if=/dev/zero of=$NV/dd.bin bs=16M count=128 oflag=direct conv=fsync 2> "$OUT/nvme_dd_write.log"
  dd if=$NV/dd.bin of=/dev/null bs=16M iflag=direct 2> "$OUT/nvme_dd_read.log"
  rm -f $NV/dd.bin
  summary+=("disk raw (dd 2 GiB, direct): write $(tail -1 "$OUT/nvme_dd_write.log" | awk -F, '{print $NF}') read $(tail -1 "$OUT/nvme_dd_read.log" | awk -F, '{print $NF}')")
  has nvme && for m in gpt2-124m gpt2-355m; do
    S="--model $m --cluster $CLUSTER --micro-batch 8 --seq 1024 --precision bf16 --gpus $N --stage 3 --steps 6 --warmup-steps 2 --deterministic"
    rm -rf "$NV"; mkdir -p "$NV"
    timeout 200 $RUN run $S --offload-optimizer nvme --nvme-path "$NV" --report "$OUT/nvme_$m.json" > "$OUT/nvme_$m.log" 2>&1
    rc=$?
    timeout 100 $RUN run $S --offload-optimizer cpu --report "$OUT/nvme_cpu_$m.json" > "$OUT/nvme_cpu_$m.log" 2>&1
    summary+=("nvme $m stage 3 rc=$rc: $(tokens "$OUT/nvme_$m.log") | $(grep -E 'step .* predicted' "$OUT/nvme_$m.log" | tr -s ' ')")
    summary+=("  $(grep -iE 'nvme' "$OUT/nvme_$m.log" | grep -v '^run' | tail -2 | tr -s ' ' | tr '\n' ' ' | cut -c1-220)")
    summary+=("  against --offload-optimizer cpu: $(python3 -c "import json; a=json.load(open('$OUT/nvme_$m.json'))['measured']['loss']; b=json.load(open('$OUT/nvme_cpu_$m.json'))['measured']['loss']; print('losses bit-identical' if a==b else f'DIFFER {a} {b}')" 2>&1 | cut -c1-200) | cpu: $(tokens "$OUT/nvme_cpu_$m.log")")
  done
  # Parameters on NVMe (exec/offload/param_swapper.h) against parameters in host memory, same deterministic run
  # (PNVME_MODELS, default GPT-2 124M and 355M), every chunk on the disk (max_in_cpu 0: DeepSpeed's default, 1e9
  # elements, would keep these partitions in host memory and nothing would be read or written).
  for m in ${PNVME_MODELS:-gpt2-124m gpt2-355m}; do
    S="--model $m --cluster $CLUSTER --micro-batch 8 --seq 1024 --precision bf16 --gpus $N --stage 3 --steps 6 --warmup-steps 2 --deterministic --offload-optimizer cpu"
    rm -rf "$NV"; mkdir -p "$NV"
    printf '{"train_micro_batch_size_per_gpu": 8, "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "%s", "max_in_cpu": 0}}}\n' \
      "$NV" > "$OUT/pnvme_ds_$m.json"
    timeout 200 $RUN run $S --offload-param nvme --nvme-path "$NV" --ds-config "$OUT/pnvme_ds_$m.json" \
      --report "$OUT/pnvme_$m.json" > "$OUT/pnvme_$m.log" 2>&1
    rc=$?
    timeout 100 $RUN run $S --offload-param cpu --report "$OUT/pnvme_cpu_$m.json" > "$OUT/pnvme_cpu_$m.log" 2>&1
    summary+=("param nvme $m stage 3 rc=$rc: $(tokens "$OUT/pnvme_$m.log") | $(grep -E 'step .* predicted' "$OUT/pnvme_$m.log" | tr -s ' ')")
    summary+=("  $(grep -E 'parameter NVMe swapping|NVMe \(swap files' "$OUT/pnvme_$m.log" | tr -s ' ' | tr '\n' ' ' | cut -c1-260)")
    summary+=("  against --offload-param cpu: $(python3 -c "import json; a=json.load(open('$OUT/pnvme_$m.json'))['measured']; b=json.load(open('$OUT/pnvme_cpu_$m.json'))['measured']; o=a['offload_seconds']; print(('losses bit-identical' if a['loss']==b['loss'] else f\"DIFFER {a['loss']} {b['loss']}\") + f\"; NVMe read/written per step {o['param_nvme_read_bytes']:.0f}/{o['param_nvme_write_bytes']:.0f} B, planned {o['param_nvme_read_bytes_predicted']:.0f}/{o['param_nvme_write_bytes_predicted']:.0f}\")" 2>&1 | cut -c1-260) | cpu: $(tokens "$OUT/pnvme_cpu_$m.log")")
  done
  rm -rf "$NV"
fi
if has largest; then
  L="--cluster h200x2 --micro-batch 1 --seq 1024 --precision bf16 --gpus $N --stage 3 --steps 10 --warmup-steps 3"
  timeout 280 $RUN run --model bench/exec/models/gpt2-h6144-l36.json $L --report "$OUT/largest_s3.json" > "$OUT/largest_s3.log" 2>&1
  summary+=("largest, stage 3 (16.6B) rc=$?: $(tokens "$OUT/largest_s3.log") | $(grep -E 'total \(device|step .* predicted' "$OUT/largest_s3.log" | tr -s ' ' | tr '\n' ' ')")
fi
if has largest_offload; then
  # Stage 3 with optimizer and parameters on the CPU: the largest layer count the planner fits with the host memory
  # available now (bench/exec/largest_offload_model.py; on 2026-11-23 a plan that filled the physical size was
  # ended by the OOM killer). offload_param.buffer_size must hold the largest partition chunk (226,492,416
  # elements at 36 layers; DeepSpeed's default 1e8 is refused), hence the DeepSpeed config.
  # LARGEST_LAYERS=K runs K layers instead of the planner's choice (a run well inside the host memory, to measure).
  python3 bench/exec/largest_offload_model.py $RUN h200x$N $N "$OUT/largest_cluster.json" "$OUT/largest_model.json" \
    ${LARGEST_LAYERS:-} > "$OUT/largest_choice.log" 2>&1
  summary+=("largest offload choice: $(tail -3 "$OUT/largest_choice.log" | tr '\n' ' ')")
  timeout 290 $RUN run --model "$OUT/largest_model.json" --cluster "$OUT/largest_cluster.json" \
    --micro-batch 1 --seq 1024 --precision bf16 --gpus $N --stage 3 --steps 10 --warmup-steps 3 \
    --offload-optimizer cpu --offload-param cpu --ds-config bench/exec/models/ds-stage3-offload-largest.json \
    --report "$OUT/largest_offload.json" > "$OUT/largest_offload.log" 2>&1
  summary+=("largest, stage 3 + opt/param on CPU rc=$?: $(tokens "$OUT/largest_offload.log") | $(grep -E 'total \(device|pinned|resident|node host|step .* predicted|failed' "$OUT/largest_offload.log" | tr -s ' ' | tr '\n' ' ')")
fi
if has scaling; then
  # Tokens/s per GPU at 1 and 2 GPUs of this host for each stage (the N-GPU rows are the speed part's): the
  # README's scaling picture (scripts/scaling_picture.py) reads these reports.
  for g in 1 2; do
    [ "$g" -lt "$N" ] || continue
    for st in 0 1 2 3; do
      CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((g - 1))) timeout 100 $RUN run $BIG --gpus $g --stage $st --steps ${SCALING_STEPS:-12} \
        --warmup-steps 4 --report "$OUT/scale_${g}gpu_s$st.json" > "$OUT/scale_${g}gpu_s$st.log" 2>&1
      summary+=("scaling stage $st, $g GPU(s): $(tokens "$OUT/scale_${g}gpu_s$st.log")")
    done
  done
fi
if has headline; then
  # The README's first example: the plan for Llama-2 13B at micro-batch 2, sequence 4096 on this machine, then
  # the plan it recommends, run (issue 35).
  H="--model llama2-13b --micro-batch 2 --seq 4096 --precision bf16 --cluster $CLUSTER --gpus $N"
  # The run is the executor's own plan's choice (`--engine zeroplan`'s "Fastest that fits"): stage 3 on 4 H200,
  # while on 2 it is 1.0 GiB short there (2026-11-30) and the verdict names an offload plan.
  $RUN plan $H > "$OUT/headline_plan.log" 2>&1
  $RUN plan $H --engine zeroplan > "$OUT/headline_plan_zeroplan.log" 2>&1
  best=$(grep -oE 'Fastest that fits: stage [0-3]( \+ (opt|param):(cpu|nvme))*' "$OUT/headline_plan_zeroplan.log" | head -1)
  flags="--stage $(echo "$best" | grep -oE 'stage [0-3]' | cut -d' ' -f2)"
  o=$(echo "$best" | grep -oE 'opt:[a-z]+' | cut -d: -f2); [ -n "$o" ] && flags+=" --offload-optimizer $o"
  p=$(echo "$best" | grep -oE 'param:[a-z]+' | cut -d: -f2); [ -n "$p" ] && flags+=" --offload-param $p"
  if [ -z "$best" ]; then
    summary+=("headline: no plan fits on $N GPUs (headline_plan_zeroplan.log)")
  else
    timeout 300 $RUN run $H $flags --engine zeroplan --steps 8 --warmup-steps 3 --report "$OUT/headline_run.json" \
      > "$OUT/headline_run.log" 2>&1
    summary+=("headline llama2-13b [$best] rc=$?: $(tokens "$OUT/headline_run.log") | $(grep -E 'total \(device|step .* predicted' "$OUT/headline_run.log" | tr -s ' ' | tr '\n' ' ')")
  fi
fi
if has calibrate; then
  mkdir -p /var/tmp/zeroplan-calibrate-disk
  name=h200x$N; base=h200x4; [ "$N" -le 2 ] && base=h200x2
  timeout 300 $RUN calibrate --gpus $N --model gpt2-1.5b --nvme-path /var/tmp/zeroplan-calibrate-disk --base $base \
    --name $name --out "$FINAL_OUT/$name.json" --force > "$OUT/calibrate.log" 2>&1
  summary+=("calibrate rc=$?: $(grep -E 'all-reduce|wrote' "$OUT/calibrate.log" | tail -2 | tr '\n' ' ' | cut -c1-200)")
fi
finish
