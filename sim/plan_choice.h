// A plan choice: which ZeRO stage and which offload targets. The planner evaluates every valid choice.
#pragma once

#include <string>
#include <vector>

#include "core/plan_inputs.h"  // PlanChoiceFilter: the stage and offloads the inputs ask for
#include "core/training_config.h"

namespace zeroplan {

struct PlanChoice {
  int stage = 0;
  OffloadDevice offload_optimizer = OffloadDevice::none;
  OffloadDevice offload_param = OffloadDevice::none;  // stage 3 only

  std::string label() const;  // "stage 3 + opt:cpu + param:nvme", "stage 2"
  bool operator==(const PlanChoice&) const = default;
};

// Every choice zeroplan compares: stage 0; stages 1 and 2 with offload_optimizer none/cpu (NVMe offload is
// ZeRO-Infinity, stage 3 only); stage 3 with every (offload_optimizer, offload_param) pair of none/cpu/nvme
// (DeepSpeed offloads either without the other): 1 + 2 + 2 + 9 = 14 choices, narrowed by the filter (-1 / unset:
// any).
std::vector<PlanChoice> enumerate_plan_choices(const PlanChoiceFilter& filter = {});

// The training configuration with the choice applied (zero.stage and offloads set; an overlap_comm nobody gave
// takes the engine's default: DeepSpeed's for the stage, or zeroplan's executor's).
TrainingConfig apply_choice(const TrainingConfig& training, const PlanChoice& choice);

}  // namespace zeroplan
