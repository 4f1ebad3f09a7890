#include "gui/run_report.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/input_error.h"
#include "core/number_checks.h"
#include "core/json_input.h"
#include "sim/memory_model.h"

namespace zeroplan {

namespace {

// An object of non-negative integers, in `order` first (JSON objects come back sorted by key), then any other
// key. The plan's gpu_bytes always has "total"; the measured side's total comes from the device view (below).
std::vector<std::pair<std::string, Bytes>> read_byte_map(const JsonFields& parent, const std::string& key,
                                                         const std::vector<std::string>& order) {
  const JsonFields object = parent.object(key);
  const nlohmann::json& raw = parent.raw(key);
  std::vector<std::pair<std::string, Bytes>> out;
  for (const std::string& name : order) {
    if (object.has(name)) out.emplace_back(name, object.non_negative_integer(name));
  }
  for (auto it = raw.begin(); it != raw.end(); ++it) {
    if (std::find(order.begin(), order.end(), it.key()) != order.end()) continue;
    out.emplace_back(it.key(), object.non_negative_integer(it.key()));
  }
  return out;
}

// gpu_bytes objects: one non-negative integer per component, in the planner's display order, "total" last.
std::vector<std::pair<std::string, Bytes>> read_gpu_bytes(const JsonFields& parent, const std::string& key,
                                                          bool total_required) {
  std::vector<std::string> order;
  for (const auto& [name, unused] : GpuMemoryBreakdown{}.components()) order.push_back(name);
  order.push_back("total");
  auto out = read_byte_map(parent, key, order);
  // "total" is read last whatever the file's key order; move it to the end.
  const auto total = std::find_if(out.begin(), out.end(), [](const auto& entry) { return entry.first == "total"; });
  if (total != out.end()) std::rotate(total, total + 1, out.end());
  if (total_required && total == out.end()) parent.object(key).non_negative_integer("total");  // throws: missing
  return out;
}

std::optional<double> optional_number(const JsonFields& fields, const std::string& key) {
  if (!fields.has(key)) return std::nullopt;
  return fields.non_negative_number(key);
}

template <typename T>
std::optional<T> find_entry(const std::vector<std::pair<std::string, T>>& entries, const std::string& key) {
  for (const auto& [name, value] : entries) {
    if (name == key) return value;
  }
  return std::nullopt;
}

void flatten_into(const nlohmann::json& value, const std::string& path,
                  std::vector<std::pair<std::string, std::string>>* out) {
  if (value.is_object()) {
    for (auto it = value.begin(); it != value.end(); ++it) {
      flatten_into(it.value(), path.empty() ? it.key() : path + "." + it.key(), out);
    }
  } else {
    out->emplace_back(path, value.is_string() ? value.get<std::string>() : value.dump());
  }
}

// The plan's communication model per collective kind (its object also has totals, PCIe and NVMe figures: only
// the collective kinds are compared with what a run counts).
std::vector<std::pair<std::string, Bytes>> read_plan_comm(const JsonFields& plan) {
  // The collective kinds only: the plan's object also carries totals and ratios (multiple_of_params is a fraction
  // at stage 3, where the persistent tensors are never gathered: sim/plan_json.h).
  const JsonFields comm = plan.object("comm_bytes_per_step");
  std::vector<std::pair<std::string, Bytes>> out;
  for (const std::string& kind : collective_kinds()) {
    if (!comm.has(kind)) {
      throw InputError(plan.source(), plan.field_path("comm_bytes_per_step") + "." + kind,
                       "missing: the plan's communication model has one entry per collective kind");
    }
    out.emplace_back(kind, comm.non_negative_integer(kind));
  }
  return out;
}

// The multi-rank part of a report (run/training_run.cpp): world size and stage, communication per collective
// kind beside the plan's, and one entry per rank.
void read_ranks(const JsonFields& top, const JsonFields& plan, const JsonFields& measured, RunReport* report) {
  const std::string& source = top.source();
  const std::int64_t world = measured.positive_integer("world_size");
  if (world > 1'000'000) measured.fail("world_size", "expected at most 1,000,000 ranks, got " + std::to_string(world));
  report->world_size = static_cast<int>(world);
  const std::int64_t stage = measured.non_negative_integer("stage");
  if (stage > 3) measured.fail("stage", "expected a ZeRO stage 0-3, got " + std::to_string(stage));
  if (stage != report->stage) {
    measured.fail("stage", "the run executed stage " + std::to_string(stage) + " but the report's plan (plans[0]) is "
                           "for stage " + std::to_string(report->stage) + ": expected the plan of the run's stage");
  }

  report->predicted_comm_bytes = read_plan_comm(plan);
  report->measured_comm_bytes = read_byte_map(measured, "comm_bytes_per_step", collective_kinds());
  const JsonFields seconds = measured.object("comm_seconds_per_step");
  const nlohmann::json& seconds_raw = measured.raw("comm_seconds_per_step");
  for (auto it = seconds_raw.begin(); it != seconds_raw.end(); ++it) {
    report->measured_comm_seconds.emplace_back(it.key(), seconds.non_negative_number(it.key()));
  }
  report->measured_exposed_comm_seconds = measured.non_negative_number("exposed_comm_seconds");

  const nlohmann::json& ranks = measured.raw("ranks");
  const std::string ranks_path = measured.field_path("ranks");
  if (!ranks.is_array()) {
    throw InputError(source, ranks_path, "expected an array with one object per rank, got " +
                                             std::string(ranks.type_name()));
  }
  if (ranks.size() != static_cast<std::size_t>(world)) {
    throw InputError(source, ranks_path, "expected " + std::to_string(world) + " entries (measured.world_size), got " +
                                             std::to_string(ranks.size()));
  }
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const std::string path = ranks_path + "[" + std::to_string(i) + "]";
    if (!ranks[i].is_object()) {
      throw InputError(source, path, "expected an object (rank, gpu_bytes, ...), got " + std::string(ranks[i].type_name()));
    }
    const JsonFields entry(ranks[i], source, path);
    RankMeasurement rank;
    const std::int64_t number = entry.non_negative_integer("rank");
    if (number != static_cast<std::int64_t>(i)) {
      entry.fail("rank", "expected " + std::to_string(i) + " (one entry per rank, in rank order), got " +
                             std::to_string(number));
    }
    rank.rank = static_cast<int>(i);
    rank.gpu_bytes = read_gpu_bytes(entry, "gpu_bytes", false);
    rank.device_used_peak_bytes = entry.non_negative_integer("device_used_peak_bytes");
    rank.allocator_peak_bytes = entry.non_negative_integer("allocator_peak_bytes");
    rank.step_seconds = entry.non_negative_number("step_seconds");
    rank.comm_bytes_per_step = read_byte_map(entry, "comm_bytes_per_step", collective_kinds());
    report->ranks.push_back(std::move(rank));
  }
}

}  // namespace

