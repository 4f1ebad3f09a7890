#include "gui/run_report.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/input_error.h"
#include "core/number_checks.h"
#include "core/json_input.h"
#include "sim/memory_model.h"

namespace zeroplan {

namespace {

// gpu_bytes objects: one non-negative integer per component and "total" (plan_json.h's schema).
// gpu_bytes objects: one non-negative integer per component, and "total" when the writer has one (the plan's
// gpu_bytes always has; the measured side's total comes from the device view, see below).
std::vector<std::pair<std::string, Bytes>> read_gpu_bytes(const JsonFields& parent, const std::string& key,
                                                          bool total_required) {
  const JsonFields object = parent.object(key);
  const nlohmann::json& raw = parent.raw(key);
  std::vector<std::pair<std::string, Bytes>> out;
  // The planner's display order first (JSON objects come back sorted by key), then any other component.
  for (const auto& [name, unused] : GpuMemoryBreakdown{}.components()) {
    if (object.has(name)) out.emplace_back(name, object.non_negative_integer(name));
  }
  for (auto it = raw.begin(); it != raw.end(); ++it) {
    const bool known = std::any_of(out.begin(), out.end(), [&](const auto& entry) { return entry.first == it.key(); });
    if (it.key() == "total" || known) continue;
    out.emplace_back(it.key(), object.non_negative_integer(it.key()));
  }
  if (total_required || object.has("total")) out.emplace_back("total", object.non_negative_integer("total"));
  return out;
}

std::optional<double> optional_number(const JsonFields& fields, const std::string& key) {
  if (!fields.has(key)) return std::nullopt;
  return fields.non_negative_number(key);
}

}  // namespace

std::optional<Bytes> RunReport::predicted(const std::string& component) const {
  for (const auto& [name, bytes] : predicted_gpu_bytes) {
    if (name == component) return bytes;
  }
  return std::nullopt;
}

std::optional<Bytes> RunReport::measured(const std::string& component) const {
  for (const auto& [name, bytes] : measured_gpu_bytes) {
    if (name == component) return bytes;
  }
  return std::nullopt;
}

std::vector<std::string> report_labels(const std::vector<RunReport>& reports) {
  auto file_of = [](const RunReport& report) { return std::filesystem::path(report.source).filename().string(); };
  auto shared = [&](const RunReport& report, auto same) {
    return std::count_if(reports.begin(), reports.end(), [&](const RunReport& other) { return same(report, other); }) > 1;
  };
  std::vector<std::string> labels;
  for (const RunReport& report : reports) {
    std::string label = report.model_name;
    const bool same_model = shared(report, [](const RunReport& a, const RunReport& b) { return a.model_name == b.model_name; });
    if (same_model) {
      const bool same_file = shared(report, [&](const RunReport& a, const RunReport& b) {
        return a.model_name == b.model_name && file_of(a) == file_of(b);
      });
      label += " (" + (same_file ? report.source : file_of(report)) + ")";
    }
    labels.push_back(label);
  }
  // Still equal only when the same file (same model, same path) was opened more than once: number the repeats.
  std::vector<std::string> out = labels;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const auto earlier = std::count(labels.begin(), labels.begin() + static_cast<std::ptrdiff_t>(i), labels[i]);
    if (earlier > 0) out[i] += " #" + std::to_string(earlier + 1);
  }
  return out;
}

RunReport load_run_report(const std::filesystem::path& path) {
  return run_report_from_json(read_json_file(path), path.string());
}

RunReport run_report_from_json(const nlohmann::json& document, const std::string& source) {
  if (!document.is_object()) throw InputError(source, "", "a run report is a JSON object (zeroplan run --report)");
  const JsonFields top(document, source);
  if (!top.has("measured")) {
    throw InputError(source, "measured",
                     "missing: this is not a run report (write one with zeroplan run --report FILE); a plan "
                     "document alone has no measurements");
  }
  RunReport report;
  report.source = source;
  report.model_name = top.object("model").string("name");

  // The plan the run executed: the report's plans array holds it (the first when there are several).
  const nlohmann::json& plans = top.raw("plans");
  if (!plans.is_array() || plans.empty()) throw InputError(source, "plans", "expected a non-empty array of plans");
  const JsonFields plan(plans.front(), source, "plans[0]");
  report.plan_label = plan.string("label");
  report.predicted_gpu_bytes = read_gpu_bytes(plan, "gpu_bytes", true);
  report.predicted_step_seconds = optional_number(plan, "step_seconds");
  report.predicted_tokens_per_second = optional_number(plan, "tokens_per_second");

  // cli/run_command.cpp writes the allocator's peak per component under measured.gpu_bytes, the simulator's
  // prediction as measured.predicted_step_seconds / predicted_tokens_per_second, and the total as the device's
  // own view (device_used_peak_bytes, cudaMemGetInfo: context and libraries included) or, without a device
  // (CPU backend), the allocator's peak.
  const JsonFields measured = top.object("measured");
  report.measured_gpu_bytes = read_gpu_bytes(measured, "gpu_bytes", false);
  if (!report.measured("total")) {
    const Bytes device_peak = measured.non_negative_integer_or("device_used_peak_bytes", 0);
    if (device_peak > 0) {
      report.measured_gpu_bytes.emplace_back("total", device_peak);
      report.measured_total_basis = "device view (cudaMemGetInfo peak)";
    } else if (measured.has("allocator_peak_bytes")) {
      report.measured_gpu_bytes.emplace_back("total", measured.non_negative_integer("allocator_peak_bytes"));
      report.measured_total_basis = "allocator peak";
    } else {
      throw InputError(source, measured.field_path("gpu_bytes") + ".total",
                       "missing, and no device_used_peak_bytes or allocator_peak_bytes to take the total from");
    }
  } else {
    report.measured_total_basis = "gpu_bytes.total";
  }
  if (!report.predicted_step_seconds) report.predicted_step_seconds = optional_number(measured, "predicted_step_seconds");
  if (!report.predicted_tokens_per_second) {
    report.predicted_tokens_per_second = optional_number(measured, "predicted_tokens_per_second");
  }
  report.measured_step_seconds = measured.positive_number("step_seconds");
  report.measured_tokens_per_second = optional_number(measured, "tokens_per_second");
  if (measured.has("loss")) {
    const nlohmann::json& loss = measured.raw("loss");
    if (!loss.is_array()) throw InputError(source, measured.field_path("loss"), "expected an array of numbers (one per step)");
    for (std::size_t i = 0; i < loss.size(); ++i) {
      if (!loss[i].is_number()) {
        throw InputError(source, measured.field_path("loss") + "[" + std::to_string(i) + "]", "expected a number");
      }
      // A loss the report could only write as a huge number (1e999 parses as infinity) is no loss to plot.
      report.loss.push_back(require_finite(loss[i].get<double>(), source,
                                           measured.field_path("loss") + "[" + std::to_string(i) + "]"));
    }
  }
  return report;
}

}  // namespace zeroplan
