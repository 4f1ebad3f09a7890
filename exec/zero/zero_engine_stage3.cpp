// The ZeRO engine's stage 3 (exec/zero/zero_engine.h): the gathered-parameter arena and persistent tensors, the
// fetch plan's gathers, prefetches and releases as the model asks for its units, and the all-gathers themselves
// (from the 16-bit partition, a staging buffer of offloaded parameters, or the fp32 master cast into the rank's slot).
#include "exec/zero/zero_engine.h"

#include "exec/zero/zero_engine_detail.h"

#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace zeroplan::exec {

using detail::at;

void ZeroEngine::setup_stage3() {
  const auto& buckets = partition_.buckets();
  if (buffers_.persistent_elements > 0)
    persistent_ = device_.allocate("gathered_params", "persistent parameters (whole)", buffers_.persistent_elements, type_);
  // A transformer's arena is the communicator's window where it has one, so that NCCL gathers into it on the copy
  // engines (communicator.h allocate_window). A layer list's micro-step replays as a CUDA graph, where copy-engine
  // collectives were not measured: its arena stays ours.
  if (buffers_.arena_elements > 0 && !layout_.is_network()) {
    const std::int64_t bytes = buffers_.arena_elements * comm_dtype_bytes(type_);
    arena_ = comm_.allocate_window(bytes);
    if (arena_) device_.record_external("gathered_params", "gathered parameters (arena, NCCL window)", arena_, bytes);
  }
  if (buffers_.arena_elements > 0 && !arena_)
    arena_ = device_.allocate("gathered_params", "gathered parameters (arena)", buffers_.arena_elements, type_);
  for (std::size_t k = 0; k < buckets.size(); ++k)
    if (buckets[k].persistent)
      device_.init_params(at(persistent_, buffers_.persistent_offset[k], type_), nullptr, buckets[k].begin,
                          buckets[k].elements());
  const int U = static_cast<int>(buffers_.units.size());
  unit_region_.assign(U, -1);
  // Named events: [0, slots) the gradient bucket buffers, then one per unit for "gathered" and one per unit for
  // "released".
  gather_event_base_ = static_cast<int>(slots_.size());
  release_event_base_ = gather_event_base_ + U;
}

void* ZeroEngine::param_at(std::int64_t offset) const {
  if (!stage3()) return at(params_, offset, type_);
  const int k = partition_.bucket_of(offset);
  const GradientBucket& b = partition_.buckets()[k];
  if (b.persistent) return at(persistent_, buffers_.persistent_offset[k] + (offset - b.begin), type_);
  const int u = buffers_.bucket_unit[k];
  if (unit_region_[u] < 0)
    throw std::logic_error("ZeroEngine: parameter at flat index " + std::to_string(offset) +
                           " read while its unit is not gathered (params_needed missing)");
  return at(arena_, unit_region_[u] + (offset - buffers_.unit_gather_lo[u]), type_);
}

void ZeroEngine::begin_forward_only() {
  complete_deferred_update();
  if (stage3()) start_schedule(&buffers_.forward_plan);
}

void ZeroEngine::start_schedule(const Zero3FetchPlan* plan) {
  record_pending_releases();
  if (plan_ && cursor_ != plan_->steps.size())
    throw std::logic_error("ZeroEngine: the model used " + std::to_string(cursor_) + " of the " +
                           std::to_string(plan_->steps.size()) + " parameter units of its schedule");
  for (std::int64_t r : unit_region_)
    if (r >= 0) throw std::logic_error("ZeroEngine: a gathered unit outlived its schedule");
  plan_ = plan;
  cursor_ = 0;
  plan_param_reads(plan);
  // The first gathers read partitions the optimizer (compute lane) may just have written.
  if (plan_) device_.lane_waits_for(Lane::comm, Lane::compute);
}

void ZeroEngine::params_needed(std::int64_t lo, std::int64_t hi) {
  log_graph_call(GraphCall::params_needed, lo, hi);
  if (deferred_.pending) update_buckets_below(hi);
  if (!stage3()) return;
  if (!plan_ || cursor_ >= plan_->steps.size())
    throw std::logic_error("ZeroEngine: params_needed outside a forward/backward schedule");
  record_pending_releases();
  const Zero3UseStep& step = plan_->steps[cursor_++];
  if (buffers_.units[step.unit].first != lo || buffers_.units[step.unit].second != hi)
    throw std::logic_error("ZeroEngine: the model used parameters [" + std::to_string(lo) + ", " + std::to_string(hi) +
                           ") where its schedule expects unit " + std::to_string(step.unit));
  for (const Zero3Gather& g : step.gathers) gather_unit(g.unit, g.arena_offset);
  if (config_.record_timeline) unit_marks_.emplace_back(step.unit, device_.mark(Lane::compute));
  if (!buffers_.unit_buckets[step.unit].empty()) {
    const int a = device_.mark(Lane::compute);
    device_.wait_event(gather_event_base_ + step.unit, Lane::compute);
    wait_marks_.emplace_back(a, device_.mark(Lane::compute));
  }
  pending_releases_ = step.releases;
}

