#!/usr/bin/env bash
# Runs the whole test suite: installs/builds as needed (scripts/setup.sh), then every test through ctest, then
# every parser fuzzed for a bounded time (scripts/fuzz.sh).
# GPU tests skip themselves when no GPU is present; GUI tests run offscreen (QT_QPA_PLATFORM=offscreen).
# .ci/run runs exactly this script.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The GUI is part of what the README promises: fail when it was not built or its tests are not registered.
if [ ! -x build/gui/zeroplan-gui ]; then
  echo "zeroplan test: build/gui/zeroplan-gui was not built" >&2
  exit 1
fi
gui_tests=$(ctest --test-dir build -N -L gui | sed -n 's/^Total Tests: //p')
if [ "${gui_tests:-0}" -eq 0 ]; then
  echo "zeroplan test: no GUI tests registered (label gui)" >&2
  exit 1
fi
ctest --test-dir build --output-on-failure -j "$(nproc)"
# Every parser fuzzed for a bounded time (ZEROPLAN_FUZZ_SECONDS per target, default 30), one target per core, from
# the seeds in fuzz/corpus: a crash, hang or leak fails the run and names the input file (scripts/fuzz.sh). 30 s, not
# 60: a clean clone's run took 31.5 min on the 2-core machine with 60 (2026-11-30), over CI's 30 (the brief); the
# fuzzing is 4 of them with 60, 2 with 30.
ZEROPLAN_FUZZ_PARALLEL=${ZEROPLAN_FUZZ_PARALLEL:-$(nproc)} ZEROPLAN_FUZZ_WORK=${ZEROPLAN_FUZZ_WORK:-$(mktemp -d)} \
  scripts/fuzz.sh "${ZEROPLAN_FUZZ_SECONDS:-30}"
