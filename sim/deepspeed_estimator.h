// DeepSpeed's own model-state estimators, reproduced exactly (deepspeed/runtime/zero/stage_1_and_2.py
// estimate_zero2_model_states_mem_needs and stage3.py estimate_zero3_model_states_mem_needs; see
// zero-formulas.md section 2), for `--compare deepspeed`. Model states only: no activations or buffers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/units.h"
#include "sim/plan_choice.h"

namespace zeroplan {

struct DeepSpeedEstimate {
  std::string row;        // DeepSpeed's own row label: "offload_param=cpu, offload_optimizer=cpu, zero_init=1"
  int stage = 0;
  OffloadDevice offload_optimizer = OffloadDevice::none;
  OffloadDevice offload_param = OffloadDevice::none;
  bool zero_init = true;  // stage 3 only
  Bytes gpu_bytes = 0;    // per GPU
  Bytes host_bytes = 0;   // per node
};

Bytes zero2_gpu_bytes(std::int64_t total_params, int gpus_per_node, int nodes, bool cpu_offload);
Bytes zero2_host_bytes(std::int64_t total_params, int gpus_per_node, int nodes, bool cpu_offload);
// The stage 1/2 no-offload GPU line before DeepSpeed changed it in June 2024: 4P + int(16P / total_gpus).
// The DeepSpeed and Hugging Face docs still print its figures; kept to check the implementation against them.
Bytes zero2_gpu_bytes_before_june_2024(std::int64_t total_params, int gpus_per_node, int nodes, bool cpu_offload);
DeepSpeedEstimate estimate_zero2(std::int64_t total_params, int gpus_per_node, int nodes, bool cpu_offload);
DeepSpeedEstimate estimate_zero3(std::int64_t total_params, std::int64_t largest_layer_params, int gpus_per_node,
                                 int nodes, bool cpu_offload, bool cpu_offload_params, bool zero_init);

// DeepSpeed's printed rows: 2 for stage 1/2, 6 for stage 3.
std::vector<DeepSpeedEstimate> deepspeed_rows(std::int64_t total_params, std::int64_t largest_layer_params,
                                              int gpus_per_node, int nodes);

// The estimate DeepSpeed gives for a plan choice, if its estimators cover it (zero_init on for stage 3;
// NVMe offload is treated as DeepSpeed's "cpu" rows are not: not covered -> nullopt). Stage 0 not covered.
std::optional<DeepSpeedEstimate> deepspeed_estimate_for(const PlanChoice& choice, std::int64_t total_params,
                                                        std::int64_t largest_layer_params, int gpus_per_node,
                                                        int nodes);

}  // namespace zeroplan
