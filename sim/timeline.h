// The timeline of one training step: tasks on resources (GPU compute stream, NCCL, copy engines, host CPU,
// NVMe) with dependencies, scheduled as CUDA streams run them: each resource executes its tasks in the order
// they were issued, and a task starts when its resource is free and every task it depends on has started or
// finished (as asked). Because the schedule builder issues tasks in an order where dependencies come first,
// start and finish are fixed the moment a task is added (in-order list scheduling, O(1) per dependency):
// no event queue, no heap allocation once the workspace has grown to the step's size.
// Also a memory counter: each task may allocate bytes when it starts and free bytes when it finishes; the peak
// over the step is read off the sorted counter events.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/units.h"

namespace zeroplan {

enum class Resource : std::uint8_t {
  gpu_compute,     // the CUDA compute stream (forward, backward, recompute, GPU optimizer step)
  nccl,            // the links through NCCL: all-gathers and reduce-scatters share the same NVLink/network
                   //   bandwidth, so collectives issued on several NCCL streams are serialized here
  host_to_device,  // the H2D copy engine over PCIe
  device_to_host,  // the D2H copy engine over PCIe
  host_cpu,        // this rank's share of the host CPU (offloaded optimizer)
  nvme,            // this rank's share of the node's NVMe
  host_python,     // the training process's Python thread: DeepSpeed's hooks, which issue the GPU work
};
inline constexpr int kResourceCount = 7;
std::string to_string(Resource resource);

// What a task is, for reports and traces (names are built from this and the layer index, never stored).
enum class TaskKind : std::uint8_t {
  forward,
  recompute,           // activation checkpointing: the forward re-run before a layer's backward
  backward_input,      // gradient w.r.t. the layer input (dgrad)
  backward_weight,     // gradient w.r.t. the layer parameters (wgrad)
  optimizer_step,      // GPU optimizer step over this rank's partition
  all_reduce,
  reduce_scatter,
  all_gather,
  param_upload,        // offload: parameters host -> device
  grad_download,       // offload: gradients device -> host
  param_download,      // param offload with the optimizer on the GPU: updated parameters device -> host
  cpu_optimizer_step,  // offload: one sub-group's optimizer step on the host CPU
  nvme_read,
  nvme_write,
  engine_hooks,        // DeepSpeed's module / gradient hooks on the host (host_python)
  gradient_copy,       // DeepSpeed copying gradients into / out of its buckets (flatten, copy back, partition)
};
std::string to_string(TaskKind kind);
bool is_collective(TaskKind kind);

using TaskId = std::int32_t;
inline constexpr TaskId kNoTask = -1;

// A dependency: the task may start only after `task` has finished (or, with on_start, has started; used for
// prefetches that are issued when an earlier layer's compute begins).
struct Dependency {
  TaskId task = kNoTask;
  bool on_start = false;
};
inline Dependency after(TaskId task) { return Dependency{task, false}; }
inline Dependency with_start_of(TaskId task) { return Dependency{task, true}; }

struct TimelineTask {
  double start = 0.0;     // seconds from the step's beginning
  double finish = 0.0;
  Resource resource = Resource::gpu_compute;
  TaskKind kind = TaskKind::forward;
  std::int32_t layer = -1;       // index into the model's layers, -1 when not one layer's
  std::int32_t micro_step = 0;
  Bytes bytes = 0;               // bytes moved (collective: the full buffer S; copies: bytes copied)
  double flops = 0.0;            // compute tasks
  Bytes memory_allocated = 0;    // bytes allocated on the GPU when the task starts
  Bytes memory_freed = 0;        // bytes freed when the task finishes
};

// What a dynamic GPU allocation holds (the memory model's component it belongs to), so that the peak can be
// split into components.
// grads, gradient_buckets and optimizer_temporaries are the DeepSpeed engine's transient buffers
// (sim/deepspeed_memory.h TransientGpuBytes).
enum class MemoryUse : std::uint8_t {
  activations,
  logits,
  gathered_params,
  grads,
  gradient_buckets,
  optimizer_temporaries
};
inline constexpr int kMemoryUseCount = 6;

// One change of the GPU memory counter.
struct MemoryChange {
  double time = 0.0;
  Bytes delta = 0;
  MemoryUse use = MemoryUse::activations;
};

class Timeline {
 public:
  // Forgets every task but keeps the capacity (a reused Timeline allocates nothing in steady state).
  void clear();
  void reserve(std::size_t tasks);

  // Adds a task; returns its id. A dependency on kNoTask is ignored. Its start is
  // max(resource free, every dependency's start or finish); finish = start + duration.
  TaskId add(Resource resource, TaskKind kind, double duration, std::initializer_list<Dependency> dependencies,
             std::int32_t layer = -1, std::int32_t micro_step = 0, Bytes bytes = 0, double flops = 0.0);
  TaskId add(Resource resource, TaskKind kind, double duration, const Dependency* dependencies,
             std::size_t dependency_count, std::int32_t layer = -1, std::int32_t micro_step = 0, Bytes bytes = 0,
             double flops = 0.0);

  // GPU memory: `allocated` bytes come into use when the task starts, `freed` bytes leave when it finishes.
  void set_memory(TaskId task, Bytes allocated, Bytes freed, MemoryUse use = MemoryUse::activations);
  // Frees bytes when `task` finishes (for buffers allocated by an earlier task and released by a later one).
  void free_at_finish(TaskId task, Bytes bytes, MemoryUse use = MemoryUse::activations);

  const TimelineTask& task(TaskId id) const { return tasks_[static_cast<std::size_t>(id)]; }
  const std::vector<TimelineTask>& tasks() const { return tasks_; }
  std::size_t size() const { return tasks_.size(); }

  // When the resource's last task finishes (0 before any task).
  double resource_free_at(Resource resource) const { return free_at_[static_cast<int>(resource)]; }
  // The step's end: the latest finish over every resource.
  double makespan() const;
  // Seconds each resource is busy (sum of its task durations; a resource runs one task at a time).
  std::array<double, kResourceCount> busy_seconds() const;

  // Seconds during which `busy` runs while `idle` has nothing running: e.g. NCCL busy while the compute
  // stream is idle = exposed communication. Tasks of one resource never overlap, so a merge of the two sorted
  // interval lists gives it in O(tasks). With a task-id range, only the `busy` tasks with ids in [first, end)
  // count (each against every `idle` task): the share of one stretch of the step.
  double exposed_seconds(Resource busy, Resource idle, TaskId first = 0, TaskId end = kNoTask) const;
  // Seconds during which the compute stream is idle before the makespan (whatever it waits for).
  double idle_seconds(Resource resource) const;

  // The memory counter's changes sorted by time (frees before allocations at equal times), and its peak given
  // the bytes in use before the step (baseline).
  const std::vector<MemoryChange>& memory_changes();
  // `at_peak`, when given, receives the bytes of each MemoryUse live at the peak (they sum to peak - baseline).
  Bytes peak_memory(Bytes baseline, double* peak_time = nullptr,
                    std::array<Bytes, kMemoryUseCount>* at_peak = nullptr);
  // The highest in use (from `baseline`) while bytes of `use` are live; 0 when they never are.
  Bytes peak_memory_while(MemoryUse use, Bytes baseline);

 private:
  std::vector<TimelineTask> tasks_;
  std::array<double, kResourceCount> free_at_{};
  std::vector<MemoryChange> memory_;
  bool memory_sorted_ = true;
  // Per resource, the ids of its tasks in issue order (== start order), for the interval merges.
  std::array<std::vector<TaskId>, kResourceCount> by_resource_;
};

}  // namespace zeroplan
