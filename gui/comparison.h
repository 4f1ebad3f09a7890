// The comparison the GUI shows: the inputs resolved into the shared descriptions (as the CLI resolves its
// flags) and every plan choice evaluated by the planner, explained (per-term formulas for the tooltips).
// Pure C++, no Qt: the widgets only display a Comparison, so tests can compare them with the planner directly.
#pragma once

#include <optional>
#include <vector>

#include "core/cluster_description.h"
#include "core/model_description.h"
#include "core/training_config.h"
#include "gui/gui_inputs.h"
#include "sim/plan_choice.h"
#include "sim/planner.h"

namespace zeroplan {

struct Comparison {
  GuiInputs inputs;
  ModelDescription model;
  ClusterDescription cluster;          // resized to inputs.gpus when given
  TrainingConfig training;             // defaults < DeepSpeed config < inputs
  std::optional<PlanChoice> configured_choice;  // the DeepSpeed config's stage and offloads, when one is open
  std::vector<PlanResult> plans;       // every choice of enumerate_plan_choices(), in that order

  // Index into plans of a choice; -1 when absent.
  int index_of(const PlanChoice& choice) const;
};

// The planner options the GUI evaluates with (explained, largest micro-batch searched); tests use the same.
PlannerOptions gui_planner_options();

// Resolves and evaluates. Throws InputError naming the file or input at fault; nothing is half-built.
Comparison build_comparison(const GuiInputs& inputs);

}  // namespace zeroplan
