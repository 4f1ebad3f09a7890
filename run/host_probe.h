// The training host's speed at the work DeepSpeed's Python does, measured the way the stored DeepSpeed rows were
// (bench/deepspeed/host_probe.py: seconds per small eager CUDA operation issued back to back, x.add_ on 256 floats,
// median of 5 timings of 20,000). `zeroplan calibrate` runs it so that a calibrated cluster times DeepSpeed's
// stage-3 host costs for the machine it describes (ClusterDescription::probed_eager_op_seconds). The probe needs
// PyTorch with CUDA, which the training host of a DeepSpeed job has and zeroplan does not: it runs as a child
// process of the Python interpreter, and where that cannot run the reason is returned instead.
#pragma once

#include <string>
#include <variant>

namespace zeroplan {

struct HostProbe {
  double eager_op_seconds = 0.0;     // per small eager CUDA operation
  double python_call_seconds = 0.0;  // per call of a small Python function
  std::string command;               // what ran, for the provenance
};

// Runs `$ZEROPLAN_PYTHON` (default python3) on data_directory()/bench/deepspeed/host_probe.py, waiting at most
// timeout_seconds. Returns the figures, or why there are none (no interpreter, no torch, no CUDA device, no
// script, a timeout, output that is not the probe's JSON), in one line.
std::variant<HostProbe, std::string> run_host_probe(double timeout_seconds = 300.0);

}  // namespace zeroplan
