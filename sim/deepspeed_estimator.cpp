// DeepSpeed's model-state estimators, transcribed from deepspeed/runtime/zero/stage_1_and_2.py
// (estimate_zero2_model_states_mem_needs) and stage3.py (estimate_zero3_model_states_mem_needs), current
// code (zero-formulas.md sec. 2). Python semantics are kept: int * int stays exact, `/` is a true (double)
// division, `* additional_buffer_factor` makes a double, and the results are truncated with int().
#include "sim/deepspeed_estimator.h"

#include <algorithm>

namespace zeroplan {

namespace {
constexpr double kAdditionalBufferFactor = 1.5;  // additional_buffer_factor default

// Python int(x) for a non-negative double.
Bytes py_int(double value) { return static_cast<Bytes>(value); }

const char* device_name(OffloadDevice device) { return device == OffloadDevice::cpu ? "cpu" : "none"; }
}  // namespace

Bytes zero2_gpu_bytes(std::int64_t P, int gpus_per_node, int nodes, bool cpu_offload) {
  const std::int64_t total_gpus = static_cast<std::int64_t>(nodes) * gpus_per_node;
  if (cpu_offload) return 2 * P;                                                   // gpu_mem = 2 * total_params
  return 2 * P + py_int(static_cast<double>(18 * P) / static_cast<double>(total_gpus));  // + int(18P / total_gpus)
}

Bytes zero2_gpu_bytes_before_june_2024(std::int64_t P, int gpus_per_node, int nodes, bool cpu_offload) {
  const std::int64_t total_gpus = static_cast<std::int64_t>(nodes) * gpus_per_node;
  if (cpu_offload) return 2 * P;
  return 4 * P + py_int(static_cast<double>(16 * P) / static_cast<double>(total_gpus));
}

Bytes zero2_host_bytes(std::int64_t P, int gpus_per_node, int nodes, bool cpu_offload) {
  const std::int64_t total_gpus = static_cast<std::int64_t>(nodes) * gpus_per_node;
  if (cpu_offload)  // total_params * max(4 * total_gpus, 16) * f: total_gpus although the docs say per node
    return py_int(static_cast<double>(P * std::max<std::int64_t>(4 * total_gpus, 16)) * kAdditionalBufferFactor);
  return py_int(static_cast<double>(P * 4 * gpus_per_node) * kAdditionalBufferFactor);
}

DeepSpeedEstimate estimate_zero2(std::int64_t P, int gpus_per_node, int nodes, bool cpu_offload) {
  DeepSpeedEstimate e;
  e.row = std::string("offload_optimizer=") + (cpu_offload ? "cpu" : "none");
  e.stage = 2;
  e.offload_optimizer = cpu_offload ? OffloadDevice::cpu : OffloadDevice::none;
  e.zero_init = false;
  e.gpu_bytes = zero2_gpu_bytes(P, gpus_per_node, nodes, cpu_offload);
  e.host_bytes = zero2_host_bytes(P, gpus_per_node, nodes, cpu_offload);
  return e;
}

DeepSpeedEstimate estimate_zero3(std::int64_t P, std::int64_t largest_layer_params, int gpus_per_node, int nodes,
                                 bool cpu_offload, bool cpu_offload_params, bool zero_init) {
  const std::int64_t total_gpus = static_cast<std::int64_t>(nodes) * gpus_per_node;
  const double gpus_factor = 1.0 / static_cast<double>(nodes);
  const Bytes largest_layer_memory = 4 * largest_layer_params;
  const double f = kAdditionalBufferFactor;
  double cpu = 0.0;
  Bytes gpu = 0;
  // Python's max(int, float) returns the larger operand; the product with P is a double either way.
  auto py_max = [](double a, double b) { return std::max(a, b); };
  if (cpu_offload && cpu_offload_params) {
    gpu = largest_layer_memory;
    cpu = zero_init ? static_cast<double>(P * 18) * gpus_factor * f
                    : static_cast<double>(P) * py_max(4.0 * gpus_per_node, 18.0 * gpus_factor) * f;
  } else if (cpu_offload) {
    gpu = largest_layer_memory + py_int(static_cast<double>(2 * P) / static_cast<double>(total_gpus));
    cpu = zero_init ? static_cast<double>(P * 16) * gpus_factor * f
                    : static_cast<double>(P) * py_max(4.0 * gpus_per_node, 16.0 * gpus_factor) * f;
  } else {
    gpu = largest_layer_memory + py_int(static_cast<double>(18 * P) / static_cast<double>(total_gpus));
    cpu = zero_init ? static_cast<double>(largest_layer_params * 4 * gpus_per_node) * f
                    : static_cast<double>(P * 4 * gpus_per_node) * f;
  }
  DeepSpeedEstimate e;
  e.stage = 3;
  e.offload_optimizer = cpu_offload ? OffloadDevice::cpu : OffloadDevice::none;
  e.offload_param = cpu_offload_params ? OffloadDevice::cpu : OffloadDevice::none;
  e.zero_init = zero_init;
  e.row = std::string("offload_param=") + device_name(e.offload_param) +
          ", offload_optimizer=" + device_name(e.offload_optimizer) + ", zero_init=" + (zero_init ? "1" : "0");
  e.gpu_bytes = gpu;
  e.host_bytes = py_int(cpu);
  return e;
}

std::vector<DeepSpeedEstimate> deepspeed_rows(std::int64_t P, std::int64_t largest_layer_params, int gpus_per_node,
                                              int nodes) {
  // The order DeepSpeed prints them (estimate_zero2/3_model_states_mem_needs_all_cold).
  std::vector<DeepSpeedEstimate> rows;
  rows.push_back(estimate_zero2(P, gpus_per_node, nodes, true));
  rows.push_back(estimate_zero2(P, gpus_per_node, nodes, false));
  const bool combos[3][2] = {{true, true}, {true, false}, {false, false}};  // (cpu_offload, cpu_offload_params)
  for (const auto& combo : combos)
    for (bool zero_init : {true, false})
      rows.push_back(estimate_zero3(P, largest_layer_params, gpus_per_node, nodes, combo[0], combo[1], zero_init));
  return rows;
}

std::optional<DeepSpeedEstimate> deepspeed_estimate_for(const PlanChoice& choice, std::int64_t P,
                                                        std::int64_t largest_layer_params, int gpus_per_node,
                                                        int nodes) {
  if (choice.offload_optimizer == OffloadDevice::nvme || choice.offload_param == OffloadDevice::nvme)
    return std::nullopt;
  // DeepSpeed's estimator has no row for parameters offloaded with the optimizer on the GPU.
  if (choice.offload_param != OffloadDevice::none && choice.offload_optimizer == OffloadDevice::none)
    return std::nullopt;
  if (choice.stage == 1 || choice.stage == 2) {
    // DeepSpeed has one estimator for stages 1 and 2 (stage_1_and_2.py).
    DeepSpeedEstimate e = estimate_zero2(P, gpus_per_node, nodes, choice.offload_optimizer == OffloadDevice::cpu);
    e.stage = choice.stage;
    return e;
  }
  if (choice.stage == 3)
    return estimate_zero3(P, largest_layer_params, gpus_per_node, nodes,
                          choice.offload_optimizer == OffloadDevice::cpu, choice.offload_param == OffloadDevice::cpu,
                          true);
  return std::nullopt;
}

}  // namespace zeroplan
