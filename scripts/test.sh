#!/usr/bin/env bash
# Runs the whole test suite: installs/builds as needed (scripts/setup.sh), then every test through ctest.
# GPU tests skip themselves when no GPU is present. .ci/run runs exactly this script.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"
