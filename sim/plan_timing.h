// The plan's verdict taken from the simulated timeline (issue 3: "the planner's peak is the timeline's peak, not
// a sum of worst cases"). The memory model gives every component at its own worst (sim/memory_model.h) and stays
// the fast path for searches over millions of configurations; `zeroplan plan`, `simulate` and `recommend` judge
// GPU memory on the timeline's peak (simulator.h timeline_gpu_fits), so they never disagree about a plan.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/cluster_description.h"
#include "core/model_description.h"
#include "core/training_config.h"
#include "sim/planner.h"
#include "sim/simulator.h"

namespace zeroplan {

// Replaces the plan's GPU breakdown by the timeline peak's (components live at the peak, adding up to it), and
// its GPU verdict (with the plan's margin), overall verdict and headroom by the timeline's. Host and NVMe stay
// the memory model's.
void judge_on_timeline(PlanResult& plan, const StepSimulation& simulation, const ClusterDescription& cluster);

// Largest micro-batch in [1, limit] for which the plan fits on the timeline (GPU, with `margin`) and in the
// memory model (host, NVMe); 0 if none. Memory grows with the micro-batch, so it gallops then bisects, one
// simulation per trial.
std::int64_t largest_fitting_micro_batch_on_timeline(const ModelDescription& model,
                                                     const ClusterDescription& cluster,
                                                     const TrainingConfig& training, const PlanChoice& choice,
                                                     std::int64_t limit, double margin);

// A plan with its simulated step: what `zeroplan plan` and the GUI show for every choice.
struct TimedPlan {
  PlanResult plan;                          // judged on the timeline when simulated
  std::optional<StepSimulation> simulation; // absent when the cluster lacks a rate the plan needs (why_not_timed)
  std::string why_not_timed;
  std::string refused;                      // DeepSpeed's engine refuses the plan (deepspeed_runs): why; not fitting
};

// Evaluates every choice with the memory model, simulates it where the cluster allows, judges GPU memory on the
// timeline peak and searches the largest micro-batch on the timeline (when options.search_max_micro_batch).
// The one place the CLI and the GUI get their per-plan verdicts from, so they never disagree.
std::vector<TimedPlan> evaluate_timed_plans(const ModelDescription& model, const ClusterDescription& cluster,
                                            const TrainingConfig& training, const std::vector<PlanChoice>& choices,
                                            const PlannerOptions& options);

// The recommended plan, as `zeroplan plan` names it in its verdict and the GUI stars it: among the plans that fit,
// the one with the most simulated throughput (tokens/s, or samples/s for layer lists); a plan the cluster cannot
// time counts as 0, and ties go to the earlier one (enumerate_plan_choices orders stage 0..3, least offload
// first: the least communication and host traffic). Index into plans; -1 when none fits.
int recommended_plan(const std::vector<TimedPlan>& plans);

}  // namespace zeroplan
