// The plan as JSON: one schema shared by `zeroplan plan --format json`, the run report of `zeroplan run
// --report` (which adds "measured") and the GUI, so a plan is read the same way everywhere.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "core/cluster_description.h"
#include "core/model_description.h"
#include "sim/memory_margin.h"
#include "sim/plan_timing.h"
#include "sim/planner.h"

namespace zeroplan {

// Per plan: stage, offload_optimizer, offload_param, label, gpu_bytes {component..., total}, gpu_capacity_bytes,
// gpu_headroom_bytes, gpu_margin_fraction, gpu_margin_bytes, host_bytes, host_pinned_bytes, nvme_bytes, init_peak_gpu_bytes, comm_bytes_per_step
// {all_reduce, reduce_scatter, all_gather, total, wire_total, pcie_host_to_device, pcie_device_to_host,
// nvme_read, nvme_write}, collectives [...], fits (+ gpu_fits, host_fits, nvme_fits), max_micro_batch,
// deepspeed_estimate {gpu_bytes, host_bytes, row} when present, terms [...] when explained.
nlohmann::json plan_to_json(const PlanResult& plan, const ClusterDescription& cluster);

// The margin the GPU verdicts kept: {fraction, source, rule}; and as text, "7.3%".
nlohmann::json margin_json(const MemoryMargin& margin);
std::string margin_text(const MemoryMargin& margin);

// The whole document: params and largest_layer_params at the top, the model, cluster and training summaries,
// notes and warnings, and the plans under "plans".
nlohmann::json plans_document(const ModelDescription& model, const ClusterDescription& cluster,
                              const TrainingConfig& training, const std::vector<PlanResult>& plans);

// plan_to_json plus what the simulated timeline adds: timeline_peak_gpu_bytes, sum_of_worst_cases_gpu_bytes,
// gpu_bytes_source, and step_seconds, tokens_per_second (samples_per_second for layer lists), mfu,
// exposed_comm_seconds (null when the cluster lacks a rate the plan needs).
nlohmann::json timed_plan_to_json(const TimedPlan& timed, const ModelDescription& model,
                                  const ClusterDescription& cluster);

}  // namespace zeroplan
