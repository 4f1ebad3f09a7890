#!/usr/bin/env bash
# Issue 39: ZeRO-Infinity's parameter offload to NVMe, ours beside DeepSpeed 0.19.8's own, in one device call (N = the
# machine's GPUs), GPT-2 at micro-batch 8 x 1024, bf16, stage 3, optimizer on the CPU, parameters on NVMe:
#   run(command="DEADLINE=560 bash bench/deepspeed/device_param_nvme.sh", carry=[".gl", "bench/deps"])
# with bench/deepspeed/wheels (DeepSpeed 0.19.8 and its dependencies) and bench/deps/libaio (bench/exec/carry_deps.sh
# copies Debian's libaio-dev there: DeepSpeed's async_io op is built against libaio at its first use, and the GPU
# machines have no libaio headers) in the tree.
# PARTS (default "build ops rows"):
#   build  the CLI in build-dev
#   ops    DeepSpeed's async_io and cpu_adam ops built once (JIT, torch.utils.cpp_extension; timed)
#   rows   for each model of PN_MODELS (default "gpt2-124m gpt2-355m"; gpt2-1.5b too): `zeroplan plan` (DeepSpeed engine, its config
#          written with --emit-ds-config, nvme_path set to a fresh folder), bench/deepspeed/ds_peer.py under torchrun
#          on N GPUs (OMP threads: the cores over the ranks), then `zeroplan run` with the same plan and
#          --offload-param nvme in a fresh folder; the table last (ours, DeepSpeed, the ratio, each beside its plan)
# Logs in $OUT/logs.tar.gz, the summary printed last and kept in $OUT/summary.txt.
DEFAULT_PARTS="build ops rows" LOG_NAME=param-nvme
source bench/device_call.sh
CLUSTER=h200x$N
[ -f configs/clusters/$CLUSTER.json ] || CLUSTER=h200x4
NV=${NVME_DIR:-/var/tmp/zeroplan-param-nvme}
STEPS=${STEPS:-6}
W_CFG=/tmp/param-nvme-work
mkdir -p $W_CFG

