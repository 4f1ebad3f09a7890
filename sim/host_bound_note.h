// The line plan, simulate and the GUI show where DeepSpeed's Python sets a plan's step: for stage 3, which host the step
// is timed for and how to time it for another (the host speed input scales stage 3's per-call host costs,
// sim/simulator.h host_speed_factor); for stages 0-2, that the input does not scale them and how far machines of one
// kind were measured apart on such a step.
#pragma once

#include <string>
#include <vector>

#include "core/cluster_description.h"
#include "core/training_config.h"
#include "sim/plan_choice.h"
#include "sim/simulator.h"

namespace zeroplan {

// Notes where the timeline's host_python lane is busy for a third of a plan's step or more (`steps[i]` is plan
// `choices[i]`'s simulation, null where it was not timed): one line for such stage-3 plans, one for such plans at
// stages 0-2; `host_op_input` names the input that sets the host's speed (the CLI's --host-op-seconds, the GUI's
// field). None where no plan is so bound or the engine is not DeepSpeed's.
std::vector<std::string> host_bound_notes(const ClusterDescription& cluster, const TrainingConfig& training,
                                          const std::vector<PlanChoice>& choices,
                                          const std::vector<const StepSimulation*>& steps,
                                          const std::string& host_op_input);

}  // namespace zeroplan
