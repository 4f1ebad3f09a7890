// `zeroplan run --trace FILE`: a measured step laid beside the plan's timeline in one Chrome trace-event file
// (chrome://tracing, ui.perfetto.dev), the predicted step as process 1 (sim/chrome_trace.h) and the rank's
// measured step as process 2 + rank. The measured lanes are what the ZeRO engine marks on the device
// (exec/zero/zero_engine.h MeasuredSpan): each collective (an NCCL call or group) on the communication lane, each wait of the
// compute lane for another lane, the offload copies, and at stage 3 where each parameter unit's compute began;
// the phases (forward, backward, optimizer) are laid end to end from the step's start at their measured lengths.
// The CPU AdamW runs on the host clock and is not on the device's lanes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "core/model_description.h"
#include "exec/trainer.h"
#include "sim/simulator.h"

namespace zeroplan {

// Where rank `rank`'s trace goes: FILE itself for rank 0; for the others FILE with ".rank<r>" before its
// extension (trace.json -> trace.rank1.json). Each rank's times start at its own step's start.
std::filesystem::path rank_trace_path(const std::filesystem::path& file, int rank);

// Checks, before anything runs, that every rank's trace file can be written: the folder exists and no file is
// there unless `overwrite`. Throws InputError naming the file and --trace.
void check_trace_paths(const std::filesystem::path& file, int world, bool overwrite);

// One measured step of one rank as trace events of process `pid` named `title`.
nlohmann::json measured_trace_events(const exec::StepTimes& step, int pid, const std::string& title);

// The file for one rank: the plan's step (when `predicted` recorded its events; else the measured step alone) and
// the rank's measured step `step_number` (1-based, of the whole run).
void write_run_trace(const std::filesystem::path& file, const StepSimulation* predicted, const ModelDescription& model,
                     const std::string& predicted_title, const exec::StepTimes& measured, int rank,
                     std::int64_t step_number);

}  // namespace zeroplan
