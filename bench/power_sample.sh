#!/usr/bin/env bash
# Runs a command while nvidia-smi samples every GPU's SM clock, power draw and temperature every 100 ms, then prints
# per GPU what the busy samples (power over BUSY_WATTS, default 300 W) show: the SM clock's median and 10th
# percentile, the power's median, and the share of busy samples within 25 W of the power limit. A GPU held at its
# power limit runs its GEMMs below the boost clock (issue 35: 2026-11-30, bench/llama/results/2026-11-30-h200-power/).
#   bash bench/power_sample.sh SAMPLES.csv COMMAND [ARGS...]     (the command's exit status is this script's)
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: bash bench/power_sample.sh SAMPLES.csv COMMAND [ARGS...]" >&2; exit 2; }
samples=$1
shift
nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,power.limit,temperature.gpu --format=csv,noheader,nounits \
  -lms 100 > "$samples" 2>&1 &
sampler=$!
"$@"
rc=$?
kill "$sampler" 2>/dev/null
wait "$sampler" 2>/dev/null
python3 - "$samples" "${BUSY_WATTS:-300}" <<'PY'
import sys
from collections import defaultdict
path, busy_watts = sys.argv[1], float(sys.argv[2])
gpus = defaultdict(list)
for line in open(path):
    f = [x.strip() for x in line.split(",")]
    try:
        gpus[int(f[1])].append((float(f[2]), float(f[3]), float(f[4]), float(f[5])))
    except (IndexError, ValueError):
        continue
for gpu, rows in sorted(gpus.items()):
    busy = [r for r in rows if r[1] > busy_watts]
    if not busy:
        print(f"GPU {gpu}: no sample over {busy_watts:.0f} W ({len(rows)} samples)")
        continue
    clocks = sorted(r[0] for r in busy)
    power = sorted(r[1] for r in busy)
    at_limit = sum(1 for r in busy if r[1] >= r[2] - 25) / len(busy)
    print(f"GPU {gpu}: {len(busy)} busy samples of {len(rows)}: SM clock median {clocks[len(clocks) // 2]:.0f} MHz, "
          f"p10 {clocks[len(clocks) // 10]:.0f} MHz; power median {power[len(power) // 2]:.0f} W of "
          f"{busy[0][2]:.0f} W, {100 * at_limit:.0f}% of busy samples within 25 W of it; temperature max "
          f"{max(r[3] for r in busy):.0f} C")
PY
exit $rc
