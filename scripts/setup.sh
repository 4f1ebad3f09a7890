#!/usr/bin/env bash
# Installs what zeroplan needs on Debian 12 (idempotent), configures and builds it in build/.
# The GUI (zeroplan-gui) is always built (-DZEROPLAN_BUILD_GUI=ON: a missing Qt piece stops the configure step
# with its package name). The CUDA executor is built when a CUDA toolkit (nvcc), NCCL and cuDNN are present (e.g.
# /usr/local/cuda); without them the planner, simulator, CPU executor backend and GUI are still built.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build pkg-config libeigen3-dev nlohmann-json3-dev libcli11-dev
          libgtest-dev libgmock-dev libbenchmark-dev libopenmpi-dev openmpi-bin
          liburing-dev  # the executor's NVMe offload (ZeRO-Infinity): io_uring through liburing
          # checkpoints: CRC-32 (zlib); the export test reads model.safetensors with the safetensors package
          zlib1g-dev python3-numpy python3-pip
          # scripts/fuzz.sh (run by test.sh): libFuzzer ships with clang's compiler-rt
          clang-14 libclang-rt-14-dev
          # zeroplan-gui: Qt 6 Widgets and Test (qt6-base-dev), Charts, and the OpenGL module Charts needs.
          qt6-base-dev qt6-charts-dev libqt6opengl6-dev libgl1-mesa-dev xvfb xauth)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "zeroplan setup: installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then sudo=sudo; else sudo=; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# safetensors has no Debian 12 package: pip, pinned, for Debian's own interpreter (the checkpoint export test
# reads model.safetensors with it through /usr/bin/python3).
if ! /usr/bin/python3 -c "import safetensors" 2>/dev/null; then
  /usr/bin/python3 -m pip install -q --break-system-packages "safetensors==0.4.5"
fi

jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DZEROPLAN_BUILD_GUI=ON
cmake --build build -j "$jobs"

# What was built, said at the end where it is seen: the CUDA executor is the one part that depends on what the
# machine has (a CUDA toolkit, NCCL and cuDNN), so its absence is stated, not left to a configure line.
echo "zeroplan setup: built build/cli/zeroplan (plan, simulate, recommend, calibrate, run --backend cpu) and" \
     "build/gui/zeroplan-gui"
if [ -f build/exec/libzeroplan_exec_cuda.a ]; then
  echo "zeroplan setup: the CUDA executor is built (zeroplan run --backend cuda, NCCL across GPUs)"
else
  echo "zeroplan setup: the CUDA executor is NOT built: no CUDA toolkit with NCCL and cuDNN was found (nvcc in" \
       "/usr/local/cuda/bin or on PATH, NCCL's and cuDNN 9's headers and libraries). Install them and run scripts/setup.sh again" \
       "to train on GPUs; everything else works without them." >&2
fi
