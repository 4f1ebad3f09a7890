// `zeroplan model NAME|FILE`: a model description expanded (parameters, largest layer, per-layer table).
#pragma once

#include <CLI/CLI.hpp>

namespace zeroplan {

void add_model_command(CLI::App& app, int* status);

}  // namespace zeroplan
