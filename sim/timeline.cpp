#include "sim/timeline.h"

#include <algorithm>
#include <stdexcept>

namespace zeroplan {

std::string to_string(Resource resource) {
  switch (resource) {
    case Resource::gpu_compute: return "GPU compute";
    case Resource::nccl: return "NCCL";
    case Resource::host_to_device: return "H2D copy (PCIe)";
    case Resource::device_to_host: return "D2H copy (PCIe)";
    case Resource::host_cpu: return "host CPU";
    case Resource::nvme: return "NVMe";
    case Resource::host_python: return "host (Python)";
  }
  return "unknown";
}

std::string to_string(TaskKind kind) {
  switch (kind) {
    case TaskKind::forward: return "forward";
    case TaskKind::recompute: return "recompute";
    case TaskKind::backward_input: return "backward (input grad)";
    case TaskKind::backward_weight: return "backward (weight grad)";
    case TaskKind::optimizer_step: return "optimizer step";
    case TaskKind::all_reduce: return "all-reduce";
    case TaskKind::reduce_scatter: return "reduce-scatter";
    case TaskKind::all_gather: return "all-gather";
    case TaskKind::param_upload: return "params H2D";
    case TaskKind::grad_download: return "grads D2H";
    case TaskKind::param_download: return "params D2H";
    case TaskKind::cpu_optimizer_step: return "CPU optimizer step";
    case TaskKind::nvme_read: return "NVMe read";
    case TaskKind::nvme_write: return "NVMe write";
    case TaskKind::engine_hooks: return "engine hooks";
    case TaskKind::gradient_copy: return "gradient copies";
  }
  return "unknown";
}

bool is_collective(TaskKind kind) {
  return kind == TaskKind::all_reduce || kind == TaskKind::reduce_scatter || kind == TaskKind::all_gather;
}

void Timeline::clear() {
  tasks_.clear();
  memory_.clear();
  memory_sorted_ = true;
  free_at_.fill(0.0);
  for (auto& ids : by_resource_) ids.clear();
}

void Timeline::reserve(std::size_t tasks) {
  tasks_.reserve(tasks);
  memory_.reserve(2 * tasks);
  for (auto& ids : by_resource_) ids.reserve(tasks);
}

TaskId Timeline::add(Resource resource, TaskKind kind, double duration,
                     std::initializer_list<Dependency> dependencies, std::int32_t layer, std::int32_t micro_step,
                     Bytes bytes, double flops) {
  return add(resource, kind, duration, dependencies.begin(), dependencies.size(), layer, micro_step, bytes, flops);
}

TaskId Timeline::add(Resource resource, TaskKind kind, double duration, const Dependency* dependencies,
                     std::size_t dependency_count, std::int32_t layer, std::int32_t micro_step, Bytes bytes,
                     double flops) {
  const int r = static_cast<int>(resource);
  double start = free_at_[r];
  for (std::size_t i = 0; i < dependency_count; ++i) {
    const Dependency& dependency = dependencies[i];
    if (dependency.task == kNoTask) continue;
    // Dependencies always precede the task (the builder issues in dependency order); a forward reference
    // would be a bug in the schedule, not bad input.
    if (dependency.task < 0 || static_cast<std::size_t>(dependency.task) >= tasks_.size()) {
      throw std::logic_error("timeline: dependency on a task not yet added");
    }
    const TimelineTask& before = tasks_[static_cast<std::size_t>(dependency.task)];
    start = std::max(start, dependency.on_start ? before.start : before.finish);
  }
  TimelineTask task;
  task.start = start;
  task.finish = start + duration;
  task.resource = resource;
  task.kind = kind;
  task.layer = layer;
  task.micro_step = micro_step;
  task.bytes = bytes;
  task.flops = flops;
  free_at_[r] = task.finish;
  const auto id = static_cast<TaskId>(tasks_.size());
  tasks_.push_back(task);
  by_resource_[r].push_back(id);
  return id;
}

void Timeline::set_memory(TaskId id, Bytes allocated, Bytes freed, MemoryUse use) {
  TimelineTask& task = tasks_[static_cast<std::size_t>(id)];
  task.memory_allocated += allocated;
  task.memory_freed += freed;
  if (allocated != 0) memory_.push_back({task.start, allocated, use});
  if (freed != 0) memory_.push_back({task.finish, -freed, use});
  memory_sorted_ = false;
}

void Timeline::free_at_finish(TaskId id, Bytes bytes, MemoryUse use) { set_memory(id, 0, bytes, use); }

double Timeline::makespan() const {
  double end = 0.0;
  for (double free_at : free_at_) end = std::max(end, free_at);
  return end;
}

std::array<double, kResourceCount> Timeline::busy_seconds() const {
  std::array<double, kResourceCount> busy{};
  for (const TimelineTask& task : tasks_) busy[static_cast<int>(task.resource)] += task.finish - task.start;
  return busy;
}

double Timeline::exposed_seconds(Resource busy, Resource idle, TaskId first, TaskId end) const {
  const auto& busy_ids = by_resource_[static_cast<int>(busy)];
  const auto& idle_ids = by_resource_[static_cast<int>(idle)];
  double exposed = 0.0;
  std::size_t j = 0;
  for (TaskId id : busy_ids) {
    if (id < first || (end != kNoTask && id >= end)) continue;
    const TimelineTask& b = tasks_[static_cast<std::size_t>(id)];
    double uncovered = b.finish - b.start;
    // Skip idle-resource intervals that end before this one starts; they cannot cover later ones either,
    // since both lists are in increasing time order.
    while (j < idle_ids.size() && tasks_[static_cast<std::size_t>(idle_ids[j])].finish <= b.start) ++j;
    for (std::size_t k = j; k < idle_ids.size(); ++k) {
      const TimelineTask& c = tasks_[static_cast<std::size_t>(idle_ids[k])];
      if (c.start >= b.finish) break;
      uncovered -= std::min(b.finish, c.finish) - std::max(b.start, c.start);
    }
    exposed += std::max(0.0, uncovered);
  }
  return exposed;
}

double Timeline::idle_seconds(Resource resource) const {
  double busy = 0.0;
  for (TaskId id : by_resource_[static_cast<int>(resource)]) {
    const TimelineTask& task = tasks_[static_cast<std::size_t>(id)];
    busy += task.finish - task.start;
  }
  return makespan() - busy;
}

const std::vector<MemoryChange>& Timeline::memory_changes() {
  if (!memory_sorted_) {
    // Frees first at equal times: a buffer released at the instant another is allocated does not count twice.
    std::sort(memory_.begin(), memory_.end(), [](const MemoryChange& a, const MemoryChange& b) {
      return a.time < b.time || (a.time == b.time && a.delta < b.delta);
    });
    memory_sorted_ = true;
  }
  return memory_;
}

Bytes Timeline::peak_memory(Bytes baseline, double* peak_time, std::array<Bytes, kMemoryUseCount>* at_peak) {
  const auto& changes = memory_changes();
  Bytes in_use = baseline;
  Bytes peak = baseline;
  double when = 0.0;
  std::array<Bytes, kMemoryUseCount> live{};
  std::array<Bytes, kMemoryUseCount> live_at_peak{};
  for (const MemoryChange& change : changes) {
    in_use += change.delta;
    live[static_cast<int>(change.use)] += change.delta;
    if (in_use > peak) {
      peak = in_use;
      when = change.time;
      live_at_peak = live;
    }
  }
  if (peak_time != nullptr) *peak_time = when;
  if (at_peak != nullptr) *at_peak = live_at_peak;
  return peak;
}

Bytes Timeline::peak_memory_while(MemoryUse use, Bytes baseline) {
  Bytes in_use = baseline, peak = 0, live = 0;
  for (const MemoryChange& change : memory_changes()) {
    in_use += change.delta;
    if (change.use == use) live += change.delta;
    if (live > 0) peak = std::max(peak, in_use);
  }
  return peak;
}

}  // namespace zeroplan
