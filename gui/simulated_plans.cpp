#include "gui/simulated_plans.h"

#include <algorithm>
#include <cmath>

#include "core/input_error.h"
#include "sim/simulator.h"

namespace zeroplan {

SimulatedPlans simulate_plans(const Comparison& comparison) {
  SimulatedPlans out;
  out.timings.resize(comparison.plans.size());
  double best = 0.0;
  for (std::size_t i = 0; i < comparison.plans.size(); ++i) {
    const PlanResult& plan = comparison.plans[i];
    StepSimulation sim;
    try {
      sim = simulate_step(comparison.model, comparison.cluster, comparison.training, plan.choice);
    } catch (const InputError& error) {
      if (out.problem.empty()) out.problem = error.what();
      continue;
    }
    PlanTiming timing;
    timing.step_seconds = sim.step_seconds;
    timing.tokens_per_second = sim.tokens_per_second;
    timing.mfu = sim.mfu;
    timing.exposed_comm_seconds = sim.exposed_comm_seconds;
    timing.compute_seconds = sim.compute_seconds;
    timing.comm_seconds = sim.communication_seconds;
    timing.mfu_basis = sim.flop_convention + ", against the " + sim.peak_name + " peak";
    out.timings[i] = timing;
    if (plan.fits && sim.tokens_per_second > best) {
      best = sim.tokens_per_second;
      out.recommended = static_cast<int>(i);
    }
  }
  if (out.recommended >= 0) {
    const PlanTiming& chosen = *out.timings[static_cast<std::size_t>(out.recommended)];
    out.recommendation = "the most tokens/s of the plans that fit (" +
                         std::to_string(std::llround(chosen.tokens_per_second)) + " predicted)";
  } else if (std::none_of(comparison.plans.begin(), comparison.plans.end(), [](const PlanResult& p) { return p.fits; })) {
    out.recommendation = "every plan exceeds the GPU, host or NVMe capacity; try a smaller micro-batch, "
                         "checkpointing or more GPUs";
  } else {
    out.recommendation = "the plans that fit could not be simulated: " + out.problem;
  }
  return out;
}

PlanStep simulate_plan_step(const Comparison& comparison, int plan_index) {
  const PlanResult& plan = comparison.plans.at(static_cast<std::size_t>(plan_index));
  SimulationOptions options;
  options.record_events = true;
  StepSimulation sim = simulate_step(comparison.model, comparison.cluster, comparison.training, plan.choice, options);
  PlanStep step;
  step.label = plan.choice.label();
  step.tasks = std::move(sim.events);
  step.step_seconds = sim.step_seconds;
  step.peak_memory_bytes = sim.peak_gpu_bytes;
  step.gpu_capacity_bytes = comparison.cluster.gpu_memory_bytes;
  // The curve: the static bytes (model states, buffers, runtime) plus the timeline's dynamic changes, frees
  // before allocations at equal times as the simulator orders them.
  std::stable_sort(sim.memory_changes.begin(), sim.memory_changes.end(),
                   [](const MemoryChange& a, const MemoryChange& b) { return a.time < b.time; });
  Bytes in_use = sim.static_gpu_bytes;
  step.memory_curve.emplace_back(0.0, in_use);
  for (const MemoryChange& change : sim.memory_changes) {
    in_use += change.delta;
    step.memory_curve.emplace_back(change.time, in_use);
  }
  return step;
}

}  // namespace zeroplan
