// The planner: evaluates plan choices (memory, communication, verdict) and answers the search questions:
// the largest micro-batch that fits, the fewest GPUs that fit, the largest model of a family that fits
// (ZeRO paper Table 2's question).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/cluster_description.h"
#include "core/model_description.h"
#include "core/training_config.h"
#include "sim/comm_model.h"
#include "sim/deepspeed_estimator.h"
#include "sim/memory_margin.h"
#include "sim/memory_model.h"
#include "sim/plan_choice.h"

namespace zeroplan {

struct PlanResult {
  PlanChoice choice;
  TrainingConfig training;  // with the choice applied
  MemoryEstimate memory;
  CommVolume comm;
  bool fits = false;              // gpu total plus its margin <= capacity, host and NVMe within the node's
  bool gpu_fits = false;          // the GPU peak plus the margin within the GPU's memory (sim/memory_margin.h)
  bool host_fits = false;
  bool nvme_fits = false;
  Bytes gpu_headroom_bytes = 0;   // capacity - total (negative when it does not fit even without the margin)
  double gpu_margin = 0.0;        // the margin the GPU verdict kept: a fraction of the peak (sim/memory_margin.h)
  Bytes gpu_margin_bytes = 0;     // the bytes it kept free above the peak
  std::int64_t max_micro_batch = 0;  // largest micro-batch that fits with everything else unchanged (0: none)
  std::optional<DeepSpeedEstimate> deepspeed;  // filled when asked for and covered
};

struct PlannerOptions {
  // The GPU verdict's margin, a fraction of the predicted peak; unset: the engine's measured error
  // (default_memory_margin).
  std::optional<double> gpu_memory_margin;
  bool explain = false;             // fill memory.terms
  bool compare_deepspeed = false;   // fill PlanResult::deepspeed
  bool search_max_micro_batch = true;
  std::int64_t micro_batch_search_limit = 1 << 20;
};

// Whether an estimate fits the cluster's GPU (with `margin`, a fraction of its peak), host and NVMe capacity.
bool gpu_memory_fits(const MemoryEstimate& memory, const ClusterDescription& cluster, double margin);

PlanResult evaluate_plan(const ModelDescription& model, const ClusterDescription& cluster,
                         const TrainingConfig& training, const PlanChoice& choice, const PlannerOptions& options);

// Largest micro-batch in [1, limit] for which the plan fits with `margin` (memory grows monotonically with it);
// 0 if none.
std::int64_t largest_fitting_micro_batch(const ModelDescription& model, const ClusterDescription& cluster,
                                         const TrainingConfig& training, const PlanChoice& choice,
                                         std::int64_t limit, double margin);

// Fewest GPUs (of the cluster's kind, whole nodes beyond one node) for which the choice fits; nullopt if none up
// to max_gpus.
std::optional<int> fewest_gpus_that_fit(const ModelDescription& model, const ClusterDescription& cluster,
                                        const TrainingConfig& training, const PlanChoice& choice, int max_gpus,
                                        double margin);

// Largest model of a transformer family that fits: scales layers (at the template's hidden) or hidden (keeping
// the hidden/layers aspect) of `family_template`; returns the largest fitting description found, if any.
std::optional<ModelDescription> largest_fitting_model(const ModelDescription& family_template,
                                                      const ClusterDescription& cluster,
                                                      const TrainingConfig& training, const PlanChoice& choice,
                                                      double margin);

}  // namespace zeroplan
