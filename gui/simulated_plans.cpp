#include "gui/simulated_plans.h"

#include <algorithm>
#include <cmath>

#include "core/input_error.h"
#include "sim/host_bound_note.h"
#include "sim/plan_timing.h"
#include "sim/simulator.h"

namespace zeroplan {

SimulatedPlans simulate_plans(const Comparison& comparison) {
  SimulatedPlans out;
  out.timings.resize(comparison.plans.size());
  std::vector<TimedPlan> timed(comparison.plans.size());
  for (std::size_t i = 0; i < comparison.plans.size(); ++i) {
    const PlanResult& plan = comparison.plans[i];
    timed[i].plan = plan;
    try {
      timed[i].simulation = simulate_step(comparison.model, comparison.cluster, comparison.training, plan.choice);
    } catch (const InputError& error) {
      if (out.problem.empty()) out.problem = error.what();
      continue;
    }
    const StepSimulation& sim = *timed[i].simulation;
    PlanTiming timing;
    timing.step_seconds = sim.step_seconds;
    timing.tokens_per_second = sim.tokens_per_second;
    timing.mfu = sim.mfu;
    timing.exposed_comm_seconds = sim.exposed_comm_seconds;
    timing.compute_seconds = sim.compute_seconds;
    timing.comm_seconds = sim.communication_seconds;
    timing.mfu_basis = sim.flop_convention + ", against the " + sim.peak_name + " peak";
    out.timings[i] = timing;
  }
  std::vector<PlanChoice> choices;
  std::vector<const StepSimulation*> steps;
  for (const TimedPlan& plan : timed) {
    choices.push_back(plan.plan.choice);
    steps.push_back(plan.simulation ? &*plan.simulation : nullptr);
  }
  for (const std::string& note :
       host_bound_notes(comparison.cluster, comparison.training, choices, steps, "the host speed field"))
    out.notes += (out.notes.empty() ? "" : "\n") + note;
  // The plan `zeroplan plan` names as the fastest that fits (sim/plan_timing.h), so the star and the CLI agree.
  out.recommended = recommended_plan(timed);
  const std::string unit = comparison.model.transformer ? "tokens/s" : "samples/s";
  if (out.recommended >= 0) {
    const std::optional<PlanTiming>& chosen = out.timings[static_cast<std::size_t>(out.recommended)];
    out.recommendation = chosen ? "the most " + unit + " of the plans that fit (" +
                                      std::to_string(std::llround(chosen->tokens_per_second)) + " predicted)"
                                : "the first plan that fits; none that fits could be simulated: " + out.problem;
  } else if (std::none_of(comparison.plans.begin(), comparison.plans.end(), [](const PlanResult& p) { return p.fits; })) {
    out.recommendation = "every plan exceeds the GPU, host or NVMe capacity; try a smaller micro-batch, "
                         "checkpointing or more GPUs";
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
