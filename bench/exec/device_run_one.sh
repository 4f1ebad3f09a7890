#!/usr/bin/env bash
# Device calls on a one-GPU kind (nvidia-h200 or nvidia-h100-x1), each under the 600 s limit of one call; the
# second finds the build in place when it follows within the machine's idle window:
#   bench/exec/device_run_one.sh PART...   (default: tests equivalence checkpoint faults)
#   tests        the executor's GPU tests (GTEST_FILTER narrows them)
#   equivalence  stages 1-3 against stage 0 on one GPU (GPT-2 124M, fp32 and bf16, same batch); --deterministic
#                repeats at stages 0 and 3
#   checkpoint   GPT-2 1.5B with --deterministic at stages $CK_STAGES (default "0 3"): save at step 3, resume to 6,
#                against 6 uninterrupted steps; the disk's raw write rate (dd, direct I/O) beside the save rate
#   faults       the one rank failing (CUDA error, out of memory, kill -9); at world 1 there is no launcher and no
#                peer, so hangs are the multi-GPU script's to test
#   cpu_adam     the CPU AdamW (bench/cpu_adam_benchmark, fp32 gradients, without and with the bf16 copy) beside
#                DeepSpeedCPUAdam (bench/deepspeed/cpu_adam_peer.py) at 1e8 and 4e8 parameters, all of the host's
#                cores (CPU_ADAM_THREADS to change), the host's CPU, NUMA and memory facts beside; carry
#                bench/deepspeed/wheels as well
#   speed        GPT-2 1.5B, micro-batch 8, seq 1024, bf16 at stages 0-3 beside their plans, then the PyTorch
#                peers eager and torch.compile
#   recompute    GPT-2 1.5B, micro-batch 8, seq 1024, bf16 at stages $RC_STAGES (default "0 3") with checkpointing
#                none and selective (LayerNorm and GELU outputs rebuilt in backward): measured beside the plan
# Carry bench/deps (bench/exec/carry_deps.sh). Logs and reports go into $OUT/logs.tar.gz (a call brings back 8
# files at most); the summary is printed last and kept in $OUT/summary.txt.
DEFAULT_PARTS="tests equivalence checkpoint faults"
source bench/exec/device_common.sh
case "$GPU_NAME" in *H100*) CLUSTER=h100x1 ;; *) CLUSTER=h200x1 ;; esac  # calibrated there (zeroplan calibrate)

if has equivalence; then
  # Stages 1-3 against stage 0 on one GPU, the same batch: the partitioned code paths at world 1.
  for prec in fp32 bf16; do
    for st in 0 1 2 3; do
      timeout 60 $RUN run --model gpt2-124m --cluster $CLUSTER --micro-batch 4 --seq 256 --grad-accum 2 --precision $prec \
        --stage $st --gpus 1 --steps 20 --warmup-steps 2 --report "$OUT/eq_${prec}_s${st}.json" > "$OUT/eq_${prec}_s${st}.log" 2>&1
      echo "eq $prec stage $st rc=$?"
    done
  done
  python3 - "$OUT" <<'PY' | tee "$OUT/equivalence.txt"
import json, sys
out = sys.argv[1]
for prec in ("fp32", "bf16"):
    try:
        ref = json.load(open(f"{out}/eq_{prec}_s0.json"))["measured"]["loss"]
    except Exception as e:
        print(f"{prec}: no stage-0 reference ({e})"); continue
    for st in (1, 2, 3):
        try:
            l = json.load(open(f"{out}/eq_{prec}_s{st}.json"))["measured"]["loss"]
            rel = max(abs(a - b) / abs(b) for a, b in zip(l, ref))
            print(f"{prec} stage {st} vs stage 0 (1 GPU): max relative loss difference over {len(l)} steps {rel:.3g}")
        except Exception as e:
            print(f"{prec} stage {st}: no result ({e})")
PY
  for st in 0 3; do
    for k in 1 2; do
      timeout 60 $RUN run --model gpt2-124m --cluster $CLUSTER --micro-batch 4 --seq 256 --grad-accum 2 --precision bf16 \
        --stage $st --gpus 1 --steps 10 --warmup-steps 2 --deterministic --report "$OUT/det_${st}_$k.json" > "$OUT/det_${st}_$k.log" 2>&1
    done
    summary+=("deterministic repeat stage $st: $(python3 -c "import json; a,b=(json.load(open(f'$OUT/det_${st}_{k}.json'))['measured']['loss'] for k in (1,2)); print('bit-identical losses' if a==b else f'DIFFERENT {a} {b}')" 2>&1)")
  done
