#include "sim/plan_timing.h"

#include "sim/deepspeed_engine.h"
#include "sim/memory_margin.h"
#include "sim/monotone_search.h"

namespace zeroplan {

void judge_on_timeline(PlanResult& plan, const StepSimulation& simulation, const ClusterDescription& cluster) {
  plan.memory.gpu = simulation.peak_breakdown;
  plan.gpu_fits = timeline_gpu_fits(simulation, cluster, plan.gpu_margin);
  plan.fits = plan.gpu_fits && plan.host_fits && plan.nvme_fits;
  plan.gpu_headroom_bytes = cluster.gpu_memory_bytes - timeline_gpu_demand(simulation);
  plan.gpu_margin_bytes = margin_bytes(timeline_gpu_demand(simulation), plan.gpu_margin);
}

std::int64_t largest_fitting_micro_batch_on_timeline(const ModelDescription& model,
                                                     const ClusterDescription& cluster,
                                                     const TrainingConfig& training, const PlanChoice& choice,
                                                     std::int64_t limit, double margin) {
  TrainingConfig trial = training;
  PlannerOptions memory_only;
  memory_only.search_max_micro_batch = false;
  memory_only.gpu_memory_margin = margin;
  return largest_satisfying(limit, [&](std::int64_t micro_batch) {
    trial.micro_batch = micro_batch;
    const PlanResult plan = evaluate_plan(model, cluster, trial, choice, memory_only);
    if (!plan.host_fits || !plan.nvme_fits) return false;
    return timeline_gpu_fits(simulate_step(model, cluster, trial, choice), cluster, margin);
  });
}

std::vector<TimedPlan> evaluate_timed_plans(const ModelDescription& model, const ClusterDescription& cluster,
                                            const TrainingConfig& training, const std::vector<PlanChoice>& choices,
                                            const PlannerOptions& options) {
  // A plan the simulator can time searches its largest micro-batch on the timeline; only the others search it
  // on the memory model, so no plan is searched twice.
  PlannerOptions memory_search_off = options;
  memory_search_off.search_max_micro_batch = false;
  std::vector<TimedPlan> timed;
  timed.reserve(choices.size());
  for (const PlanChoice& choice : choices) {
    TimedPlan entry;
    if (training.engine == TrainingEngine::deepspeed && !deepspeed_runs(training, choice, &entry.refused)) {
      entry.plan = evaluate_plan(model, cluster, training, choice, memory_search_off);
      entry.plan.fits = entry.plan.gpu_fits = false;
      entry.why_not_timed = entry.refused;
      timed.push_back(std::move(entry));
      continue;
    }
    if (!cluster_supports(cluster, choice, &entry.why_not_timed)) {
      entry.plan = evaluate_plan(model, cluster, training, choice, options);
      timed.push_back(std::move(entry));
      continue;
    }
    entry.plan = evaluate_plan(model, cluster, training, choice, memory_search_off);
    entry.simulation = simulate_step(model, cluster, training, choice);
    judge_on_timeline(entry.plan, *entry.simulation, cluster);
    if (options.search_max_micro_batch) {
      entry.plan.max_micro_batch = largest_fitting_micro_batch_on_timeline(
          model, cluster, training, choice, options.micro_batch_search_limit, entry.plan.gpu_margin);
    }
    timed.push_back(std::move(entry));
  }
  return timed;
}

int recommended_plan(const std::vector<TimedPlan>& plans) {
  int best = -1;
  double best_rate = 0.0;
  for (std::size_t i = 0; i < plans.size(); ++i) {
    if (!plans[i].plan.fits) continue;
    const double rate = plans[i].simulation ? plans[i].simulation->tokens_per_second : 0.0;
    if (best < 0 || rate > best_rate) {
      best = static_cast<int>(i);
      best_rate = rate;
    }
  }
  return best;
}

}  // namespace zeroplan
