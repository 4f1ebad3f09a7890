// The ZeRO engine's offload paths (exec/zero/zero_engine.h describes them): ZeRO-Infinity parameter offload
// (offload_param: the host partition written through the staging buffers, the device AdamW's updates copied
// back) and ZeRO-Offload (offload_optimizer: host or NVMe optimizer states, gradients copied to the host per
// bucket, the CPU AdamW piece by piece). The rest of the engine is in zero_engine.cpp.
#include "exec/zero/zero_engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>

#include "exec/zero/zero_engine_detail.h"

namespace zeroplan::exec {

using detail::at;
using detail::seconds_since;

void ZeroEngine::write_host_params(std::int64_t part, const float* values, std::int64_t n, float* master) {
  const std::int64_t piece = buffers_.param_staging_elements;
  const std::int64_t eb = comm_dtype_bytes(type_);
  device_.synchronize();  // the staging buffer is idle
  // offload_param nvme: the bucket whose chunk this is (set_params writes a whole chunk, restore_state pieces of
  // one), kept in host memory or written to its file through a swap buffer.
  const int k = param_nvme_ ? bucket_of_partition_offset(part) : -1;
  for (std::int64_t done = 0; done < n; done += piece) {
    const std::int64_t count = std::min(piece, n - done);
    device_.upload_params(staging_[0], master ? master + done : nullptr, values + done, count);
    device_.lane_waits_for(Lane::to_host, Lane::compute);
    if (!param_nvme_) {
      device_.copy_to_host(at(params_, part + done, type_), staging_[0], count * eb);
      device_.synchronize();
      continue;
    }
    const std::int64_t offset = part + done - partition_.buckets()[k].partition_offset;
    if (void* host = host_chunk(k)) {
      device_.copy_to_host(at(host, offset, type_), staging_[0], count * eb);
      device_.synchronize();
    } else {
      const offload::ParamSwapper::Writing w = param_swapper_->begin_write(k, offset, count);
      device_.copy_to_host(w.data, staging_[0], count * eb);
      device_.synchronize();
      param_swapper_->end_write(w);
    }
  }
}

void ZeroEngine::update_offloaded_params(const std::function<void(const AdamwRange&)>& update) {
  // Bucket by bucket through the staging buffers in turn: the fp32 parameters (fp32 training: they are the
  // master AdamW updates) copied in, AdamW writing the new parameters there, copied out to the host partition
  // while the next bucket updates. offload_param nvme: the fp32 chunks are read ahead (one swap buffer left for the
  // writes), and each updated chunk is copied into a swap buffer and written to its file once the copy is done.
  const std::int64_t eb = comm_dtype_bytes(type_);
  const bool fp32 = master_ == nullptr;
  const auto& buckets = partition_.buckets();
  if (param_swapper_ && fp32) {
    std::vector<int> order;
    for (std::size_t k = 0; k < buckets.size(); ++k)
      if (buckets_on_nvme(static_cast<int>(k))) order.push_back(static_cast<int>(k));
    param_swapper_->plan_reads(order, param_swapper_->buffer_count() - 1);
  }
  for (std::size_t kk = 0; kk < buckets.size(); ++kk) {
    const GradientBucket& b = buckets[kk];
    const int k = static_cast<int>(kk);
    const int s = static_cast<int>(next_staging_++ % staging_.size());
    void* resident = host_chunk(k);  // null: the chunk is on NVMe
    if (fp32) {
      stage_param_chunk(k, s);
      device_.lane_waits_for(Lane::compute, Lane::to_device);
    } else {
      device_.wait_event(staging_event_base_ + s, Lane::compute);
    }
    update(AdamwRange{staging_[s], master_ ? master_ + b.partition_offset : nullptr, at(grads_, b.partition_offset, grad_type_),
                      m_ + b.partition_offset, v_ + b.partition_offset, b.chunk, b.chunk_begin(rank_)});
    device_.lane_waits_for(Lane::to_host, Lane::compute);
    if (resident) {
      const int a = device_.mark(Lane::to_host);
      device_.copy_to_host(resident, staging_[s], b.chunk * eb);
      param_d2h_marks_.emplace_back(a, device_.mark(Lane::to_host));
    } else {
      // The write may start only once the copy has landed: the host waits for it (the next bucket's update is
      // enqueued after, so the device idles for the wait's wake-up, not for the disk).
      const offload::ParamSwapper::Writing w = param_swapper_->begin_write(k, 0, b.chunk);
      const int a = device_.mark(Lane::to_host);
      device_.copy_to_host(w.data, staging_[s], b.chunk * eb);
      param_d2h_marks_.emplace_back(a, device_.mark(Lane::to_host));
      device_.record_event(swap_event_base_ + w.buffer, Lane::to_host);
      device_.host_wait_event(swap_event_base_ + w.buffer);
      param_swapper_->end_write(w);
    }
    device_.record_event(staging_event_base_ + s, Lane::to_host);
  }
  if (param_swapper_ && fp32) param_swapper_->plan_reads({});
  // The next copies in (the persistent tensors' gather, the next step's units) read what these wrote.
  device_.lane_waits_for(Lane::to_device, Lane::to_host);
}

// ---- ZeRO-Infinity parameter offload to NVMe ----

bool ZeroEngine::buckets_on_nvme(int k) const {
  return param_nvme_ && buffers_.param_nvme_chunk[static_cast<std::size_t>(k)] > 0;
}

void ZeroEngine::stage_param_chunk(int k, int s) {
  const void* host = host_chunk(k);
  offload::ParamSwapper::Held held;
  if (!host) {
    held = param_swapper_->acquire(k);
    host = held.data;
  }
  device_.wait_event(staging_event_base_ + s, Lane::to_device);
  const int a = device_.mark(Lane::to_device);
  device_.copy_to_device(staging_[s], host, partition_.buckets()[k].chunk * comm_dtype_bytes(type_));
  param_h2d_marks_.emplace_back(a, device_.mark(Lane::to_device));
  if (held.buffer >= 0) {
    device_.record_event(swap_event_base_ + held.buffer, Lane::to_device);
    param_swapper_->release(held.buffer);
  }
}

void* ZeroEngine::host_chunk(int k) const {
  const GradientBucket& b = partition_.buckets()[static_cast<std::size_t>(k)];
  if (!param_nvme_) return at(params_, b.partition_offset, type_);
  const std::int64_t o = buffers_.param_host_offset[static_cast<std::size_t>(k)];
  return o < 0 ? nullptr : at(params_, o, type_);
}

int ZeroEngine::bucket_of_partition_offset(std::int64_t part) const {
  const auto& buckets = partition_.buckets();
  const auto it = std::upper_bound(buckets.begin(), buckets.end(), part,
                                   [](std::int64_t p, const GradientBucket& b) { return p < b.partition_offset; });
  if (it == buckets.begin()) throw std::logic_error("ZeroEngine: partition offset " + std::to_string(part) + " before the first chunk");
  const int k = static_cast<int>(it - buckets.begin()) - 1;
  if (part >= buckets[k].partition_offset + buckets[k].chunk)
    throw std::logic_error("ZeroEngine: partition offset " + std::to_string(part) + " in no chunk");
  return k;
}

void ZeroEngine::setup_param_swap() {
  if (config_.zero.param_buffer_count < 1 || config_.zero.param_buffer_count > 1024)
    throw std::invalid_argument("zero_optimization.offload_param.buffer_count: " +
                                std::to_string(config_.zero.param_buffer_count) + "; expected 1 to 1024");
  offload::NvmeStoreOptions options;
  options.queue_depth = config_.zero.aio_queue_depth;
  options.block_bytes = config_.zero.aio_block_bytes;
  options.overlap_events = config_.zero.aio_overlap_events;
  options.config_source = config_.zero.param_nvme_path_source;
  options.config_field = config_.zero.param_nvme_path_field;
  if (buffers_.param_swap_buffers == 0) {
    // Every chunk kept in host memory (max_in_cpu, persistent tensors): nothing to swap, but the path is checked
    // as if (a store made and dropped), so that a wrong nvme_path is an error whatever the model.
    offload::NvmeStore probe(config_.zero.param_nvme_path, rank_, options);
    return;
  }
  // Events after the staging buffers' and their "host copies done": one per swap buffer, recorded after the
  // device copy that reads (or writes) it; the swapper waits for it before the buffer takes other data.
  swap_event_base_ = staging_event_base_ + static_cast<int>(staging_.size()) + 1;
  const bool pinned = config_.zero.offload_pin_memory;
  param_swapper_ = std::make_unique<offload::ParamSwapper>(
      config_.zero.param_nvme_path, rank_, options, buffers_.param_nvme_chunk, comm_dtype_bytes(type_),
      static_cast<int>(config_.zero.param_buffer_count),
      [&](std::int64_t bytes) {
        return device_.allocate_host("offload_swap_buffers", "parameter NVMe swap buffers", bytes, pinned);
      },
      [this](int buffer) { device_.host_wait_event(swap_event_base_ + buffer); },
      [this](int buffer) { return device_.event_passed(swap_event_base_ + buffer); });
}

void ZeroEngine::write_param_chunk(int k, std::int64_t offset, const void* src, std::int64_t n) {
  const std::size_t bytes = static_cast<std::size_t>(n * comm_dtype_bytes(type_));
  if (void* host = host_chunk(k)) {
    std::memcpy(at(host, offset, type_), src, bytes);
    return;
  }
  const offload::ParamSwapper::Writing w = param_swapper_->begin_write(k, offset, n);
  std::memcpy(w.data, src, bytes);
  param_swapper_->end_write(w);
}

void ZeroEngine::read_param_chunk(int k, void* out) {
  const offload::ParamSwapper::Held held = param_swapper_->acquire(k);
  std::memcpy(out, held.data, static_cast<std::size_t>(partition_.buckets()[k].chunk * comm_dtype_bytes(type_)));
  param_swapper_->release(held.buffer);
}

void ZeroEngine::plan_param_reads(const Zero3FetchPlan* plan) {
  if (!param_swapper_) return;
  std::vector<int> order;
  if (plan)  // every chunk on NVMe of every all-gather the plan issues, in the order gather_unit asks for them
    for (const Zero3UseStep& step : plan->steps)
      for (const Zero3Gather& g : step.gathers)
        for (int k : buffers_.unit_buckets[g.unit])
          if (buckets_on_nvme(k)) order.push_back(k);
  param_swapper_->plan_reads(order);
}

void* ZeroEngine::nvme_update_target(std::size_t i) {
  const Piece& p = pieces_[i];
  const GradientBucket& b = partition_.buckets()[static_cast<std::size_t>(p.bucket)];
  const std::int64_t offset = p.part - b.partition_offset;
  if (void* host = host_chunk(p.bucket)) return at(host, offset, type_);
  // A bucket's pieces come in order: its first opens the chunk's swap buffer, its last writes it.
  if (static_cast<int>(i) == bucket_pieces_[p.bucket].front())
    writing_ = param_swapper_->begin_write(p.bucket, 0, b.chunk);
  return at(writing_.data, offset, type_);
}

void ZeroEngine::finish_param_swap() {
  if (param_swapper_) param_swapper_->wait_writes();
}

// ---- ZeRO-Offload ----

void ZeroEngine::setup_offload() {
  const std::int64_t part = partition_.partition_elements();
  const std::int64_t eb = comm_dtype_bytes(type_);
  const bool pinned = config_.zero.offload_pin_memory;
  const bool nvme = !config_.zero.nvme_path.empty();
  // DeepSpeed keeps the fp32 partition (single_partition_of_fp32_groups), its gradient and the CPU Adam states
  // on the host (stage_1_and_2.py with cpu_offload, stage3.py _setup_for_real_optimizer with offload_optimizer);
  // with nvme, stage3.py swaps the fp32 partition and the states (the gradient stays on the host).
  if (!nvme) {
    host_master_ = static_cast<float*>(device_.allocate_host("offload_master_params", "fp32 master partition",
                                                            part * 4, pinned));
    host_m_ = static_cast<float*>(device_.allocate_host("offload_optimizer_states", "AdamW momentum", part * 4, pinned));
    host_v_ = static_cast<float*>(device_.allocate_host("offload_optimizer_states", "AdamW variance", part * 4, pinned));
  }
  host_grads_ = device_.allocate_host("offload_grads", "reduced gradient partition",
                                      part * comm_dtype_bytes(grad_type_), pinned);
  // offload_param nvme: the CPU AdamW writes each piece into its chunk's swap buffer (nvme_update_target).
  if ((type_ != CommDtype::f32 || nvme) && !param_nvme_)
    host_half_ = offload_param_ ? params_  // the CPU AdamW writes the offloaded partition directly
                                : device_.allocate_host("offload_params", "updated partition (device precision)",
                                                        part * eb, pinned);
  if (type_ != CommDtype::f32 && type_ != CommDtype::bf16 && type_ != CommDtype::f16)
    throw std::invalid_argument("ZeroEngine: the CPU AdamW takes fp32, bf16 or fp16 gradients");
  if (!nvme)
    for (const GradientBucket& b : partition_.buckets())
      device_.init_host_master(host_master_ + b.partition_offset, b.chunk_begin(rank_), b.chunk);
  cpu_adamw_ =
      std::make_unique<offload::CpuAdamw>(offload::optimizer_threads(config_.zero.cpu_optimizer_threads, world_));
  decay_ = offload::DecayGeometry{layout_.blocks_begin(), layout_.block_stride(), layout_.block_decay_elements(),
                                  layout_.blocks_end(), layout_.tail_decay_end()};
  const int stage = config_.zero.stage;
  const auto& buckets = partition_.buckets();
  bucket_pieces_.assign(buckets.size(), {});
  if (config_.zero.sub_group_elements < 1)
    throw std::invalid_argument("zero_optimization.sub_group_size: " + std::to_string(config_.zero.sub_group_elements) +
                                "; expected at least 1");
  const std::int64_t piece = std::min(kOffloadPieceElements, config_.zero.sub_group_elements);
  for (std::size_t k = 0; k < buckets.size(); ++k) {
    const GradientBucket& b = buckets[k];
    const std::int64_t cb = b.chunk_begin(rank_);
    for (std::int64_t sub = 0; sub < b.chunk; sub += piece) {
      const std::int64_t n = std::min(piece, b.chunk - sub);
      bucket_pieces_[k].push_back(static_cast<int>(pieces_.size()));
      pieces_.push_back(Piece{static_cast<int>(k), b.partition_offset + sub, cb + sub,
                              (stage == 1 ? cb : b.partition_offset) + sub, (stage == 3 ? b.partition_offset : cb) + sub,
                              n});
    }
  }
  // Named events after the bucket buffers' and stage 3's: one per piece, "its gradient is on the host".
  piece_event_base_ = static_cast<int>(slots_.size() + 2 * buffers_.units.size());
  if (!nvme) return;
  if (config_.zero.optimizer_buffer_count < 1 || config_.zero.optimizer_buffer_count > 1024)
    throw std::invalid_argument("zero_optimization.offload_optimizer.buffer_count: " +
                                std::to_string(config_.zero.optimizer_buffer_count) + "; expected 1 to 1024");
  offload::NvmeStoreOptions options;
  options.queue_depth = config_.zero.aio_queue_depth;  // DeepSpeed's aio section, as the parameter swapper's
  options.block_bytes = config_.zero.aio_block_bytes;
  options.overlap_events = config_.zero.aio_overlap_events;
  options.config_source = config_.zero.nvme_path_source;
  options.config_field = config_.zero.nvme_path_field;
  std::vector<std::int64_t> sizes;
  for (const Piece& p : pieces_) sizes.push_back(p.n);
  swapper_ = std::make_unique<offload::OptimizerSwapper>(
      config_.zero.nvme_path, rank_, options, std::move(sizes), static_cast<int>(config_.zero.optimizer_buffer_count),
      [&](std::int64_t bytes) {
        return device_.allocate_host("offload_swap_buffers", "NVMe swap buffers", bytes, pinned);
      });
  // The initial states on disk (DeepSpeed's swapper initialize_parameters): the master as init_host_master
  // computes it, whatever the pieces, and zero moments.
  for_each_offloaded_piece(offload::SwapAccess::write, [&](const Piece& p, float* master, float* m, float* v) {
    device_.init_host_master(master, p.flat, p.n);
    std::fill(m, m + p.n, 0.0f);
    std::fill(v, v + p.n, 0.0f);
  });
}

void ZeroEngine::for_each_offloaded_piece(offload::SwapAccess access,
                                          const std::function<void(const Piece&, float*, float*, float*)>& visit) {
  if (!swapper_) {
    for (const Piece& p : pieces_) visit(p, host_master_ + p.part, host_m_ + p.part, host_v_ + p.part);
    return;
  }
  const offload::SwapTimes t = swapper_->for_each_piece(access, [&](int i, const offload::SwappedStates& s) {
    visit(pieces_[i], s.master, s.exp_avg, s.exp_avg_sq);
  });
  swap_times_.read_bytes += t.read_bytes;
  swap_times_.write_bytes += t.write_bytes;
  swap_times_.wait_s += t.wait_s;
}

void ZeroEngine::copy_gradients_to_host(int k) {
  // The bucket's chunk is final once its reduction (comm lane) is; one rank at stage 1 reduces nothing, and
  // backward (compute lane) wrote it.
  const bool reduced_on_comm = !(world_ == 1 && config_.zero.stage < 2);
  device_.lane_waits_for(Lane::to_host, reduced_on_comm ? Lane::comm : Lane::compute);
  for (int i : bucket_pieces_[k]) {
    const Piece& p = pieces_[i];
    const int a = device_.mark(Lane::to_host);
    device_.copy_to_host(at(host_grads_, p.part, grad_type_), at(grads_, p.grad, grad_type_),
                         p.n * comm_dtype_bytes(grad_type_));
    to_host_marks_.emplace_back(a, device_.mark(Lane::to_host));
    device_.record_event(piece_event_base_ + i, Lane::to_host);
  }
}

offload::AdamwHyper ZeroEngine::offload_hyper(float grad_scale) const {
  const auto& o = config_.optimizer;
  return offload::AdamwHyper{static_cast<float>(o.learning_rate), static_cast<float>(o.beta1),
                             static_cast<float>(o.beta2),         static_cast<float>(o.epsilon),
                             static_cast<float>(o.weight_decay),  grad_scale,
                             optimizer_step_};
}

void ZeroEngine::update_buckets_below(std::int64_t hi) {
  // The previous step's backward, the last reader of the old parameters, ended synchronized (finish_step), and
  // the forward kernels enqueued since read buckets already updated: the copies need no lane order before them.
  const auto& buckets = partition_.buckets();
  const std::size_t count = buckets.size();
  bool updated = false;
  while (deferred_.done < count) {
    const auto k = static_cast<int>(count - 1 - deferred_.done);  // from the bottom of the layout
    if (buckets[k].begin >= hi) break;
    for (int i : bucket_pieces_[k]) {
      const Piece& p = pieces_[i];
      update_piece(static_cast<std::size_t>(i), deferred_.hyper, host_master_ + p.part, host_m_ + p.part,
                   host_v_ + p.part);
    }
    // Each bucket's all-gather as soon as its pieces are on the device (bucket by bucket, not in gather groups:
    // the forward can start on a bucket while the next ones update).
    if (world_ > 1) all_gather_group(static_cast<std::size_t>(k), static_cast<std::size_t>(k) + 1, Lane::to_device);
    ++deferred_.done;
    updated = true;
  }
  if (deferred_.done == count) deferred_.pending = false;
  if (updated) device_.lane_waits_for(Lane::compute, world_ > 1 ? Lane::comm : Lane::to_device);
}

void ZeroEngine::complete_deferred_update() {
  if (!deferred_.pending) return;
  update_buckets_below(layout_.total());
  device_.synchronize();
}

void ZeroEngine::offloaded_update(float grad_scale) {
  const offload::AdamwHyper hyper = offload_hyper(grad_scale);
  // New parameter values may land only after their last readers: backward on the compute lane (and the
  // stage-3 gathers, which the compute lane has waited for).
  device_.lane_waits_for(Lane::to_device, Lane::compute);
  if (!swapper_ && !offload_param_) {
    update_in_batches(hyper);
    device_.lane_waits_for(Lane::compute, Lane::to_device);
    return;
  }
  // Stages 1-2 on several ranks: a gather group's all-gather starts once its last piece is on the device, beside
  // the CPU AdamW of the groups after it (issued after the whole update, it ran 5-9 ms after it on 2x H200).
  // Pieces follow the buckets' order, and a group is a run of buckets.
  const bool gather = config_.zero.stage < 3 && world_ > 1;
  std::size_t group = 0;
  std::size_t i = 0;
  for_each_offloaded_piece(offload::SwapAccess::update, [&](const Piece& p, float* master, float* m, float* v) {
    update_piece(i++, hyper, master, m, v);
    if (!gather) return;
    const auto [first, last] = gather_groups_[group];
    if (static_cast<std::size_t>(p.bucket) + 1 != last || static_cast<int>(i - 1) != bucket_pieces_[last - 1].back())
      return;
    device_.lane_waits_for(Lane::comm, Lane::to_device);
    all_gather_group(first, last);
    ++group;
  });
  // The next forward reads the new parameters (and the all-gathers, which begin_step waits for).
  device_.lane_waits_for(Lane::compute, Lane::to_device);
}

offload::AdamwTensors ZeroEngine::piece_tensors(std::size_t i, float* master, float* m, float* v, void* updated) const {
  const Piece& p = pieces_[i];
  offload::AdamwTensors t;
  t.params = master;
  const void* g = at(host_grads_, p.part, grad_type_);
  if (grad_type_ == CommDtype::f32) t.grads = static_cast<const float*>(g);
  else if (grad_type_ == CommDtype::bf16) t.grads_bf16 = static_cast<const std::uint16_t*>(g);
  else t.grads_fp16 = static_cast<const std::uint16_t*>(g);
  t.exp_avg = m;
  t.exp_avg_sq = v;
  if (updated != master && type_ != CommDtype::f32) {  // with offload_param: the host parameter partition itself
    t.params_half = static_cast<std::uint16_t*>(updated);
    t.half_format = type_ == CommDtype::bf16 ? offload::HalfFormat::bf16 : offload::HalfFormat::fp16;
  }
  t.count = p.n;
  t.flat_base = p.flat;
  return t;
}

void ZeroEngine::update_in_batches(const offload::AdamwHyper& hyper) {
  // The states and the 16-bit copy in host memory, indexed like the device partition (stage 3's parameters), so
  // the pieces of a batch are contiguous on both sides unless a piece's parameters sit elsewhere.
  const std::int64_t eb = comm_dtype_bytes(type_);
  std::vector<std::int64_t> elements;
  for (const Piece& p : pieces_) elements.push_back(p.n);
  std::vector<offload::AdamwTensors> batch;
  for (const auto& [first, last] : offload_update_batches(elements)) {
    batch.clear();
    for (std::size_t i = first; i < last; ++i) {
      const Piece& p = pieces_[i];
      device_.host_wait_event(piece_event_base_ + static_cast<int>(i));  // this piece's gradient has arrived
      float* master = host_master_ + p.part;
      batch.push_back(piece_tensors(i, master, host_m_ + p.part, host_v_ + p.part,
                                    host_half_ ? at(host_half_, p.part, type_) : static_cast<void*>(master)));
    }
    const auto t0 = std::chrono::steady_clock::now();
    cpu_adamw_->update(batch.data(), batch.size(), hyper, decay_);
    cpu_adamw_s_ += seconds_since(t0);
    // One copy per run of pieces contiguous in host memory and on the device.
    for (std::size_t run = first; run < last;) {
      std::size_t end = run + 1;
      while (end < last && pieces_[end].part == pieces_[end - 1].part + pieces_[end - 1].n &&
             pieces_[end].param == pieces_[end - 1].param + pieces_[end - 1].n)
        ++end;
      const Piece& p = pieces_[run];
      const std::int64_t n = pieces_[end - 1].part + pieces_[end - 1].n - p.part;
      const void* src = host_half_ ? at(host_half_, p.part, type_) : static_cast<const void*>(host_master_ + p.part);
      const int a = device_.mark(Lane::to_device);
      device_.copy_to_device(at(params_, p.param, type_), src, n * eb);
      to_device_marks_.emplace_back(a, device_.mark(Lane::to_device));
      run = end;
    }
  }
}

void ZeroEngine::update_piece(std::size_t i, const offload::AdamwHyper& hyper, float* master, float* m, float* v) {
  const Piece& p = pieces_[i];
  const std::int64_t eb = comm_dtype_bytes(type_);
  device_.host_wait_event(piece_event_base_ + static_cast<int>(i));  // this piece's gradient has arrived
  void* updated = param_nvme_   ? nvme_update_target(i)
                  : host_half_ ? at(host_half_, p.part, type_)
                               : static_cast<void*>(master);
  const offload::AdamwTensors t = piece_tensors(i, master, m, v, updated);
  const auto t0 = std::chrono::steady_clock::now();
  cpu_adamw_->update(t, hyper, decay_);
  // fp32 with nvme: the parameters are the master, which is in a swap buffer reused before a copy from it
  // would have finished.
  if (type_ == CommDtype::f32 && updated != master) std::memcpy(updated, master, static_cast<std::size_t>(p.n) * 4);
  cpu_adamw_s_ += seconds_since(t0);
  if (param_nvme_ && !host_chunk(p.bucket) && static_cast<int>(i) == bucket_pieces_[p.bucket].back()) {
    param_swapper_->end_write(writing_);  // the bucket's chunk is whole: to its file, beside the next updates
    writing_ = offload::ParamSwapper::Writing{};
  }
  if (offload_param_) return;  // the parameters are the host partition just written: nothing to copy
  const int a = device_.mark(Lane::to_device);
  device_.copy_to_device(at(params_, p.param, type_), updated, p.n * eb);
  to_device_marks_.emplace_back(a, device_.mark(Lane::to_device));
}

void ZeroEngine::collect_offload_times() {
  offload_times_ = OffloadTimes{};
  if (param_swapper_) {  // the reads of this step's all-gathers and the writes of its update
    const offload::SwapTimes t = param_swapper_->take_times();
    offload_times_.param_nvme_read_bytes = t.read_bytes;
    offload_times_.param_nvme_write_bytes = t.write_bytes;
    offload_times_.param_nvme_wait_s = t.wait_s;
  }
  for (const auto& [a, b] : param_h2d_marks_) offload_times_.param_to_device_s += device_.seconds_between(a, b);
  for (const auto& [a, b] : param_d2h_marks_) offload_times_.param_to_host_s += device_.seconds_between(a, b);
  if (!offload_) return;
  for (const auto& [a, b] : to_host_marks_) offload_times_.to_host_s += device_.seconds_between(a, b);
  for (const auto& [a, b] : to_device_marks_) offload_times_.to_device_s += device_.seconds_between(a, b);
  offload_times_.cpu_adamw_s = cpu_adamw_s_;
  offload_times_.pieces = static_cast<int>(pieces_.size());
  offload_times_.nvme_read_bytes = swap_times_.read_bytes;
  offload_times_.nvme_write_bytes = swap_times_.write_bytes;
  offload_times_.nvme_wait_s = swap_times_.wait_s;
}

}  // namespace zeroplan::exec
