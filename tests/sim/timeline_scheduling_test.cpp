// The timeline's list scheduling: in-order resources, start/finish dependencies, exposed time, memory peak.
#include <gtest/gtest.h>

#include "sim/timeline.h"

namespace zeroplan {
namespace {

TEST(TimelineScheduling, TasksOnOneResourceRunInIssueOrder) {
  Timeline timeline;
  const TaskId a = timeline.add(Resource::gpu_compute, TaskKind::forward, 2.0, {});
  const TaskId b = timeline.add(Resource::gpu_compute, TaskKind::forward, 3.0, {});
  EXPECT_DOUBLE_EQ(timeline.task(a).start, 0.0);
  EXPECT_DOUBLE_EQ(timeline.task(b).start, 2.0);
  EXPECT_DOUBLE_EQ(timeline.task(b).finish, 5.0);
  EXPECT_DOUBLE_EQ(timeline.makespan(), 5.0);
}

TEST(TimelineScheduling, DependenciesOnFinishAndOnStart) {
  Timeline timeline;
  const TaskId compute = timeline.add(Resource::gpu_compute, TaskKind::forward, 4.0, {});
  const TaskId comm = timeline.add(Resource::nccl, TaskKind::all_reduce, 1.0, {after(compute)});
  const TaskId prefetch = timeline.add(Resource::nccl, TaskKind::all_gather, 1.0, {});
  const TaskId on_start = timeline.add(Resource::host_to_device, TaskKind::param_upload, 1.0,
                                       {with_start_of(comm)});
  EXPECT_DOUBLE_EQ(timeline.task(comm).start, 4.0);
  // In-order NCCL: the all-gather issued after the all-reduce waits for it even though it has no dependency.
  EXPECT_DOUBLE_EQ(timeline.task(prefetch).start, 5.0);
  EXPECT_DOUBLE_EQ(timeline.task(on_start).start, 4.0);
  EXPECT_DOUBLE_EQ(timeline.makespan(), 6.0);
}

TEST(TimelineScheduling, ExposedTimeIsBusyTimeNotCoveredByTheOtherResource) {
  Timeline timeline;
  timeline.add(Resource::gpu_compute, TaskKind::backward_input, 2.0, {});   // [0, 2]
  timeline.add(Resource::nccl, TaskKind::reduce_scatter, 3.0, {});         // [0, 3]: 1 s exposed
  const TaskId late = timeline.add(Resource::gpu_compute, TaskKind::backward_input, 1.0,
                                   {after(static_cast<TaskId>(1))});         // [3, 4]
  timeline.add(Resource::nccl, TaskKind::reduce_scatter, 2.0, {with_start_of(late)});  // [3, 5]: 1 s exposed
  EXPECT_DOUBLE_EQ(timeline.exposed_seconds(Resource::nccl, Resource::gpu_compute), 2.0);
  EXPECT_DOUBLE_EQ(timeline.idle_seconds(Resource::gpu_compute), 2.0);
  const auto busy = timeline.busy_seconds();
  EXPECT_DOUBLE_EQ(busy[static_cast<int>(Resource::nccl)], 5.0);
  EXPECT_DOUBLE_EQ(busy[static_cast<int>(Resource::gpu_compute)], 3.0);
}

TEST(TimelineScheduling, MemoryPeakFollowsAllocationsAndFrees) {
  Timeline timeline;
  const TaskId f0 = timeline.add(Resource::gpu_compute, TaskKind::forward, 1.0, {});
  const TaskId f1 = timeline.add(Resource::gpu_compute, TaskKind::forward, 1.0, {});
  const TaskId b1 = timeline.add(Resource::gpu_compute, TaskKind::backward_input, 1.0, {});
  const TaskId b0 = timeline.add(Resource::gpu_compute, TaskKind::backward_input, 1.0, {});
  timeline.set_memory(f0, 100, 0);
  timeline.set_memory(f1, 50, 0);
  timeline.free_at_finish(b1, 50);
  timeline.free_at_finish(b0, 100);
  // A buffer allocated at the instant another is freed does not count both (frees sort first).
  const TaskId after_b1 = timeline.add(Resource::nccl, TaskKind::all_gather, 1.0, {after(b1)});
  timeline.set_memory(after_b1, 60, 60);
  double when = -1.0;
  EXPECT_EQ(timeline.peak_memory(1000, &when), 1160);
  EXPECT_DOUBLE_EQ(when, 3.0);  // 150 live, 50 freed, 60 allocated: 1160, not 1210
}

// The loss's window (logits live) and a later, higher peak (the optimizer step's temporaries): the highest use
// while the logits are live is the window's own, not the step's.
TEST(TimelineScheduling, MemoryPeakWhileAUseIsLive) {
  Timeline timeline;
  const TaskId forward = timeline.add(Resource::gpu_compute, TaskKind::forward, 1.0, {});
  const TaskId head = timeline.add(Resource::gpu_compute, TaskKind::forward, 1.0, {});
  const TaskId backward = timeline.add(Resource::gpu_compute, TaskKind::backward_input, 1.0, {});
  const TaskId step = timeline.add(Resource::gpu_compute, TaskKind::optimizer_step, 1.0, {});
  timeline.set_memory(forward, 100, 0);
  timeline.set_memory(head, 40, 0, MemoryUse::logits);
  timeline.free_at_finish(backward, 40, MemoryUse::logits);
  timeline.free_at_finish(backward, 100);
  timeline.set_memory(step, 300, 300, MemoryUse::optimizer_temporaries);
  EXPECT_EQ(timeline.peak_memory(1000), 1300);
  EXPECT_EQ(timeline.peak_memory_while(MemoryUse::logits, 1000), 1140);
  EXPECT_EQ(timeline.peak_memory_while(MemoryUse::gradient_buckets, 1000), 0);  // never live
}

TEST(TimelineScheduling, ClearKeepsNothingButCapacity) {
  Timeline timeline;
  timeline.reserve(16);
  timeline.add(Resource::nvme, TaskKind::nvme_read, 1.0, {});
  timeline.clear();
  EXPECT_EQ(timeline.size(), 0u);
  EXPECT_DOUBLE_EQ(timeline.makespan(), 0.0);
  EXPECT_EQ(timeline.peak_memory(7), 7);
}

}  // namespace
}  // namespace zeroplan
