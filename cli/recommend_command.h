// `zeroplan recommend`: the fastest plans that fit for a fixed global batch, searched over ZeRO stage x offload
// x micro-batch x gradient accumulation x activation checkpointing x GPU count, best first, with why each beats
// the next.
#pragma once

#include <CLI/CLI.hpp>

namespace zeroplan {

// Registers the subcommand; its callback stores the exit status (0 some plan fits, 1 none, 2 bad input).
void add_recommend_command(CLI::App& app, int* status);

}  // namespace zeroplan
