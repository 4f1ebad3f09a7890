// `zeroplan calibrate`'s figures and the cluster description made of them (run/calibration.h runs the
// measurements): each field from this machine where calibrate measured it, else from --base, with the provenance of
// every field saying which; the loader (core/cluster_description.h) then validates it and fills what nothing gave.
#pragma once

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/cluster_description.h"
#include "core/units.h"
#include "run/calibration.h"
#include "run/host_calibration.h"
#include "run/host_probe.h"

namespace zeroplan {

// printf of one number (a figure with its format, for the printed table and the provenance).
std::string format_number(const char* format, double value);

struct GemmPoint {
  std::string label;
  double flops = 0.0;    // of the whole measured call (3 GEMMs for a training pass)
  double seconds = 0.0;
  bool model_shape = false;
};

// Everything the launcher measures on this machine, with the words the provenance keeps.
struct LocalFigures {
  HostFacts host;
  std::string gpu_model;
  Bytes gpu_memory_bytes = 0;
  std::string gpu_memory_source;
  double peak_bf16 = 0.0, peak_fp16 = 0.0, peak_fp32 = 0.0, hbm_bandwidth = 0.0;
  std::string peak_source, hbm_source;
  std::vector<GemmPoint> gemm;
  std::string gemm_source;
  double streaming_bandwidth = 0.0;
  std::string streaming_source;
  // The executor's attention kernels at the model's shape (--model, GPU backend), FLOP/s on the causal work.
  double executor_attention_forward = 0.0, executor_attention_backward = 0.0;
  std::string executor_attention_source;
  double executor_kernel_attention_forward = 0.0, executor_kernel_attention_backward = 0.0;
  std::string executor_kernel_attention_source;
  double pcie_bandwidth = 0.0;
  std::string pcie_source;
  std::optional<Bytes> cuda_context_bytes;
  double host_copy_bandwidth = 0.0;
  double adamw_node = 0.0, adamw_thread = 0.0;
  double adamw_call_seconds = 0.0;  // one call's fixed cost with the node's threads (a 1,024-parameter update)
  int adamw_node_threads = 0;
  std::optional<DiskRates> disk;
  // DeepSpeed's host speed on this machine (GPU backend): the probe's figures, or why there are none.
  std::variant<HostProbe, std::string> host_probe = std::string("the CPU backend runs no CUDA launches to time");
};

// The cluster description (JSON) of this machine: `f` measured here; `ranks` what calibrate's ranks returned
// (collective points, NCCL's memory) and `intra_node` the interconnect made of their points, both absent on one
// GPU; `base` (--base) for the fields not measured.
nlohmann::json describe_calibration(const CalibrationOptions& o, const LocalFigures& f,
                                    const std::optional<ClusterDescription>& base,
                                    const std::optional<nlohmann::json>& ranks,
                                    const std::optional<nlohmann::json>& intra_node, int world);

}  // namespace zeroplan