fi
if has checkpoint; then
  # GPT-2 1.5B checkpoints on one GPU: save at step 3, resume to step 6, against 6 uninterrupted steps. Bit for
  # bit needs --deterministic: without it two uninterrupted runs differ in the last bits too.
  CK=${CK_DIR:-/tmp/zeroplan-ck}
  mkdir -p "$CK"
  dd if=/dev/zero of=$CK/dd.bin bs=16M count=256 oflag=direct conv=fsync 2> "$OUT/dd.log"
  summary+=("disk raw write (dd 4 GiB, direct): $(tail -1 "$OUT/dd.log")")
  rm -f $CK/dd.bin
  for st in ${CK_STAGES:-0 3}; do
    rm -rf "$CK"; mkdir -p "$CK"
    C="--model gpt2-1.5b --cluster $CLUSTER --micro-batch 8 --seq 1024 --precision bf16 --gpus 1 --stage $st --warmup-steps 0 --deterministic"
    timeout 150 $RUN run $C --steps 6 --save-dir $CK/whole --report "$OUT/ck_whole_$st.json" > "$OUT/ck_whole_$st.log" 2>&1
    echo "ck whole stage $st rc=$?"
    timeout 120 $RUN run $C --steps 3 --save-dir $CK/parts > "$OUT/ck_save_$st.log" 2>&1
    echo "ck save stage $st rc=$?"
    timeout 150 $RUN run $C --steps 6 --resume $CK/parts --save-dir $CK/parts \
      --report "$OUT/ck_parts_$st.json" > "$OUT/ck_resume_$st.log" 2>&1
    echo "ck resume stage $st rc=$?"
    ls -la $CK/whole $CK/parts > "$OUT/ck_ls_$st.txt" 2>&1
    same=$(cmp -s $CK/whole/step-00000006/rank-00000.bin $CK/parts/step-00000006/rank-00000.bin && echo "bit-identical" || echo "DIFFERENT")
    summary+=("checkpoint stage $st: $(grep '^checkpoint:' "$OUT/ck_save_$st.log" | head -2 | tr '\n' ' ') | resumed state $same")
    summary+=("  losses: $(python3 -c "import json; a=json.load(open('$OUT/ck_whole_$st.json'))['measured']['loss'][3:]; b=json.load(open('$OUT/ck_parts_$st.json'))['measured']['loss']; print('steps 4-6 equal' if a==b else f'DIFFER {a} {b}')" 2>&1)")
    rm -rf "$CK"
  done
fi
if has faults; then
  # A failing rank ends the run: one clear message, non-zero exit, no process or GPU memory left.
  F="--model gpt2-1.5b --cluster $CLUSTER --micro-batch 8 --seq 1024 --precision bf16 --gpus 1 --steps 8 --warmup-steps 0 --collective-timeout 20"
  for fault in error:0:3 oom:0:3 exit:0:3; do
    s=$(date +%s.%N)
    ZEROPLAN_TEST_FAULT=$fault timeout 120 $RUN run $F > "$OUT/fault_${fault%%:*}.log" 2>&1; rc=$?
    e=$(date +%s.%N)
    sleep 1
    left=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | wc -l)
    summary+=("fault $fault: rc=$rc, $(python3 -c "print(f'{$e-$s:.1f}')") s, GPU processes left $left: $(grep -iE 'rank 0|failed|error' "$OUT/fault_${fault%%:*}.log" | tail -2 | tr '\n' ' ' | cut -c1-220)")
  done
fi

