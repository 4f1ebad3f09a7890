// A step simulation as JSON, the same keys for `zeroplan simulate`, `recommend` and the time columns of `plan`:
// step_seconds, tokens_per_second, mfu, exposed_comm_seconds, and the breakdown beside them.
#pragma once

#include <nlohmann/json.hpp>

#include "sim/simulator.h"

namespace zeroplan {

// The JSON key of the throughput: "tokens_per_second", or "samples_per_second" for a layer-list model (no tokens).
const char* throughput_key(const ModelDescription& model);
// The four headline figures only (what `zeroplan plan` adds to each plan): step_seconds, the throughput under
// throughput_key, mfu, exposed_comm_seconds, and throughput_unit ("tokens" or "samples").
void add_time_fields(nlohmann::json& plan, const StepSimulation& simulation);
// Everything but the events: figures, conventions, busy time per resource, collectives, memory peak.
nlohmann::json simulation_json(const StepSimulation& simulation);

}  // namespace zeroplan
