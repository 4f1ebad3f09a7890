# Sourced by the device scripts that run as one timed call (bench/resnet/device_resnet.sh, bench/lora/device_lora.sh,
# bench/llama/device_llama.sh) after they set DEFAULT_PARTS and LOG_NAME: the environment every GPU call needs, the
# parts asked for (PARTS), the summary lines (say), the call's deadline (DEADLINE seconds after the start, default
# 540: a part that would start later is skipped and says so, so that the logs always come back inside the call's
# limit), and on exit the logs packed into $OUT/logs.tar.gz and the summary printed last and kept in
# $OUT/summary.txt. build_dev TARGET... builds the CLI configuration in build-dev; gpu_tests FILTER runs the GPU tests.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
# The GPU machines set TORCH_CUDA_ARCH_LIST to "9.0a", which DeepSpeed 0.19.8's JIT builder (its CPU Adam, for the
# peers' offload rows) cannot parse (op_builder/builder.py compute_capability_args: int("0a")): its ops built for 9.0.
export TORCH_CUDA_ARCH_LIST="9.0"
PARTS=${PARTS:-$DEFAULT_PARTS}
has() { [[ " $PARTS " == *" $1 "* ]]; }
FINAL_OUT=${OUT:-/tmp/zeroplan-out}
L=$(mktemp -d "/tmp/$LOG_NAME-logs.XXXX")
mkdir -p "$FINAL_OUT"
N=$(nvidia-smi -L | wc -l)
summary=("GPUs: $N x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(nproc) cores")
say() { summary+=("$*"); echo "$*"; }
START=$(date +%s)
time_left() { echo $(( ${DEADLINE:-540} - ($(date +%s) - START) )); }
need() {  # seconds a step needs; false (and said) when the deadline would pass
  if [ "$(time_left)" -lt "$1" ]; then say "skipped (deadline): $2"; return 1; fi
}
finish() {
  printf '%s\n' "${summary[@]}" > "$FINAL_OUT/summary.txt"
  tar czf "$FINAL_OUT/logs.tar.gz" -C "$L" .
  echo "================ summary ($PARTS) ================"; cat "$FINAL_OUT/summary.txt"
}
trap finish EXIT
BUILD=build-dev
RUN=$BUILD/cli/zeroplan

# The executor's release build (no GUI, no benchmarks; liburing and zlib from the carried bench/deps where the
# machine lacks them), the given ninja targets, each step bounded by what is left of the deadline; exits on failure.
build_dev() {
  local t0 limit
  t0=$(date +%s)
  [ -d bench/deps/liburing ] && export PKG_CONFIG_PATH="$PWD/bench/deps/liburing/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  local zlib_hint=(); [ -f /usr/include/zlib.h ] || zlib_hint=(-DZLIB_ROOT="$PWD/bench/deps/zlib")
  limit=$(( $(time_left) > 60 ? $(time_left) - 30 : 30 ))
  timeout $limit cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DZEROPLAN_BUILD_GUI=OFF \
    -DZEROPLAN_BUILD_BENCHMARKS=${BUILD_BENCHMARKS:-OFF} -DZEROPLAN_BUILD_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 "${zlib_hint[@]}" \
    > "$L/build.log" 2>&1
  grep "zeroplan:\|CUDNN" "$L/build.log" | head -3
  limit=$(( $(time_left) > 60 ? $(time_left) - 30 : 30 ))
  if ! timeout $limit ninja -C $BUILD -j"$(nproc)" "$@" >> "$L/build.log" 2>&1; then
    grep -E "error|FAILED" "$L/build.log" | head -30; say "build FAILED (or ran past the deadline)"; exit 1
  fi
  say "build: $(( $(date +%s) - t0 )) s"
}

# The executor's GPU tests of this call (GTEST_FILTER, else the given default filter), their tally in the summary.
gpu_tests() {
  local default_filter=$1 rc
  need 60 "gpu tests" || return 0
  GTEST_FILTER=${GTEST_FILTER:-$default_filter} \
    timeout 300 $BUILD/tests/exec/zeroplan_exec_cuda_tests > "$L/gpu_tests.log" 2>&1; rc=$?
  grep -E "^\[  FAILED|Failure|Expected|Which is|actual|error" "$L/gpu_tests.log" | head -30
  say "gpu tests rc=$rc: $(grep -c '\[       OK' "$L/gpu_tests.log") ok, $(grep -c '^\[  FAILED' "$L/gpu_tests.log") failed lines: $(grep '^\[  FAILED' "$L/gpu_tests.log" | head -8 | cut -c14-90 | tr '\n' ' ')"
}

# The carried wheels (pure Python, or prebuilt libraries) installed once into SITE (the machine's own numpy kept) and
# put on PYTHONPATH; an empty list says MISSING. install_wheels SITE MISSING WHEEL...
install_wheels() {
  local site=$1 missing=$2; shift 2
  if [ ! -d "$site" ]; then
    local wheels=() w
    for w in "$@"; do
      [ -f "$w" ] || continue
      case $(basename "$w") in numpy-*) python3 -c "import numpy" 2>/dev/null && continue ;; esac
      wheels+=("$w")
    done
    if [ ${#wheels[@]} -gt 0 ]; then
      timeout 180 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" \
        "${wheels[@]}" > "$L/install.log" 2>&1 || say "wheel install FAILED: $(tail -2 "$L/install.log" | tr '\n' ' ')"
    else
      say "$missing"
    fi
  fi
  [ -d "$site" ] && export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  return 0
}

# "torch X | transformers Y | ..." for the modules named (bitsandbytes optional: its import error named), or why the
# imports failed; said in the summary. python_versions MODULE...
python_versions() {
  local pyv
  pyv="$(timeout 120 python3 - "$@" 2>"$L/versions.err" <<'PY' | tail -1
import importlib, sys
out = []
for name in sys.argv[1:]:
    out.append(name + " " + importlib.import_module(name).__version__)
try:
    import bitsandbytes; b = bitsandbytes.__version__
except Exception as e:
    b = "unavailable (%s: %s)" % (type(e).__name__, str(e)[:80])
print(" | ".join(out + ["bitsandbytes " + b]))
PY
)"
  [ -n "$pyv" ] || pyv="imports FAILED: $(grep -v Warning "$L/versions.err" | tail -1 | cut -c1-200)"
  say "python: $pyv"
}
