# Sourced by the device scripts (bench/exec/device_run_one.sh, device_run_multi.sh) after DEFAULT_PARTS is set:
# the environment every GPU call needs, the build of the executor in build-dev (liburing and zlib from the carried
# bench/deps where the machine lacks them: bench/exec/carry_deps.sh), the parts asked for ($@), and the summary.
# Logs and reports go to a scratch folder that finish() packs into $OUT/logs.tar.gz (a call brings back 8 files at
# most); the summary is printed last and kept in $OUT/summary.txt.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # NVLink multicast stays off
PARTS="${*:-$DEFAULT_PARTS}"
has() { [[ " $PARTS " == *" $1 "* ]]; }
FINAL_OUT=${OUT:-/tmp/zeroplan-out}
OUT=$(mktemp -d /tmp/zeroplan-logs.XXXX)
mkdir -p "$FINAL_OUT"
BUILD=build-dev
[ -d bench/deps/liburing ] && export PKG_CONFIG_PATH="$PWD/bench/deps/liburing/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
ZLIB_HINT=(); [ -f /usr/include/zlib.h ] || ZLIB_HINT=(-DZLIB_ROOT="$PWD/bench/deps/zlib")
STEPS=${STEPS:-20}
N=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "$N x $GPU_NAME, $(nproc) cores"
t0=$(date +%s)
cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DZEROPLAN_BUILD_GUI=OFF -DZEROPLAN_BUILD_BENCHMARKS=ON \
  -DZEROPLAN_BUILD_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 "${ZLIB_HINT[@]}" > "$OUT/build.log" 2>&1
grep "zeroplan:" "$OUT/build.log"
# The GPU tests' binary only when the parts run it: a fresh machine builds the CLI alone in less time.
TARGETS=(zeroplan); has tests && TARGETS+=(zeroplan_exec_cuda_tests)
if ! ninja -C $BUILD -j"$(nproc)" "${TARGETS[@]}" >> "$OUT/build.log" 2>&1; then
  grep -E "error|FAILED" "$OUT/build.log" | head -40; cp "$OUT/build.log" "$FINAL_OUT/"; exit 1
fi
echo "build: $(( $(date +%s) - t0 )) s"
RUN=$BUILD/cli/zeroplan
summary=()
tokens() { grep -E '^  [0-9]+ tokens/s' "$1" | cut -c1-70; }

# The executor's GPU tests (GTEST_FILTER narrows them), when the parts ask for them.
if has tests; then
  timeout 240 $BUILD/tests/exec/zeroplan_exec_cuda_tests > "$OUT/gpu_tests.log" 2>&1; rc=$?
  grep -E "FAILED|Failure|Expected|Which is|actual" "$OUT/gpu_tests.log" | head -40
  summary+=("gpu tests rc=$rc ($(grep -c '\[       OK' "$OUT/gpu_tests.log") ok, $(grep -c '^\[  FAILED' "$OUT/gpu_tests.log") failed lines)")
fi

finish() {
  { echo "================ summary ($PARTS, $N x $GPU_NAME) ================"
    for s in "${summary[@]}"; do echo "$s"; done; } | tee "$FINAL_OUT/summary.txt"
  tar czf "$FINAL_OUT/logs.tar.gz" -C "$OUT" .
}