install_wheels /tmp/ds-site "no bench/deepspeed/wheels (carry them): DeepSpeed must already be installed" \
  bench/deepspeed/wheels/*.whl
python_versions torch deepspeed
if [ -f bench/deps/libaio/include/libaio.h ]; then
  export CPATH="$PWD/bench/deps/libaio/include${CPATH:+:$CPATH}"
  export LIBRARY_PATH="$PWD/bench/deps/libaio/lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
  export LD_LIBRARY_PATH="$PWD/bench/deps/libaio/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  say "no bench/deps/libaio (bench/exec/carry_deps.sh): DeepSpeed's async_io op needs libaio"
fi
export TORCH_EXTENSIONS_DIR=/tmp/ds-extensions MAX_JOBS=$(nproc)
# The GPU machines set TORCH_CUDA_ARCH_LIST to "9.0a", which DeepSpeed 0.19.8's JIT builder cannot parse
# (op_builder/builder.py compute_capability_args: int("0a")); its ops are built for 9.0 here.
export TORCH_CUDA_ARCH_LIST="9.0"

if has build; then
  export BUILD_BENCHMARKS=ON  # nvme_io_benchmark, a plain program
  build_dev zeroplan nvme_io_benchmark
fi
[ -x $RUN ] || { say "no $RUN: build first (PARTS='build ...')"; exit 1; }

# The disk under $NV as the executor's store moves it (bench/nvme_io_benchmark.cpp: io_uring, O_DIRECT, 1 MiB
# blocks, 8 in flight), written into a copy of the machine's description, on which both engines plan the rows:
# disks of one machine kind differ (one H200 machine: 1.22 / 2.61 GB/s read / write in h200x1.json, another 0.92 /
# 1.1 GB/s by dd on 2026-11-29).
PLAN_CLUSTER=$CLUSTER
if has rows && need 60 "disk"; then
  mkdir -p "$NV"
  timeout 60 $BUILD/bench/nvme_io_benchmark --dir "$NV" --gib 1 --piece-mib 64 --queue-depth 8 --block-kib 1024 \
    --repeats 3 > "$L/disk.jsonl" 2> "$L/disk.err"
  if python3 - "$L/disk.jsonl" configs/clusters/$CLUSTER.json "$W_CFG/$CLUSTER-disk.json" > "$L/disk.log" 2>&1 <<'PY'
import json, sys
rates = {}
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line)
        if r["method"] == "nvme_store":
            rates[r["op"]] = r["gb_per_s"] * 1e9
c = json.load(open(sys.argv[2]))
c["nvme"]["read_bandwidth"], c["nvme"]["write_bandwidth"] = rates["read"], rates["write"]
c["name"] = c["name"] + "-disk"
note = ("this machine's disk, bench/nvme_io_benchmark (io_uring, O_DIRECT, 1 MiB blocks, 8 in flight, 1 GiB in "
        "64 MiB pieces, median of 3), measured in this call")
if isinstance(c.get("provenance"), dict):  # the bundled files keep a note per field, calibrate's output one text
    c["provenance"]["nvme.read_bandwidth"] = note
else:
    c["provenance"] = "nvme: " + note + " | " + c.get("provenance", "")
json.dump(c, open(sys.argv[3], "w"), indent=2)
print(f"disk (nvme_io_benchmark): read {rates['read'] / 1e9:.2f} GB/s, write {rates['write'] / 1e9:.2f} GB/s")
PY
  then PLAN_CLUSTER=$W_CFG/$CLUSTER-disk.json; say "$(cat "$L/disk.log")"
  else say "disk measurement FAILED: $(tail -2 "$L/disk.err" "$L/disk.log" | tr '\n' ' ')"; fi
fi

if has ops && need 120 "DeepSpeed's ops"; then
  t0=$(date +%s)
  timeout $(( $(time_left) - 30 )) python3 -c "
from deepspeed.ops.op_builder import AsyncIOBuilder, CPUAdamBuilder
assert AsyncIOBuilder().is_compatible(True), 'async_io: libaio not found'
AsyncIOBuilder().load(); CPUAdamBuilder().load()" > "$L/ops_build.log" 2>&1
  rc=$?
  say "DeepSpeed ops (async_io, cpu_adam) rc=$rc in $(( $(date +%s) - t0 )) s$( [ $rc -ne 0 ] && echo ": $(grep -iE 'error|assert' "$L/ops_build.log" | tail -2 | tr '\n' ' ' | cut -c1-240)")"
fi

rows=()
if has rows; then
  threads=$(( $(nproc) / N ))
  for m in ${PN_MODELS:-gpt2-124m gpt2-355m}; do
    need 180 "row $m" || break
    # Both sides train the peers' GPT-2 (bench/deepspeed/models: vocabulary 50304, no dropout), the executor's own
    # padding and dropout 0 being the same network.
    case $m in gpt2-124m) desc=bench/deepspeed/models/gpt2-124m-v50304.json ;;
               gpt2-355m) desc=bench/deepspeed/models/gpt2-350m-v50304.json ;;
               gpt2-1.5b) desc=bench/deepspeed/models/gpt2-1.5b-v50304.json ;;
               *) say "row $m: no DeepSpeed model description (gpt2-124m, gpt2-355m, gpt2-1.5b)"; continue ;; esac
    S=(--model $desc --cluster $PLAN_CLUSTER --gpus $N --micro-batch 8 --seq 1024 --precision bf16 --stage 3
       --offload-optimizer cpu --offload-param nvme)
    $RUN plan "${S[@]}" --emit-ds-config $W_CFG/$m.ds.json --overwrite -f json > "$L/plan_ds_$m.json" 2> "$L/plan_ds_$m.err" \
      || { say "$m: zeroplan plan FAILED: $(tail -1 "$L/plan_ds_$m.err")"; continue; }
    rm -rf "$NV" && mkdir -p "$NV/ds"
    python3 - "$W_CFG/$m.ds.json" "$NV/ds" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["zero_optimization"]["offload_param"]["nvme_path"] = sys.argv[2]
json.dump(c, open(sys.argv[1], "w"), indent=2)
PY
    OMP_NUM_THREADS=$threads timeout $(( $(time_left) - 60 )) torchrun --standalone --nproc_per_node=$N \
      bench/deepspeed/ds_peer.py --model $desc --ds-config $W_CFG/$m.ds.json --cluster $CLUSTER --steps $STEPS \
      --name ds_pnvme_$m --out "$L/ds_$m.json" --plan-json "$L/plan_ds_$m.json" > "$L/ds_$m.log" 2>&1
    say "DeepSpeed $m rc=$?: $(python3 -c "
import json; m = json.load(open('$L/ds_$m.json'))['runs'][0]['measured']
r, w = m.get('param_swap_read_bytes_per_step'), m.get('param_swap_write_bytes_per_step')
print(f\"step {1e3 * m['step_seconds']:.1f} ms, device {m['device_used_gib']:.2f} GiB, its parameter swapper per step: read {r if r is not None else float('nan'):,.0f} B, written {w if w is not None else float('nan'):,.0f} B\")" 2>/dev/null || grep -m1 -iE 'error' "$L/ds_$m.log" | cut -c1-200)"
    rm -rf "$NV" && mkdir -p "$NV/ours"
    timeout $(( $(time_left) > 40 ? $(time_left) - 20 : 20 )) $RUN run "${S[@]}" --nvme-path "$NV/ours" --steps $STEPS \
      --warmup-steps 2 --report "$L/ours_$m.json" > "$L/ours_$m.log" 2>&1
    say "ours $m rc=$?: $(grep -E 'step .* predicted' "$L/ours_$m.log" | tr -s ' ')"
    say "  $(grep -oE 'parameter NVMe swapping.*per step \([^)]*\)|NVMe \(swap files[^|]*' "$L/ours_$m.log" | head -1)"
    # The same with every chunk on NVMe (max_in_cpu 0): the disk's rows, whatever DeepSpeed's default max_in_cpu (1e9 elements) keeps in host memory.
    rm -rf "$NV" && mkdir -p "$NV/stream"
    printf '{"train_micro_batch_size_per_gpu": 8, "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "%s", "max_in_cpu": 0}}}\n' \
      "$NV/stream" > $W_CFG/$m.stream.json
    timeout $(( $(time_left) > 40 ? $(time_left) - 20 : 20 )) $RUN run "${S[@]}" --nvme-path "$NV/stream" --ds-config $W_CFG/$m.stream.json \
      --steps $STEPS --warmup-steps 2 --report "$L/ours_stream_$m.json" > "$L/ours_stream_$m.log" 2>&1
    say "ours, every chunk on NVMe, $m rc=$?: $(grep -E 'step .* predicted' "$L/ours_stream_$m.log" | tr -s ' ')"
    say "  $(grep -oE 'parameter NVMe swapping.*per step \([^)]*\)' "$L/ours_stream_$m.log" | head -1)"
    rows+=("$m")
  done
  rm -rf "$NV"
  python3 - "$L" "${rows[@]}" <<'PY' | tee "$L/table.txt"
import json, sys
L = sys.argv[1]
print("parameters on NVMe, stage 3, optimizer on the CPU (ms: median step; plan: zeroplan plan, its engine's; ratio = "
      "DeepSpeed / ours)")
print(f"  {'model':<11} {'ours ms':>8} {'plan':>8} {'err':>7} {'DS ms':>8} {'DS plan':>8} {'err':>7} {'ratio':>6}"
      f" {'stream ms':>9} {'plan':>8} {'ratio':>6}")
for m in sys.argv[2:]:
    try:
        o = json.load(open(f"{L}/ours_{m}.json"))["measured"]
        ours, ours_plan = 1e3 * o["step_seconds"], 1e3 * o["predicted_step_seconds"]
    except Exception:
        ours = ours_plan = float("nan")
    try:
        d = json.load(open(f"{L}/ds_{m}.json"))["runs"][0]["measured"]
        ds = 1e3 * d["step_seconds"]
        ds_plan = 1e3 * json.load(open(f"{L}/plan_ds_{m}.json"))["plans"][0]["step_seconds"]
    except Exception:
        ds = ds_plan = float("nan")
    try:
        o = json.load(open(f"{L}/ours_stream_{m}.json"))["measured"]
        stream, stream_plan = 1e3 * o["step_seconds"], 1e3 * o["predicted_step_seconds"]
    except Exception:
        stream = stream_plan = float("nan")
    print(f"  {m:<11} {ours:8.1f} {ours_plan:8.1f} {100 * (ours_plan / ours - 1):+6.1f}% {ds:8.1f} {ds_plan:8.1f} "
          f"{100 * (ds_plan / ds - 1):+6.1f}% {ds / ours:6.2f} {stream:9.1f} {stream_plan:8.1f} {ds / stream:6.2f}")
PY
  say "$(cat "$L/table.txt")"
fi