if has cpu_adam; then
  { lscpu; echo; grep -E 'MemTotal|MemFree|MemAvailable|^Cached|Shmem:' /proc/meminfo; } > "$OUT/host.txt" 2>&1
  summary+=("host: $(grep -E '^Model name|^Socket|^Core|^Thread|^NUMA node\(s\)' "$OUT/host.txt" | tr -s ' ' | tr '\n' ';')")
  summary+=("  $(grep -E 'MemTotal|MemAvailable' "$OUT/host.txt" | tr -s ' ' | tr '\n' ';')")
  T=${CPU_ADAM_THREADS:-$(nproc)}
  if ninja -C $BUILD cpu_adam_benchmark >> "$OUT/build.log" 2>&1; then
    for copy in none bf16; do
      $BUILD/bench/cpu_adam_benchmark --sizes 1e8,4e8 --threads $T --grads fp32 --copy $copy --no-scalar-baseline \
        > "$OUT/cpu_adam_ours_$copy.jsonl" 2> "$OUT/cpu_adam_ours_$copy.err"
      while read -r line; do summary+=("ours, copy $copy: $line"); done < "$OUT/cpu_adam_ours_$copy.jsonl"
    done
  else
    summary+=("cpu_adam_benchmark did not build: $(grep -m3 -E 'error|FAILED' "$OUT/build.log")")
  fi
  # In a subshell: the wheels' PYTHONPATH stays out of the other parts. DeepSpeed's CPU Adam builds itself with
  # ninja on first use (a minute or two), outside the timed steps.
  (repo=$PWD; source bench/deepspeed/install_wheels.sh && ds_install_wheels "$OUT" &&
    OMP_NUM_THREADS=$T timeout 400 python3 bench/deepspeed/cpu_adam_peer.py --sizes 1e8,4e8 --threads $T) \
    > "$OUT/cpu_adam_deepspeed.log" 2>&1
  while read -r line; do summary+=("DeepSpeed: $line"); done < <(grep '^{' "$OUT/cpu_adam_deepspeed.log")
  grep -q '^{' "$OUT/cpu_adam_deepspeed.log" || summary+=("DeepSpeed failed: $(tail -3 "$OUT/cpu_adam_deepspeed.log")")
fi

if has speed; then
  COMMON="--model gpt2-1.5b --cluster $CLUSTER --micro-batch 8 --seq 1024 --precision bf16 --checkpointing none --steps $STEPS --warmup-steps 5"
  for st in 0 1 2 3; do
    timeout 100 $RUN run $COMMON --gpus 1 --stage $st --report "$OUT/run_s${st}.json" > "$OUT/run_s${st}.log" 2>&1
    echo "stage $st rc=$?"; sed -n '/^memory per GPU/,$p' "$OUT/run_s${st}.log" | head -45
    summary+=("stage $st, 1 GPU: $(tokens "$OUT/run_s${st}.log") | $(grep -E 'total \(device' "$OUT/run_s${st}.log" | tr -s ' ')")
  done
  for peer in "" "--compile"; do
    PYTHONUNBUFFERED=1 timeout 200 python3 bench/exec/pytorch_peer.py --steps $STEPS $peer > "$OUT/peer$peer.log" 2>&1
    summary+=("peer ${peer:-eager}: $(python3 -c "import json;d=json.loads(open('$OUT/peer$peer.log').read().strip().splitlines()[-1]);print(f\"{d['tokens_per_second']:.0f} tokens/s, {d['step_seconds_median']*1e3:.1f} ms, peak alloc {d['peak_allocated_gib']:.2f} GiB\")" 2>&1)")
  done
fi
if has recompute; then
  for st in ${RC_STAGES:-0 3}; do
    for ck in none selective; do
      timeout 100 $RUN run --model gpt2-1.5b --cluster $CLUSTER --micro-batch 8 --seq 1024 --precision bf16 \
        --checkpointing $ck --steps $STEPS --warmup-steps 5 --gpus 1 --stage $st --report "$OUT/rc_s${st}_$ck.json" \
        > "$OUT/rc_s${st}_$ck.log" 2>&1
      echo "recompute stage $st $ck rc=$?"
      summary+=("stage $st, checkpointing $ck: $(tokens "$OUT/rc_s${st}_$ck.log")")
      summary+=("  $(grep -E '^ *activations ' "$OUT/rc_s${st}_$ck.log" | head -1 | tr -s ' ')")
      summary+=("  $(grep -E 'total \(device|allocator peak' "$OUT/rc_s${st}_$ck.log" | tr -s ' ' | cut -c1-140 | tr '\n' ';')")
      summary+=("  $(grep -E '^  (step .*predicted|forward )' "$OUT/rc_s${st}_$ck.log" | tr -s ' ' | tr '\n' ';')")
    done
  done
fi
finish
