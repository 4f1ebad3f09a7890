#!/usr/bin/env bash
# Where the executor's Llama step spends the GPU's time, kernel by kernel (issue 35: Llama-2 7B's backward on 2x H200
# takes ~210 ms where its GEMMs at cuBLAS's measured rate and cuDNN's attention add to ~165 ms). Nsight Compute
# (ncu: each kernel's duration, kernels serialised) over `zeroplan run`; the timed steps' kernels summarised by name
# and grid (bench/llama/kernel_summary.py), in the summary and the logs:
#   run(command="bash bench/llama/kernel_profile.sh", kind="nvidia-h200-x2", carry=["bench/deps"])
# PROFILES lines: name|gpus|layers|flags[|config] (layers: the config, bench/llama/configs/llama2-7b.json unless
# named, cut to that many decoder layers).
DEFAULT_PARTS="build profiles" LOG_NAME=kprof
source bench/device_call.sh
has build && build_dev zeroplan
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { say "ncu not found"; exit 0; }
say "ncu: $($NCU --version 2>&1 | tail -1)"
PROFILES=${PROFILES:-"l7x8_s0_1gpu|1|8|--stage 0 --micro-batch 2 --seq 2048"}
if has profiles; then
  while IFS='|' read -r name gpus layers flags config; do
    [ -z "$name" ] && continue
    need 120 "profile $name" || break
    if [ ! -f "bench/llama/configs/${config:-llama2-7b.json}" ]; then
      say "profile $name: no config bench/llama/configs/${config} (PROFILES field 5: a file of bench/llama/configs/)"
      continue
    fi
    python3 - "$layers" "${config:-llama2-7b.json}" > $L/$name.config.json <<'PY'
import json, sys
c = json.load(open("bench/llama/configs/" + sys.argv[2]))
c["num_hidden_layers"] = int(sys.argv[1])
print(json.dumps(c))
PY
    # Each kernel's duration at the clocks the GPU runs at (no clock lock, no cache flush), one pass per kernel.
    timeout 400 $NCU --metrics gpu__time_duration.sum --clock-control none --cache-control none --csv \
      $RUN run --model $L/$name.config.json --cluster h200x$N --gpus $gpus --precision bf16 $flags --steps ${STEPS:-2} \
      --warmup-steps 1 --force > "$L/$name.ncu.csv" 2> "$L/$name.log"
    rc=$?
    say "$name rc=$rc: $(grep -c . $L/$name.ncu.csv) lines"
    python3 bench/llama/kernel_summary.py "$L/$name.ncu.csv" ${STEPS:-2} > $L/$name.summary.txt 2>&1
    while read -r line; do say "  $line"; done < $L/$name.summary.txt
  done <<< "$PROFILES"
fi
