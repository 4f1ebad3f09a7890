#include "run/measured_trace.h"

#include <fstream>
#include <map>

#include "core/input_error.h"
#include "sim/chrome_trace.h"

namespace zeroplan {

namespace {

constexpr double kMicroseconds = 1e6;  // the trace format's unit

}  // namespace

std::filesystem::path rank_trace_path(const std::filesystem::path& file, int rank) {
  if (rank == 0) return file;
  std::filesystem::path out = file;
  out.replace_filename(file.stem().string() + ".rank" + std::to_string(rank) + file.extension().string());
  return out;
}

void check_trace_paths(const std::filesystem::path& file, int world, bool overwrite) {
  if (file.empty()) throw InputError("command line", "--trace", "expected a file name, got an empty one");
  const std::filesystem::path folder = file.parent_path();
  std::error_code ec;
  if (!folder.empty() && !std::filesystem::is_directory(folder, ec))
    throw InputError(file.string(), "--trace", "its folder " + folder.string() + " does not exist");
  for (int r = 0; r < world; ++r) {
    const std::filesystem::path path = rank_trace_path(file, r);
    if (std::filesystem::is_directory(path, ec))
      throw InputError(path.string(), "--trace", "is a folder; expected a file name");
    if (!overwrite && std::filesystem::exists(path, ec))
      throw InputError(path.string(), "--trace", "file exists; not overwriting it (pass --overwrite to replace it)");
  }
}

nlohmann::json measured_trace_events(const exec::StepTimes& step, int pid, const std::string& title) {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"ph", "M"}, {"pid", pid}, {"name", "process_name"}, {"args", {{"name", title}}}});
  std::map<std::string, int> lanes;  // lane name -> tid, in order of first appearance after the phases
  const auto tid_of = [&](const std::string& lane) {
    const auto [it, added] = lanes.emplace(lane, static_cast<int>(lanes.size()));
    if (added) {
      events.push_back({{"ph", "M"}, {"pid", pid}, {"tid", it->second}, {"name", "thread_name"},
                        {"args", {{"name", lane}}}});
      events.push_back({{"ph", "M"}, {"pid", pid}, {"tid", it->second}, {"name", "thread_sort_index"},
                        {"args", {{"sort_index", it->second}}}});
    }
    return it->second;
  };
  const auto interval = [&](const std::string& lane, const std::string& name, double start_s, double seconds) {
    events.push_back({{"ph", "X"}, {"pid", pid}, {"tid", tid_of(lane)}, {"name", name}, {"cat", lane},
                      {"ts", start_s * kMicroseconds}, {"dur", seconds * kMicroseconds}});
  };
  interval("phases", "forward", 0.0, step.forward_s);
  interval("phases", "backward", step.forward_s, step.backward_s);
  interval("phases", "optimizer", step.forward_s + step.backward_s, step.optimizer_s);
  for (const exec::MeasuredSpan& s : step.timeline) {
    if (s.seconds > 0.0) {
      interval(s.lane, s.name, s.start_s, s.seconds);
    } else {
      events.push_back({{"ph", "i"}, {"s", "t"}, {"pid", pid}, {"tid", tid_of(s.lane)}, {"name", s.name},
                        {"cat", s.lane}, {"ts", s.start_s * kMicroseconds}});
    }
  }
  return events;
}

void write_run_trace(const std::filesystem::path& file, const StepSimulation* predicted, const ModelDescription& model,
                     const std::string& predicted_title, const exec::StepTimes& measured, int rank,
                     std::int64_t step_number) {
  nlohmann::json doc;
  if (predicted && !predicted->events.empty()) {
    doc = chrome_trace(*predicted, model, predicted_title);
  } else {
    doc = {{"traceEvents", nlohmann::json::array()}, {"displayTimeUnit", "ms"}, {"otherData", nlohmann::json::object()}};
  }
  const std::string title = "measured: rank " + std::to_string(rank) + ", step " + std::to_string(step_number) +
                            " (the timed steps' median)";
  for (auto& event : measured_trace_events(measured, 2 + rank, title)) doc["traceEvents"].push_back(std::move(event));
  doc["otherData"]["measured_step_seconds"] = measured.step_s;
  doc["otherData"]["measured_rank"] = rank;
  doc["otherData"]["measured_step"] = step_number;
  doc["otherData"]["generator"] = "zeroplan run";
  std::ofstream out(file);
  if (!out) throw InputError(file.string(), "--trace", "cannot open the file for writing");
  out << doc.dump() << '\n';
  if (!out) throw InputError(file.string(), "--trace", "writing the trace failed");
}

}  // namespace zeroplan
