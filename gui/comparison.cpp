#include "gui/comparison.h"

#include "core/input_error.h"
#include "sim/plan_timing.h"

namespace zeroplan {

namespace {

// The panel's labels, for errors that name the input at fault.
PlanInputNames gui_input_names() {
  PlanInputNames names;
  names.source = "GUI input";
  names.model = "model";
  names.gpus = "GPUs";
  names.micro_batch = "micro-batch";
  names.seq = "sequence length";
  names.grad_accum = "gradient accumulation";
  names.host_op_seconds = "host speed";
  return names;
}

}  // namespace

int Comparison::index_of(const PlanChoice& choice) const {
  for (std::size_t i = 0; i < plans.size(); ++i) {
    if (plans[i].choice == choice) return static_cast<int>(i);
  }
  return -1;
}

PlannerOptions gui_planner_options() {
  PlannerOptions options;
  options.explain = true;  // the tooltips show each term's formula
  options.compare_deepspeed = false;
  options.search_max_micro_batch = true;
  return options;
}

Comparison build_comparison(const GuiInputs& inputs) {
  Comparison out;
  out.inputs = inputs;
  if (inputs.model.empty()) {
    throw InputError("GUI input", "model", "no model chosen: pick a bundled one or open a file");
  }
  ResolvedPlanInputs resolved = resolve_plan_inputs(inputs, gui_input_names());
  out.model = std::move(resolved.model);
  out.cluster = std::move(resolved.cluster);
  out.training = std::move(resolved.training);
  if (inputs.ds_config) {
    out.configured_choice =
        PlanChoice{out.training.zero.stage, out.training.zero.offload_optimizer, out.training.zero.offload_param};
  }

  // The same verdicts as `zeroplan plan`: GPU memory judged on the simulated timeline's peak.
  for (TimedPlan& timed :
       evaluate_timed_plans(out.model, out.cluster, out.training, enumerate_plan_choices(), gui_planner_options())) {
    out.plans.push_back(std::move(timed.plan));
  }
  return out;
}

}  // namespace zeroplan
