// `zeroplan simulate`: how fast is one step of each plan, and where does the time go? Step time, tokens/s,
// MFU, compute / exposed communication / offload waits, per-resource busy time, per-collective algbw and busbw,
// the GPU memory peak over the step; --trace FILE writes the timeline for Perfetto / chrome://tracing.
#pragma once

#include <CLI/CLI.hpp>

namespace zeroplan {

// Registers the subcommand; its callback stores the exit status (0 a simulated plan fits, 1 none fits,
// 2 bad input) in *status.
void add_simulate_command(CLI::App& app, int* status);

}  // namespace zeroplan
