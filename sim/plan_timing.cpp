#include "sim/plan_timing.h"

namespace zeroplan {

void judge_on_timeline(PlanResult& plan, const StepSimulation& simulation, const ClusterDescription& cluster) {
  plan.memory.gpu = simulation.peak_breakdown;
  plan.gpu_fits = timeline_gpu_fits(simulation, cluster);
  plan.fits = plan.gpu_fits && plan.host_fits && plan.nvme_fits;
  plan.gpu_headroom_bytes = cluster.gpu_memory_bytes - timeline_gpu_demand(simulation);
}

std::int64_t largest_fitting_micro_batch_on_timeline(const ModelDescription& model,
                                                     const ClusterDescription& cluster,
                                                     const TrainingConfig& training, const PlanChoice& choice,
                                                     std::int64_t limit) {
  if (limit < 1) return 0;
  TrainingConfig trial = training;
  PlannerOptions memory_only;
  memory_only.search_max_micro_batch = false;
  const auto fits_at = [&](std::int64_t micro_batch) {
    trial.micro_batch = micro_batch;
    const PlanResult plan = evaluate_plan(model, cluster, trial, choice, memory_only);
    if (!plan.host_fits || !plan.nvme_fits) return false;
    return timeline_gpu_fits(simulate_step(model, cluster, trial, choice), cluster);
  };
  if (!fits_at(1)) return 0;
  std::int64_t low = 1, high = 2;  // fits(low), and !fits(high) once the gallop stops
  while (high <= limit && fits_at(high)) {
    low = high;
    high *= 2;
  }
  if (high > limit) {
    if (fits_at(limit)) return limit;
    high = limit;
  }
  while (high - low > 1) {
    const std::int64_t mid = low + (high - low) / 2;
    (fits_at(mid) ? low : high) = mid;
  }
  return low;
}

std::vector<TimedPlan> evaluate_timed_plans(const ModelDescription& model, const ClusterDescription& cluster,
                                            const TrainingConfig& training, const std::vector<PlanChoice>& choices,
                                            const PlannerOptions& options) {
  std::vector<TimedPlan> timed;
  timed.reserve(choices.size());
  for (PlanResult& plan : evaluate_plans(model, cluster, training, choices, options)) {
    TimedPlan entry{std::move(plan), std::nullopt, {}};
    if (cluster_supports(cluster, entry.plan.choice, &entry.why_not_timed)) {
      entry.simulation = simulate_step(model, cluster, training, entry.plan.choice);
      judge_on_timeline(entry.plan, *entry.simulation, cluster);
      if (options.search_max_micro_batch) {
        entry.plan.max_micro_batch = largest_fitting_micro_batch_on_timeline(
            model, cluster, training, entry.plan.choice, options.micro_batch_search_limit);
      }
    }
    timed.push_back(std::move(entry));
  }
  return timed;
}

}  // namespace zeroplan
