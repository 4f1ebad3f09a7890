// What the GUI's input panel holds: the inputs every front end shares (core/plan_inputs.h), resolved the same way
// as the CLI's flags: defaults < DeepSpeed config < the values set here. The panel sets the model, cluster, GPUs,
// DeepSpeed config, micro-batch, sequence, accumulation, precision and checkpointing; the rest stay unset.
#pragma once

#include "core/plan_inputs.h"

namespace zeroplan {

using GuiInputs = PlanInputs;

}  // namespace zeroplan
