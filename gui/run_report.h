// A run report written by `zeroplan run --report FILE`: the planner's plan document (sim/plan_json.h) plus the
// run's measurements under "measured". The GUI reads one or more and shows measured beside predicted per memory
// component and for step time and tokens/s.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/units.h"

namespace zeroplan {

struct RunReport {
  std::string source;       // the file
  std::string model_name;   // model.name
  std::string plan_label;   // the plan's label ("stage 0")
  // Per component (GpuMemoryBreakdown names, display order of the plan), then "total".
  std::vector<std::pair<std::string, Bytes>> predicted_gpu_bytes;
  std::vector<std::pair<std::string, Bytes>> measured_gpu_bytes;
  std::optional<double> predicted_step_seconds;
  std::optional<double> measured_step_seconds;
  std::optional<double> predicted_tokens_per_second;
  std::optional<double> measured_tokens_per_second;
  std::string measured_total_basis;  // where the measured total comes from ("device view ...", "allocator peak")
  std::vector<double> loss;  // per step

  std::optional<Bytes> predicted(const std::string& component) const;
  std::optional<Bytes> measured(const std::string& component) const;
};

// What each of several reports shown together is called, everywhere it appears (list, chart legends, table
// headers): the model's name; "model (file name)" where two reports share the model; "model (full path)" where
// they share the file name too; the same file opened twice gets " #2", " #3"... So the labels are distinct.
std::vector<std::string> report_labels(const std::vector<RunReport>& reports);

// Throws InputError naming the file and the field when the file is not a run report.
RunReport load_run_report(const std::filesystem::path& path);
RunReport run_report_from_json(const nlohmann::json& document, const std::string& source);

}  // namespace zeroplan
