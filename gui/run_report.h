// A run report written by `zeroplan run --report FILE`: the planner's plan document (sim/plan_json.h) plus the
// run's measurements under "measured". The GUI reads one or more and shows measured beside predicted per memory
// component and for step time and tokens/s; for the report it selects, every rank's memory and step time and the
// bytes and seconds per collective kind beside the plan's (run/training_run.cpp writes them).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/units.h"

namespace zeroplan {

// One rank's figures (measured.ranks[i]).
struct RankMeasurement {
  int rank = 0;
  std::vector<std::pair<std::string, Bytes>> gpu_bytes;  // allocator peak per component
  Bytes device_used_peak_bytes = 0;                      // cudaMemGetInfo's used bytes at their peak; 0: no device
  Bytes allocator_peak_bytes = 0;
  double step_seconds = 0.0;                             // median after warm-up
  std::vector<std::pair<std::string, Bytes>> comm_bytes_per_step;  // per collective kind

  std::optional<Bytes> bytes(const std::string& component) const;
  std::optional<Bytes> comm_bytes(const std::string& kind) const;
};

struct RunReport {
  std::string source;       // the file
  std::string model_name;   // model.name
  std::string model_source; // model.source ("bundled:gpt2-124m" or the file the run read)
  std::string cluster_name; // cluster.name
  std::string plan_label;   // the plan's label ("stage 0")
  std::string backend;      // measured.backend ("cuda", "cpu")
  std::string precision;    // training.precision
  int stage = 0;            // the ZeRO stage the run executed
  int world_size = 1;       // ranks of the run
  // Old one-rank reports (before zeroplan run recorded every rank) have no measured.world_size and no ranks[]:
  // their one rank is taken from measured.gpu_bytes and the peaks, and this says so where the report is shown.
  std::string format_note;
  // Per component (GpuMemoryBreakdown names, display order of the plan), then "total".
  std::vector<std::pair<std::string, Bytes>> predicted_gpu_bytes;
  std::vector<std::pair<std::string, Bytes>> measured_gpu_bytes;
  std::optional<double> predicted_step_seconds;
  std::optional<double> measured_step_seconds;
  std::optional<double> predicted_tokens_per_second;
  std::optional<double> measured_tokens_per_second;
  std::string measured_total_basis;  // where the measured total comes from ("device view ...", "allocator peak")
  std::vector<double> loss;  // per step
  // Host memory per node: the plan's total (plans[0].host_bytes: offloaded states, the ranks' processes, the kernel's
  // share of pinned pages) and, in reports since 2026-11-26, what the node used at its peak (measured.
  // host_node_used_peak_bytes: MemAvailable at launch less its lowest, run/process_memory.h).
  std::optional<Bytes> predicted_host_node_bytes;
  std::optional<Bytes> measured_host_node_bytes;

  // Communication per step: the plan's model (plans[0].comm_bytes_per_step, the collective kinds only) and what
  // the run counted where each collective was issued; busy seconds per kind and exposed communication (the comm
  // stream busy while compute waits), medians after warm-up. Empty / nullopt in old one-rank reports.
  std::vector<std::pair<std::string, Bytes>> predicted_comm_bytes;
  std::vector<std::pair<std::string, Bytes>> measured_comm_bytes;
  std::vector<std::pair<std::string, double>> measured_comm_seconds;
  std::optional<double> measured_exposed_comm_seconds;
  std::vector<RankMeasurement> ranks;  // world_size entries, rank i at index i

  // The training summary (the document's "training"), flattened to "zero.reduce_bucket_size" = "500000000":
  // what the GUI compares with its own inputs before it sets its simulator's figures beside the run's.
  std::vector<std::pair<std::string, std::string>> training_fields;

  std::optional<Bytes> predicted(const std::string& component) const;
  std::optional<Bytes> measured(const std::string& component) const;
  std::optional<Bytes> predicted_comm(const std::string& kind) const;
  std::optional<Bytes> measured_comm(const std::string& kind) const;
  std::optional<double> measured_comm_time(const std::string& kind) const;
  std::optional<std::string> training_field(const std::string& key) const;
};

// The collective kinds of the plan's comm_bytes_per_step that a run measures, in display order.
const std::vector<std::string>& collective_kinds();

// A JSON object's scalar leaves as ("a.b", text) pairs, in key order; arrays are written as JSON text. The same
// flattening reads a report's training summary and the GUI's own (core/training_config.h training_to_json).
std::vector<std::pair<std::string, std::string>> flatten_json_fields(const nlohmann::json& object);

// What each of several reports shown together is called, everywhere it appears (list, chart legends, table
// headers): the model's name; "model (file name)" where two reports share the model; "model (full path)" where
// they share the file name too; the same file opened twice gets " #2", " #3"... So the labels are distinct.
std::vector<std::string> report_labels(const std::vector<RunReport>& reports);

// Throws InputError naming the file and the field when the file is not a run report.
RunReport load_run_report(const std::filesystem::path& path);
RunReport run_report_from_json(const nlohmann::json& document, const std::string& source);

}  // namespace zeroplan
