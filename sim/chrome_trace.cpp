#include "sim/chrome_trace.h"

#include <fstream>

#include "core/input_error.h"
#include "core/units.h"

namespace zeroplan {

namespace {

constexpr double kMicroseconds = 1e6;

std::string task_name(const TimelineTask& task, const ModelDescription& model) {
  std::string name = to_string(task.kind);
  if (task.layer >= 0 && static_cast<std::size_t>(task.layer) < model.layers.size()) {
    name += " " + model.layers[static_cast<std::size_t>(task.layer)].name;
  }
  return name;
}

}  // namespace

nlohmann::json chrome_trace(const StepSimulation& simulation, const ModelDescription& model,
                            const std::string& title) {
  nlohmann::json events = nlohmann::json::array();
  const int pid = 1;
  events.push_back({{"ph", "M"}, {"pid", pid}, {"name", "process_name"}, {"args", {{"name", title}}}});
  for (int r = 0; r < kResourceCount; ++r) {
    events.push_back({{"ph", "M"}, {"pid", pid}, {"tid", r}, {"name", "thread_name"},
                      {"args", {{"name", to_string(static_cast<Resource>(r))}}}});
    events.push_back({{"ph", "M"}, {"pid", pid}, {"tid", r}, {"name", "thread_sort_index"},
                      {"args", {{"sort_index", r}}}});
  }
  for (const TimelineTask& task : simulation.events) {
    nlohmann::json args = {{"micro_step", task.micro_step}};
    if (task.bytes > 0) args["bytes"] = task.bytes;
    if (task.flops > 0.0) args["flops"] = task.flops;
    if (is_collective(task.kind) && task.finish > task.start) {
      const double seconds = task.finish - task.start;
      args["algbw_GB_per_s"] = static_cast<double>(task.bytes) / seconds / kGB;
    }
    if (task.memory_allocated > 0) args["allocates_bytes"] = task.memory_allocated;
    if (task.memory_freed > 0) args["frees_bytes"] = task.memory_freed;
    events.push_back({{"ph", "X"},
                      {"pid", pid},
                      {"tid", static_cast<int>(task.resource)},
                      {"name", task_name(task, model)},
                      {"cat", to_string(task.kind)},
                      {"ts", task.start * kMicroseconds},
                      {"dur", (task.finish - task.start) * kMicroseconds},
                      {"args", args}});
  }
  // Memory counter: the static bytes, then every change (sorted by time), in GiB for a readable axis.
  Bytes in_use = simulation.static_gpu_bytes;
  events.push_back({{"ph", "C"}, {"pid", pid}, {"name", "GPU memory (GiB)"}, {"ts", 0.0},
                    {"args", {{"in use", to_gib(in_use)}}}});
  const std::vector<MemoryChange>& changes = simulation.memory_changes;
  for (std::size_t i = 0; i < changes.size(); ++i) {
    in_use += changes[i].delta;
    // One sample per instant: changes at the same time (a free and an allocation) show as their net effect.
    if (i + 1 < changes.size() && changes[i + 1].time == changes[i].time) continue;
    events.push_back({{"ph", "C"}, {"pid", pid}, {"name", "GPU memory (GiB)"},
                      {"ts", changes[i].time * kMicroseconds}, {"args", {{"in use", to_gib(in_use)}}}});
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"step_seconds", simulation.step_seconds},
            {"peak_gpu_bytes", simulation.peak_gpu_bytes},
            {"exposed_comm_seconds", simulation.exposed_comm_seconds},
            {"generator", "zeroplan simulate"}}}};
}

void write_chrome_trace(const std::filesystem::path& path, const StepSimulation& simulation,
                        const ModelDescription& model, const std::string& title) {
  std::ofstream out(path);
  if (!out) throw InputError(path.string(), "--trace", "cannot open the file for writing");
  out << chrome_trace(simulation, model, title).dump() << '\n';
  if (!out) throw InputError(path.string(), "--trace", "writing the trace failed");
}

}  // namespace zeroplan
