#include "gui/comparison.h"

#include "core/deepspeed_config.h"
#include "core/input_error.h"
#include "sim/plan_timing.h"

namespace zeroplan {

namespace {

constexpr const char* kInputSource = "GUI input";

std::int64_t require_positive(std::int64_t value, const std::string& field) {
  if (value < 1) throw InputError(kInputSource, field, "must be a positive integer, got " + std::to_string(value));
  return value;
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
  if (inputs.model.empty()) throw InputError(kInputSource, "model", "no model chosen: pick a bundled one or open a file");
  out.model = load_model(inputs.model);

  out.cluster = load_cluster(inputs.cluster);
  if (inputs.gpus) {
    if (*inputs.gpus < 1) throw InputError(kInputSource, "GPUs", "must be at least 1, got " + std::to_string(*inputs.gpus));
    out.cluster = with_gpu_count(out.cluster, *inputs.gpus);
  }
  const int world_size = out.cluster.total_gpus();

  // Same precedence as the CLI (cli/common_options.cpp): the model's maximum sequence, then the DeepSpeed
  // config, then what the panel sets.
  TrainingConfig& training = out.training;
  if (out.model.transformer) {
    training.seq_len = out.model.transformer->max_seq;
  } else {
    training.seq_len = 1;  // generic layer-list models count samples, not tokens
  }
  if (inputs.ds_config) {
    apply_deepspeed_config(*inputs.ds_config, out.model, world_size, training);
    out.configured_choice =
        PlanChoice{training.zero.stage, training.zero.offload_optimizer, training.zero.offload_param};
  }
  if (inputs.micro_batch) training.micro_batch = require_positive(*inputs.micro_batch, "micro-batch");
  if (inputs.seq) {
    training.seq_len = require_positive(*inputs.seq, "sequence length");
    check_sequence_length(out.model, training.seq_len, kInputSource, "sequence length");
  }
  if (inputs.grad_accum) training.grad_accum = require_positive(*inputs.grad_accum, "gradient accumulation");
  if (inputs.precision) training.precision = *inputs.precision;
  if (inputs.checkpointing) training.checkpointing = *inputs.checkpointing;

  // The same verdicts as `zeroplan plan`: GPU memory judged on the simulated timeline's peak.
  for (TimedPlan& timed :
       evaluate_timed_plans(out.model, out.cluster, training, enumerate_plan_choices(), gui_planner_options())) {
    out.plans.push_back(std::move(timed.plan));
  }
  return out;
}

}  // namespace zeroplan
