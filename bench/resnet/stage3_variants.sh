#!/usr/bin/env bash
# Stage 3's step over stage 2's on ResNet-101 taken apart by variants, in one device call (issue 37: the planner puts
# stage 3 at stage 2's step, the executor runs it 1.5-2.3 ms longer on 2x H200). Each variant is one `zeroplan run`
# (fp16, micro-batch 128 per GPU) with NCCL settings or a DeepSpeed config beside the stage, its median step traced
# beside the plan's (`zeroplan run --trace`: $name.trace.json, and .rank1 for the second GPU, in the logs):
#   run(command="bash bench/resnet/stage3_variants.sh", kind="nvidia-h200-x2", carry=["bench/deps"])
# PARTS (default "build variants pageable"): build the CLI; the VARIANTS below (name|environment|flags); the pageable
# cast probe (bench/deepspeed/pageable_cast_probe.py) on every GPU at once, as DeepSpeed's ranks run it.
DEFAULT_PARTS="build variants pageable" LOG_NAME=s3var
source bench/device_call.sh
W=/tmp/s3var-work
mkdir -p $W
has build && build_dev zeroplan
cat > $W/all_persistent.json <<'JSON'
{"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 1000000000}}
JSON
cat > $W/none_persistent.json <<'JSON'
{"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}
JSON
for pf in 1000000 5000000; do
  echo "{\"zero_optimization\": {\"stage\": 3, \"stage3_prefetch_bucket_size\": $pf}}" > $W/prefetch_$pf.json
done
VARIANTS=${VARIANTS:-"s2||--stage 2
s3||--stage 3
s3_ch2|NCCL_MAX_NCHANNELS=2|--stage 3
s3_ch8|NCCL_MAX_NCHANNELS=8|--stage 3
s3_simple|NCCL_PROTO=Simple|--stage 3
s3_allpersist||--ds-config $W/all_persistent.json
s3_nopersist||--ds-config $W/none_persistent.json
s0_ch2|NCCL_MAX_NCHANNELS=2|--stage 0
s2_ch2|NCCL_MAX_NCHANNELS=2|--stage 2
s3o||--stage 3 --offload-optimizer cpu
s3o_t8||--stage 3 --offload-optimizer cpu --cpu-threads-per-rank 8"}
if has variants; then
  while IFS='|' read -r name envs flags; do
    [ -z "$name" ] && continue
    need 45 "variant $name" || break
    env $envs timeout 120 $RUN run --model resnet101 --backend cuda --precision fp16 --gpus $N --micro-batch 128 \
      --steps ${STEPS:-25} --warmup-steps 5 $flags --cluster h200x$N --force --report $L/$name.json --trace $L/$name.trace.json \
      > "$L/$name.log" 2>&1
    rc=$?
    say "$name rc=$rc [$envs $flags]: $(grep -E '^  (step .*predicted|forward .*backward|exposed|reduce_scatter|all_gather|offload \()' "$L/$name.log" | sed -E 's/ +/ /g' | tr '\n' ';' | cut -c1-520)"
  done <<< "$VARIANTS"
fi
if has pageable; then
  need 60 "pageable" && {
    for g in $(seq 0 $((N - 1))); do
      CUDA_VISIBLE_DEVICES=$g python3 bench/deepspeed/pageable_cast_probe.py --elements 1000000000 --threads $(( $(nproc) / N )) \
        --repeats 3 > $L/pageable_$g.json 2>&1 &
    done
    wait
    for g in $(seq 0 $((N - 1))); do say "pageable rank $g (all at once): $(cat $L/pageable_$g.json | cut -c1-400)"; done
    python3 bench/deepspeed/pageable_cast_probe.py --elements 1000000000 --threads $(( $(nproc) / N )) --repeats 3 > $L/pageable_alone.json 2>&1
    say "pageable alone: $(cut -c1-400 $L/pageable_alone.json)"
  }
fi
