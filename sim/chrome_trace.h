// The step's timeline as Chrome trace-event JSON (the format chrome://tracing and ui.perfetto.dev open):
// one track (thread) per resource with a complete event ("ph": "X") per task, and a counter track ("ph": "C")
// of GPU memory in use. Times in microseconds, as the format requires.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "core/model_description.h"
#include "sim/simulator.h"

namespace zeroplan {

// `simulation` must have been run with SimulationOptions::record_events. title names the process track.
nlohmann::json chrome_trace(const StepSimulation& simulation, const ModelDescription& model,
                            const std::string& title);

// Writes the trace; throws InputError naming the file when it cannot be written.
void write_chrome_trace(const std::filesystem::path& path, const StepSimulation& simulation,
                        const ModelDescription& model, const std::string& title);

}  // namespace zeroplan
