#!/usr/bin/env bash
# Fuzzes zeroplan's parsers (fuzz/): builds the libFuzzer targets in build-fuzz with clang (ASan + UBSan), then runs
# each target for SECONDS from its seeds (fuzz/corpus/TARGET and the repository's files of its format, read only)
# and prints the executions per target.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]       default: 600 s, every target (fuzz/parser_inputs.cmake)
#
# New corpus entries and crash files go to a scratch folder, never into the repository:
# $ZEROPLAN_FUZZ_WORK (default /tmp/zeroplan-fuzz)/TARGET/{corpus,crash-*,timeout-*,leak-*,oom-*,log.txt}.
# A later run starts from the seeds plus what earlier runs kept there. Exits 1 when any target found a crash, a
# hang (an input over ZEROPLAN_FUZZ_TIMEOUT s), a leak or an input needing more than ZEROPLAN_FUZZ_RSS_MB; the
# files are named in the output: replay one with build-fuzz/fuzz/zeroplan_fuzz_TARGET FILE, keep it as a
# regression test in tests/fuzz/data/TARGET/.
# ZEROPLAN_FUZZ_PARALLEL targets run at once (default 1; each is one process on one core). scripts/test.sh runs
# this with a short duration after the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-600}
shift || true
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
  echo "zeroplan fuzz: expected a duration in seconds (>= 1) as the first argument, got '$seconds'" >&2
  exit 2
fi
timeout_s=${ZEROPLAN_FUZZ_TIMEOUT:-10}
rss_mb=${ZEROPLAN_FUZZ_RSS_MB:-2048}
parallel=${ZEROPLAN_FUZZ_PARALLEL:-1}
work=${ZEROPLAN_FUZZ_WORK:-/tmp/zeroplan-fuzz}
build=build-fuzz

# libFuzzer is part of clang's compiler-rt (scripts/setup.sh installs clang-14 and libclang-rt-14-dev). The
# compilers are named with their version: Debian's clang-14 package installs clang-14 and clang++-14, and the
# unversioned names come only with the `clang` package, which a fresh Debian 12 does not have.
if [ ! -f "$build/build.ninja" ]; then
  CC=${ZEROPLAN_FUZZ_CC:-clang-14} CXX=${ZEROPLAN_FUZZ_CXX:-clang++-14} \
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZEROPLAN_BUILD_FUZZERS=ON \
    -DZEROPLAN_BUILD_CUDA=OFF -DZEROPLAN_BUILD_GUI=OFF -DZEROPLAN_BUILD_MPI=OFF -DZEROPLAN_BUILD_TESTS=OFF \
    -DZEROPLAN_BUILD_BENCHMARKS=OFF >/dev/null
fi
build_start=$(date +%s)
cmake --build "$build" --target zeroplan_fuzzers -j "$(nproc)"
echo "zeroplan fuzz: build $(($(date +%s) - build_start)) s"

# fuzz-targets.txt (fuzz/parser_inputs.cmake): per line a target, then its seed folders (fuzz/corpus/TARGET and
# the repository's own files of that format).
declare -A seeds_of
known=()
while read -r name folders; do
  known+=("$name")
  seeds_of[$name]=$folders
done < "$build/fuzz-targets.txt"
targets=("$@")
if ((${#targets[@]} == 0)); then targets=("${known[@]}"); fi
for target in "${targets[@]}"; do
  if [[ ! " ${known[*]} " =~ " $target " ]]; then
    echo "zeroplan fuzz: unknown target '$target'; known: ${known[*]}" >&2
    exit 2
  fi
done

run_target() {
  local target=$1 dir="$work/$1"
  mkdir -p "$dir/corpus"
  # The scratch corpus comes first: libFuzzer adds new inputs to the first folder only. The seed folders are
  # separate words (no spaces in their paths: fuzz/parser_inputs.cmake).
  local code=0
  # shellcheck disable=SC2086
  "$build/fuzz/zeroplan_fuzz_$target" "$dir/corpus" ${seeds_of[$target]} -max_total_time="$seconds" \
    -timeout="$timeout_s" -rss_limit_mb="$rss_mb" -artifact_prefix="$dir/" -print_final_stats=1 \
    >"$dir/log.txt" 2>&1 || code=$?
  echo "$code" >"$dir/exit"
}

start=$(date +%s)
running=0
for target in "${targets[@]}"; do
  rm -f "$work/$target"/{crash,timeout,leak,oom,slow-unit}-* "$work/$target/exit" 2>/dev/null || true
  run_target "$target" &
  running=$((running + 1))
  if ((running >= parallel)); then
    wait -n || true
    running=$((running - 1))
  fi
done
wait

failed=0
printf '%-20s %12s %8s %10s %8s  %s\n' target executions seconds exec/s corpus findings
for target in "${targets[@]}"; do
  code=$(cat "$work/$target/exit" 2>/dev/null || echo "no exit status")
  log="$work/$target/log.txt"
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  took=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
  corpus=$(find "$work/$target/corpus" -type f | wc -l)
  findings=$(find "$work/$target" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'timeout-*' -o -name 'leak-*' \
             -o -name 'oom-*' \) | sort)
  rate=-
  if [ -n "$runs" ] && [ -n "$took" ] && [ "$took" -gt 0 ]; then rate=$((runs / took)); fi
  printf '%-20s %12s %8s %10s %8s  %s\n' "$target" "${runs:-?}" "${took:-?}" "$rate" "$corpus" \
    "$( [ -n "$findings" ] && echo "$(echo "$findings" | wc -l) (see below)" || echo none)"
  if [ -n "$findings" ] || [ "$code" != 0 ]; then
    failed=1
    echo "zeroplan fuzz: $target failed (exit $code); log $log" >&2
    grep -E '^(==[0-9]+==ERROR|SUMMARY|zeroplan fuzz:|.*runtime error:|ALARM|Test unit written)' "$log" | head -8 >&2 || true
    for file in $findings; do echo "  finding: $file" >&2; done
  fi
done
echo "zeroplan fuzz: ${#targets[@]} targets, ${seconds} s each, $(($(date +%s) - start)) s in all; scratch $work"
exit "$failed"
