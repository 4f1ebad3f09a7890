// The line plan, simulate, recommend and the GUI show beside a verdict whose plan belongs to a kind the memory model
// was measured to miss by more than the margin it keeps: so that "fits" is not read as safe where the planner knows
// it is not. Today one kind: DeepSpeed's stage 3 of transformers' Llama-family modules on several GPUs with nothing
// offloaded, whose device used was measured above its plan (bench/deepspeed/results-pending/README.md).
#pragma once

#include <string>
#include <vector>

#include "core/model_description.h"
#include "core/training_config.h"
#include "sim/memory_margin.h"
#include "sim/plan_choice.h"

namespace zeroplan {

// One note naming the plans among `choices` (on `gpus` GPUs) of a kind whose device used was measured above the plan
// by more than `margin`, with the measured errors and the margin that covers them (`margin_input`: the CLI's
// --margin, the GUI's field). None where no plan is of such a kind or the margin covers the misses.
std::vector<std::string> measured_memory_miss_notes(const ModelDescription& model, const TrainingConfig& training,
                                                    const std::vector<PlanChoice>& choices, int gpus,
                                                    const MemoryMargin& margin, const std::string& margin_input);

}  // namespace zeroplan
