// `zeroplan run`: trains the model on this machine's GPU (or the CPU reference backend) from the same model
// description and training configuration the planner reads, and reports measured memory per planner component and
// step time beside the plan's prediction, with the error of each.
#pragma once

#include <CLI/CLI.hpp>

namespace zeroplan {

// Registers the subcommand; its callback stores the exit status in *status: 0 ran, 1 the planner says it does not
// fit (and --force was not given), 2 bad input or a failed run (out of memory, CUDA error).
void add_run_command(CLI::App& app, int* status);

}  // namespace zeroplan
