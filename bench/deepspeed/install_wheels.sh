#!/bin/bash
# Sourced on the GPU machine by bench/deepspeed/device_matrix.sh and bench/exec/device_run_one.sh (part cpu_adam):
# installs the carried wheels (bench/deepspeed/build_wheels.sh, carry=["bench/deepspeed/wheels"]) into
# bench/deepspeed/.site without network, once per machine, and puts that folder on PYTHONPATH. Needs $repo (the
# repository root) and $1, a folder for install.log; returns non-zero with the reason printed when it cannot.
ds_install_wheels() {
  local logs="$1" site="$repo/bench/deepspeed/.site" wheels="$repo/bench/deepspeed/wheels"
  if ! PYTHONPATH="$site" python3 -c "import deepspeed" 2>/dev/null; then
    [ -d "$wheels" ] || { echo "no wheels: run bench/deepspeed/build_wheels.sh here and carry bench/deepspeed/wheels"; return 1; }
    local packages=() wheel
    for wheel in "$wheels"/*.whl; do
      # Keep the machine's numpy (its torch was built against it) when it has one.
      case $(basename "$wheel") in numpy-*) python3 -c "import numpy" 2>/dev/null && continue ;; esac
      packages+=("$wheel")
    done
    python3 -m pip install --no-index --no-deps --target "$site" "${packages[@]}" > "$logs/install.log" 2>&1 ||
      { echo "installing the wheels failed:"; tail -20 "$logs/install.log"; return 1; }
  fi
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
}