std::optional<Bytes> RankMeasurement::bytes(const std::string& component) const {
  return find_entry(gpu_bytes, component);
}
std::optional<Bytes> RankMeasurement::comm_bytes(const std::string& kind) const {
  return find_entry(comm_bytes_per_step, kind);
}

std::optional<Bytes> RunReport::predicted(const std::string& component) const {
  return find_entry(predicted_gpu_bytes, component);
}
std::optional<Bytes> RunReport::measured(const std::string& component) const {
  return find_entry(measured_gpu_bytes, component);
}
std::optional<Bytes> RunReport::predicted_comm(const std::string& kind) const {
  return find_entry(predicted_comm_bytes, kind);
}
std::optional<Bytes> RunReport::measured_comm(const std::string& kind) const {
  return find_entry(measured_comm_bytes, kind);
}
std::optional<double> RunReport::measured_comm_time(const std::string& kind) const {
  return find_entry(measured_comm_seconds, kind);
}
std::optional<std::string> RunReport::training_field(const std::string& key) const {
  return find_entry(training_fields, key);
}

const std::vector<std::string>& collective_kinds() {
  static const std::vector<std::string> kinds = {"all_reduce", "reduce_scatter", "all_gather"};
  return kinds;
}

std::vector<std::pair<std::string, std::string>> flatten_json_fields(const nlohmann::json& object) {
  std::vector<std::pair<std::string, std::string>> out;
  flatten_into(object, "", &out);
  return out;
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
  if (!plans.front().is_object()) {
    throw InputError(source, "plans[0]", "expected the plan object, got " + std::string(plans.front().type_name()));
  }
  const JsonFields plan(plans.front(), source, "plans[0]");
  report.plan_label = plan.string("label");
  const std::int64_t stage = plan.non_negative_integer("stage");
  if (stage > 3) plan.fail("stage", "expected a ZeRO stage 0-3, got " + std::to_string(stage));
  report.stage = static_cast<int>(stage);
  report.model_source = top.object("model").string("source");
  report.cluster_name = top.object("cluster").string("name");
  report.training_fields = flatten_json_fields(top.raw("training"));
  report.precision = top.object("training").string("precision");
  report.predicted_gpu_bytes = read_gpu_bytes(plan, "gpu_bytes", true);
  report.predicted_step_seconds = optional_number(plan, "step_seconds");
  report.predicted_tokens_per_second = optional_number(plan, "tokens_per_second");

  // run/training_run.cpp writes the allocator's peak per component under measured.gpu_bytes, the simulator's
  // prediction as measured.predicted_step_seconds / predicted_tokens_per_second, and the total as the device's
  // own view (device_used_peak_bytes, cudaMemGetInfo: context and libraries included) or, without a device
  // (CPU backend), the allocator's peak.
  const JsonFields measured = top.object("measured");
  report.backend = measured.string_or("backend", "not recorded");
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
  if (plan.has("host_bytes")) report.predicted_host_node_bytes = plan.non_negative_integer("host_bytes");
  if (measured.has("host_node_used_peak_bytes"))
    report.measured_host_node_bytes = measured.non_negative_integer("host_node_used_peak_bytes");
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

  // Every rank (zeroplan run records them since it runs ZeRO across ranks); a report without world_size is an
  // older one-rank report and has none of the multi-rank fields.
  if (measured.has("world_size")) {
    read_ranks(top, plan, measured, &report);
  } else {
    for (const char* key : {"ranks", "stage", "comm_bytes_per_step", "comm_seconds_per_step", "exposed_comm_seconds"}) {
      if (measured.has(key)) {
        measured.fail("world_size", std::string("missing: a report with measured.") + key +
                                        " gives the run's world size (a positive integer)");
      }
    }
    if (plan.has("comm_bytes_per_step")) report.predicted_comm_bytes = read_plan_comm(plan);
    report.format_note = "one rank, no per-rank section (an older report: zeroplan run did not record ranks or "
                         "communication then)";
  }
  return report;
}

}  // namespace zeroplan
