// `zeroplan export`: a checkpoint's consolidated model as safetensors (run/safetensors_export.h).
#pragma once

#include <CLI/CLI.hpp>

namespace zeroplan {

void add_export_command(CLI::App& app, int* status);

}  // namespace zeroplan