void ZeroEngine::record_pending_releases() {
  // The compute lane has enqueued every reader of these units: later gathers into their ranges wait for this.
  for (int u : pending_releases_) {
    const int event = release_event_base_ + u;
    device_.record_event(event, Lane::compute);
    freed_.push_back(FreedRange{unit_region_[u], unit_region_[u] + buffers_.train_plan.unit_elements[u], event});
    unit_region_[u] = -1;
  }
  pending_releases_.clear();
}

void ZeroEngine::gather_unit(int u, std::int64_t region) {
  const std::int64_t size = buffers_.train_plan.unit_elements[u];
  // Wait (on the comm lane) for the last readers of whatever occupied this range before.
  for (std::size_t i = 0; i < freed_.size();) {
    if (freed_[i].lo < region + size && region < freed_[i].hi) {
      device_.wait_event(freed_[i].event, Lane::comm);
      freed_[i] = freed_.back();
      freed_.pop_back();
    } else {
      ++i;
    }
  }
  const auto& buckets = partition_.buckets();
  const int begin = device_.mark(Lane::comm);
  gather_buckets(
      buffers_.unit_buckets[u],
      [&](int k) { return at(arena_, region + (buckets[k].begin - buffers_.unit_gather_lo[u]), type_); },
      std::numeric_limits<std::int64_t>::max());  // one group per unit
  comm_marks_.emplace_back(static_cast<int>(CommKind::all_gather), begin, device_.mark(Lane::comm));
  device_.record_event(gather_event_base_ + u, Lane::comm);
  unit_region_[u] = region;
}

void ZeroEngine::all_gather_persistent() {
  // The persistent tensors are whole on every rank: after the update, each rank's chunks go to all.
  device_.lane_waits_for(Lane::comm, Lane::compute);
  const auto& buckets = partition_.buckets();
  std::vector<int> persistent;
  for (std::size_t k = 0; k < buckets.size(); ++k)
    if (buckets[k].persistent) persistent.push_back(static_cast<int>(k));
  const int begin = device_.mark(Lane::comm);
  gather_buckets(
      persistent, [&](int k) { return at(persistent_, buffers_.persistent_offset[k], type_); },
      config_.zero.allgather_bucket_elements);
  comm_marks_.emplace_back(static_cast<int>(CommKind::all_gather), begin, device_.mark(Lane::comm));
}

void ZeroEngine::gather_buckets(const std::vector<int>& ks, const std::function<void*(int)>& dst,
                                std::int64_t group_elements) {
  const auto& buckets = partition_.buckets();
  const std::size_t most = offload_param_ ? staging_.size() : ks.size();
  std::size_t i = 0;
  while (i < ks.size()) {
    // The group: at least one bucket, then while within group_elements (and the staging buffers).
    std::size_t end = i + 1;
    std::int64_t grouped = buckets[ks[i]].elements();
    while (end < ks.size() && end - i < most && grouped + buckets[ks[end]].elements() <= group_elements)
      grouped += buckets[ks[end++]].elements();
    std::vector<const void*> src(end - i);
    std::vector<int> used;
    for (std::size_t j = i; j < end; ++j) {
      const GradientBucket& b = buckets[ks[j]];
      if (gathers_cast_master_) {
        // The chunk of the master rounded into this rank's own slot of the destination, gathered in place
        // (NCCL's in-place all-gather: send == recv + rank * count).
        void* slot = at(dst(ks[j]), static_cast<std::int64_t>(rank_) * b.chunk, type_);
        device_.convert(slot, type_, master_ + b.partition_offset, CommDtype::f32, b.chunk, Lane::comm);
        src[j - i] = slot;
        continue;
      }
      if (!offload_param_) {
        src[j - i] = at(params_, b.partition_offset, type_);
        continue;
      }
      // Host to device into a staging buffer once the all-gather (or copy back) that last used it is done. A
      // chunk on NVMe comes from its swap buffer (read ahead by the plan), free again once the copy is done.
      const int s = static_cast<int>(next_staging_++ % staging_.size());
      stage_param_chunk(ks[j], s);
      src[j - i] = staging_[s];
      used.push_back(s);
    }
    if (offload_param_) device_.lane_waits_for(Lane::comm, Lane::to_device);
    comm_.group_start();
    for (std::size_t j = i; j < end; ++j)
      comm_.all_gather(src[j - i], dst(ks[j]), buckets[ks[j]].chunk, type_);
    comm_.group_end();
    for (int s : used) device_.record_event(staging_event_base_ + s, Lane::comm);
    i = end;
  }
}

}  // namespace zeroplan::exec
