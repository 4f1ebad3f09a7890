// `zeroplan calibrate`: measures the machine it runs on (GEMM rates, collectives between its GPUs, pinned PCIe
// copies, CPU AdamW, memory and disk bandwidth) and writes a cluster description that plan, simulate and
// recommend read with --cluster FILE (run/calibration.h does the work).
#pragma once

#include <CLI/CLI.hpp>

namespace zeroplan {

// Registers the subcommand; its callback stores the exit status in *status: 0 written, 2 bad input or a failed
// measurement.
void add_calibrate_command(CLI::App& app, int* status);

}  // namespace zeroplan
