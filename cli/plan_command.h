// `zeroplan plan`: will this model fit, with which ZeRO stage? Every stage and offload choice compared: per-GPU
// memory by component, host and NVMe memory, communication per step, verdict, headroom, largest micro-batch.
#pragma once

#include <CLI/CLI.hpp>

namespace zeroplan {

// Registers the subcommand; its callback stores the exit status (0 fits, 1 does not, 2 bad input) in *status.
void add_plan_command(CLI::App& app, int* status);

}  // namespace zeroplan
