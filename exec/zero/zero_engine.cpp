#include "exec/zero/zero_engine.h"

#include "exec/zero/zero_engine_detail.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <tuple>

namespace zeroplan::exec {

using detail::at;
using detail::seconds_since;

namespace {

// One NCCL group per allgather_bucket_size elements of buckets (at least one bucket each), in bucket order.
std::vector<std::pair<std::size_t, std::size_t>> gather_groups(const std::vector<GradientBucket>& buckets,
                                                               std::int64_t group_elements) {
  std::vector<std::pair<std::size_t, std::size_t>> groups;
  std::size_t k = 0;
  while (k < buckets.size()) {
    const std::size_t first = k;
    std::int64_t grouped = 0;
    do {
      grouped += buckets[k].elements();
      ++k;
    } while (k < buckets.size() && grouped + buckets[k].elements() <= group_elements);
    groups.emplace_back(first, k);
  }
  return groups;
}

// A backend whose buffers are fp32 (the CPU reference computes a 16-bit model in fp32) accumulates and reduces
// in fp32 already: the fp32 gradient settings change nothing there.
ExecConfig for_element_type(ExecConfig config, CommDtype element) {
  if (element == CommDtype::f32) config.zero.fp32_grad_accumulation = config.zero.fp32_communication = false;
  return config;
}

}  // namespace

ZeroEngine::ZeroEngine(const ExecConfig& config, const ParamLayout& layout, ZeroDevice& device, Communicator& comm,
                       Trainability trainability, GradientPartitionHome gradient_home)
    : config_(for_element_type(config, device.element_type())),
      frozen_(trainability == Trainability::frozen),
      layout_(layout),
      device_(device),
      comm_(comm),
      partition_(layout, comm.world(), comm.rank(), partition_rules(config.zero)),
      buffers_(zero_buffer_layout(layout, partition_, config_.zero, config.grad_accum)),
      type_(device.element_type()),
      grad_type_(config_.zero.fp32_grad_accumulation ? CommDtype::f32 : type_),
      comm_type_(config_.zero.fp32_communication ? CommDtype::f32 : type_),
      rank_(comm.rank()),
      world_(comm.world()),
      gather_groups_(gather_groups(partition_.buckets(), config.zero.allgather_bucket_elements)) {
  const int stage = config_.zero.stage;
  const std::int64_t n = layout_.total();
  const std::int64_t part = partition_.partition_elements();
  const auto& buckets = partition_.buckets();
  if (frozen_ && (config_.zero.offload_optimizer || config_.zero.offload_param))
    throw std::invalid_argument(std::string("zero_optimization.") +
                                (config_.zero.offload_optimizer ? "offload_optimizer" : "offload_param") +
                                ": the engine of frozen parameters offloads nothing (they have no optimizer states, "
                                "and their offload is not built)");
  offload_ = config_.zero.offload_optimizer;
  if (offload_ && stage == 0)
    throw std::invalid_argument("zero_optimization.offload_optimizer: the executor offloads the optimizer at ZeRO "
                                "stages 1-3 (the partitioned optimizer states); got stage 0");
  if (!frozen_ && stage == 1 && static_cast<int>(buckets.size()) > device_.max_norm_slots())
    throw std::invalid_argument("zero_optimization.reduce_bucket_size: " + std::to_string(buckets.size()) +
                                " buckets; at most " + std::to_string(device_.max_norm_slots()) +
                                " are supported (use a larger bucket)");
  const bool fp32 = type_ == CommDtype::f32;
  offload_param_ = config_.zero.offload_param;
  if (offload_param_ && stage != 3)
    throw std::invalid_argument("zero_optimization.offload_param: parameters are offloaded at ZeRO stage 3 (the "
                                "partitioned parameters); got stage " + std::to_string(stage));
  if (offload_param_ && config_.zero.param_buffer_count < 1)
    throw std::invalid_argument("zero_optimization.offload_param.buffer_count: " +
                                std::to_string(config_.zero.param_buffer_count) + "; expected at least 1");
  if (offload_param_ && buffers_.largest_chunk > config_.zero.param_buffer_elements)
    throw std::invalid_argument("zero_optimization.offload_param.buffer_size: " +
                                std::to_string(config_.zero.param_buffer_elements) +
                                " elements; a staging buffer must hold the largest partition chunk, " +
                                std::to_string(buffers_.largest_chunk) + " elements");
  param_nvme_ = offload_param_ && !config_.zero.param_nvme_path.empty();
  gathers_cast_master_ = stage3_gathers_cast_master(config_.zero, !fp32, frozen_);
  if (gathers_cast_master_) {
    // No 16-bit partition: the all-gathers cast the master (zero_buffer_layout.h stage3_gathers_cast_master).
  } else if (!offload_param_) {
    params_ = device_.allocate("params", stage == 3 ? "parameter partition" : "parameters", stage == 3 ? part : n, type_);
    device_.zero(params_, stage == 3 ? part : n, type_, Lane::compute);
  } else if (param_nvme_) {
    // The chunks kept in host memory (zero_buffer_layout.h param_host_offset); the rest is in the swap files.
    if (buffers_.param_host_elements > 0)
      params_ = device_.allocate_host("offload_params", "parameter chunks kept in host memory",
                                      buffers_.param_host_elements * comm_dtype_bytes(type_),
                                      config_.zero.offload_pin_memory);
  } else if (!(offload_ && fp32 && config_.zero.nvme_path.empty())) {
    // allocate_host memory is zeroed. With offload_optimizer cpu in fp32 training the partition is the host master.
    params_ = device_.allocate_host("offload_params", "parameter partition", part * comm_dtype_bytes(type_),
                                    config_.zero.offload_pin_memory);
  }
  const std::int64_t states = stage == 0 ? n : part;
  const std::int64_t grad_elements = stage >= 2 ? part : n;
  grads_lent_ = gradient_home == GradientPartitionHome::trainer;
  // A lent partition must be written whole by each step's reduce-scatters before anything reads it, and read by the
  // update before the next forward (exec/activation_accounting.h mlp_saved_layout).
  if (grads_lent_ && (frozen_ || stage < 2 || config_.grad_accum != 1 || offload_ || offload_param_ ||
                      grad_type_ != type_))
    throw std::logic_error("ZeroEngine: a gradient partition lent by the trainer needs trained parameters at stage "
                           "2-3, one micro-step a step, no offload and gradients in the model's precision");
  if (!frozen_ && !grads_lent_)
    grads_ = device_.allocate("grads", stage >= 2 ? "gradient partition" : "gradients", grad_elements, grad_type_);
  if (!offload_ && !frozen_) {
    if (!fp32)
      master_ = static_cast<float*>(device_.allocate("master_params", "fp32 master weights", states, CommDtype::f32));
    m_ = static_cast<float*>(device_.allocate("optimizer_states", "AdamW momentum", states, CommDtype::f32));
    v_ = static_cast<float*>(device_.allocate("optimizer_states", "AdamW variance", states, CommDtype::f32));
  }
  micro_step_gradients_ = !frozen_ && buffers_.micro_step_gradients > 0;
  if (!frozen_ && (micro_step_gradients_ || (stage < 2 && config_.grad_accum > 1 && !device_.kernels_overwrite()))) {
    micro_grads_ = device_.allocate("grads", "micro-step gradients", n, type_);
    device_.zero(micro_grads_, n, type_, Lane::compute);
  }
  if (grads_) device_.zero(grads_, grad_elements, grad_type_, Lane::compute);
  if (m_) device_.zero(m_, states, CommDtype::f32, Lane::compute);
  if (v_) device_.zero(v_, states, CommDtype::f32, Lane::compute);

  // Stages 2-3: the gradient bucket buffers of zero_buffer_layout (the embeddings' own buffers last).
  for (std::int64_t elements : frozen_ ? std::vector<std::int64_t>{} : buffers_.slot_elements)
    slots_.push_back(Slot{device_.allocate("gradient_buckets", "gradient bucket buffer", elements, type_), -1});
  if (buffers_.accumulation_scratch > 0 && !frozen_)
    reduce_scratch_ = device_.allocate("gradient_buckets", "reduce-scatter output (accumulation)",
                                       buffers_.accumulation_scratch, comm_type_);
  if (buffers_.communication_copy > 0 && !frozen_)
    comm_copy_ = device_.allocate("gradient_buckets", "fp32 communication copy of a bucket",
                                  buffers_.communication_copy, CommDtype::f32);
  for (int i = 0; i < buffers_.param_staging_buffers; ++i)
    staging_.push_back(device_.allocate("offload_buffers", "parameter staging buffer", buffers_.param_staging_elements,
                                        type_));
  if (offload_) setup_offload();  // the host master first: in fp32 with offload_param it is the partition
  staging_event_base_ = static_cast<int>(slots_.size() + 2 * buffers_.units.size() + pieces_.size());
  if (offload_param_ && !params_ && !param_nvme_) params_ = host_master_;
  if (param_nvme_) setup_param_swap();
  // Initialization: the whole 16-bit parameters, and the fp32 master exactly (not from the rounded params).
  if (stage == 3 && param_nvme_) {
    // zero.Init into the swap files: each chunk initialized on the device (or, in fp32 training with the host
    // master, taken from it: it is the partition) and written out through a swap buffer.
    const std::int64_t eb = comm_dtype_bytes(type_);
    for (std::size_t k = 0; k < buckets.size(); ++k) {
      const GradientBucket& b = buckets[k];
      if (fp32 && host_master_) {
        write_param_chunk(static_cast<int>(k), 0, host_master_ + b.partition_offset, b.chunk);
        continue;
      }
      device_.init_params(staging_[0], master_ ? master_ + b.partition_offset : nullptr, b.chunk_begin(rank_), b.chunk);
      device_.lane_waits_for(Lane::to_host, Lane::compute);
      if (void* host = host_chunk(static_cast<int>(k))) {
        device_.copy_to_host(host, staging_[0], b.chunk * eb);
        device_.synchronize();
      } else {
        const offload::ParamSwapper::Writing w = param_swapper_->begin_write(static_cast<int>(k), 0, b.chunk);
        device_.copy_to_host(w.data, staging_[0], b.chunk * eb);
        device_.synchronize();
        param_swapper_->end_write(w);
      }
    }
    finish_param_swap();
  } else if (stage == 3 && offload_param_) {
    // zero.Init into host memory: each chunk initialized on the device (the 16-bit rounding every backend
    // applies) and copied out; the host master (offload_optimizer) is initialized by setup_offload.
    if (params_ != host_master_)
      for (const GradientBucket& b : buckets) {
        device_.init_params(staging_[0], master_ ? master_ + b.partition_offset : nullptr, b.chunk_begin(rank_),
                            b.chunk);
        device_.lane_waits_for(Lane::to_host, Lane::compute);
        device_.copy_to_host(at(params_, b.partition_offset, type_), staging_[0], b.chunk * comm_dtype_bytes(type_));
        device_.synchronize();
      }
  } else if (stage == 3) {
    // zero.Init: only this rank's chunks (and the persistent tensors, whole) are ever initialized here.
    for (const GradientBucket& b : buckets)
      device_.init_params(partition_params(b.partition_offset), master_ ? master_ + b.partition_offset : nullptr,
                          b.chunk_begin(rank_), b.chunk);
  } else if (stage == 0 || fp32) {
    device_.init_params(params_, master_, 0, n);
  } else {
    device_.init_params(params_, nullptr, 0, n);
    if (master_)
      for (const GradientBucket& b : buckets)
        device_.init_params(nullptr, master_ + b.partition_offset, b.chunk_begin(rank_), b.chunk);
  }
  if (stage == 3) setup_stage3();
  device_.synchronize();
  reduced_.assign(buckets.size(), false);
}

void* ZeroEngine::bucket_grads(int b) const {
  const GradientBucket& bucket = partition_.buckets()[b];
  if (config_.zero.stage < 2) return at(grads_, bucket.begin, grad_type_);
  return slots_[buffers_.bucket_slot[b]].buffer;
}

void* ZeroEngine::grad_at(std::int64_t offset) const {
  if (config_.zero.stage < 2)
    return micro_grads_ && (micro_ > 0 || micro_step_gradients_) ? at(micro_grads_, offset, type_)
                                                                 : at(grads_, offset, type_);
  const int b = partition_.bucket_of(offset);
  const Slot& slot = slots_[buffers_.bucket_slot[b]];
  if (slot.owner != b)
    throw std::logic_error("ZeroEngine: gradient of flat index " + std::to_string(offset) +
                           " written before prepare_gradients");
  return at(slot.buffer, offset - partition_.buckets()[b].begin, type_);
}

void ZeroEngine::begin_step() {
  device_.clear_marks();
  comm_marks_.clear();
  wait_marks_.clear();
  to_host_marks_.clear();
  to_device_marks_.clear();
  param_h2d_marks_.clear();
  param_d2h_marks_.clear();
  cpu_adamw_s_ = 0;
  swap_times_ = offload::SwapTimes{};
  if (param_swapper_) param_swapper_->take_times();  // what happened between steps (checkpoints) is not the step's
  const int a = device_.mark(Lane::compute);
  step_mark_ = a;
  unit_marks_.clear();
  device_.lane_waits_for(Lane::compute, Lane::comm);
  wait_marks_.emplace_back(a, device_.mark(Lane::compute));
}

void ZeroEngine::set_gradient_partition(void* partition) {
  if (!grads_lent_ || grads_) throw std::logic_error("ZeroEngine: set_gradient_partition without a partition to lend");
  if (!partition || reinterpret_cast<std::uintptr_t>(partition) % 16 != 0)
    throw std::logic_error("ZeroEngine: a lent gradient partition must be 16-byte aligned");
  grads_ = partition;
}

void ZeroEngine::begin_micro_step(std::int64_t micro) {
  if (grads_lent_ && !grads_) throw std::logic_error("ZeroEngine: the trainer never lent the gradient partition");
  if (stage3()) start_schedule(&buffers_.train_plan);
  micro_ = micro;
  boundary_ = micro == config_.grad_accum - 1;
  accumulate_in_kernels_ = config_.zero.stage < 2 && micro > 0 && !micro_step_gradients_;
  std::fill(reduced_.begin(), reduced_.end(), false);
  for (Slot& s : slots_) s.owner = -1;
  // Backends whose kernels always accumulate start the step from zeroed gradients.
  if (!frozen_ && config_.zero.stage < 2 && !device_.kernels_overwrite()) {
    if (micro == 0 && !micro_step_gradients_) device_.zero(grads_, layout_.total(), grad_type_, Lane::compute);
    else if (micro_grads_) device_.zero(micro_grads_, layout_.total(), type_, Lane::compute);
  }
}

void ZeroEngine::prepare_gradients(std::int64_t lo, std::int64_t hi) {
  if (frozen_) throw std::logic_error("ZeroEngine: gradients of frozen parameters");
  log_graph_call(GraphCall::prepare_gradients, lo, hi);
  if (config_.zero.stage < 2) return;
  const auto& buckets = partition_.buckets();
  for (std::size_t k = 0; k < buckets.size(); ++k) {
    const GradientBucket& b = buckets[k];
    if (b.begin >= hi || b.end <= lo) continue;
    Slot& slot = slots_[buffers_.bucket_slot[k]];
    if (slot.owner == static_cast<int>(k)) continue;
    // The buffer's previous reduction must be done before backward overwrites it.
    const int a = device_.mark(Lane::compute);
    device_.wait_event(buffers_.bucket_slot[k], Lane::compute);
    wait_marks_.emplace_back(a, device_.mark(Lane::compute));
    // Zero the whole bucket: alignment gaps must reduce to 0, and backends that accumulate start from 0.
    device_.zero(slot.buffer, b.elements(), type_, Lane::compute);
    slot.owner = static_cast<int>(k);
  }
}

void ZeroEngine::gradients_final_from(std::int64_t lo) {
  if (frozen_) throw std::logic_error("ZeroEngine: gradients of frozen parameters");
  log_graph_call(GraphCall::gradients_final_from, lo, 0);
  const auto& buckets = partition_.buckets();
  std::vector<int> finished;
  for (std::size_t k = 0; k < buckets.size(); ++k)
    if (!reduced_[k] && buckets[k].begin >= lo) {
      reduced_[k] = true;
      gather_micro_step_gradients(static_cast<int>(k));
      finished.push_back(static_cast<int>(k));
    }
  if (finished.empty()) return;
  if (config_.zero.stage >= 2 || boundary_) reduce_buckets(finished);
  if (offload_ && boundary_)
    for (int k : finished) copy_gradients_to_host(k);
}

void ZeroEngine::gather_micro_step_gradients(int k) {
  const GradientBucket& b = partition_.buckets()[k];
  if (micro_step_gradients_ && micro_ == 0)
    device_.convert(at(grads_, b.begin, grad_type_), grad_type_, at(micro_grads_, b.begin, type_), type_,
                    b.elements(), Lane::compute);
  else if (micro_grads_ && micro_ > 0)
    device_.accumulate(at(grads_, b.begin, grad_type_), grad_type_, at(micro_grads_, b.begin, type_), type_,
                       b.elements(), Lane::compute);
}

CommKind ZeroEngine::reduction_kind() const {
  return config_.zero.stage == 0 || !config_.zero.reduce_scatter ? CommKind::all_reduce : CommKind::reduce_scatter;
}

void ZeroEngine::reduce_buckets(const std::vector<int>& ks) {
  const int stage = config_.zero.stage;
  if (world_ == 1 && stage < 2) return;  // whole gradients of one rank are already reduced
  // Buckets finished together (a layer's: at stage 3 its partitioned and its persistent tensors, and more where a
  // unit outgrows reduce_bucket_size) go to NCCL as one group: one kernel launch, where one collective per bucket
  // interleaved 179 small kernels with the backward's on 2x H200 when a layer list's tensors were in op order
  // (stage 3 backward 20.7 ms against stage 2's 5.3, bench/resnet/results/2026-11-29-h200x2/call5). Grouped only where every bucket is reduced in its own
  // buffers: in place, or straight into the gradient partition. A conversion to or from the communication
  // precision, or the accumulation scratch, is one buffer that the buckets take in turn, after each collective; an
  // all-reduce at stages 2-3 (reduce_scatter false) copies the rank's chunk out after it.
  const CommKind kind = reduction_kind();
  const CommDtype held_type = stage < 2 ? grad_type_ : type_;
  const bool own_buffers = comm_type_ == held_type && (stage < 2 || (kind == CommKind::reduce_scatter && micro_ == 0 &&
                                                                      comm_type_ == grad_type_));
  if (ks.size() == 1 || !own_buffers) {
    for (int k : ks) reduce_bucket(k);
    return;
  }
  device_.lane_waits_for(Lane::comm, Lane::compute);
  const int begin = device_.mark(Lane::comm);
  const auto& buckets = partition_.buckets();
  comm_.group_start();
  for (int k : ks) {
    const GradientBucket& b = buckets[k];
    void* held = bucket_grads(k);
    if (kind == CommKind::all_reduce) comm_.all_reduce_sum(held, held, b.elements(), comm_type_);
    else
      comm_.reduce_scatter_sum(held,
                               stage >= 2 ? at(grads_, b.partition_offset, grad_type_)
                                          : at(held, static_cast<std::int64_t>(rank_) * b.chunk, comm_type_),
                               b.chunk, comm_type_);
  }
  comm_.group_end();
  // Recorded after the group: NCCL enqueues a group's kernel at its end, and the buffers are free only after it.
  if (stage >= 2)
    for (int k : ks) device_.record_event(buffers_.bucket_slot[k], Lane::comm);
  end_reduction(kind, begin);
}

void ZeroEngine::end_reduction(CommKind kind, int begin_mark) {
  comm_marks_.emplace_back(static_cast<int>(kind), begin_mark, device_.mark(Lane::comm));
  if (!config_.zero.overlap_comm) {
    const int a = device_.mark(Lane::compute);
    device_.lane_waits_for(Lane::compute, Lane::comm);
    wait_marks_.emplace_back(a, device_.mark(Lane::compute));
  }
}

void ZeroEngine::reduce_bucket(int k) {
  const GradientBucket& b = partition_.buckets()[k];
  const int stage = config_.zero.stage;
  device_.lane_waits_for(Lane::comm, Lane::compute);
  const int begin = device_.mark(Lane::comm);
  const CommKind kind = reduction_kind();
  // What backward (stages 2-3) or the accumulation (stages 0-1) left, and its precision.
  void* held = bucket_grads(k);
  const CommDtype held_type = stage < 2 ? grad_type_ : type_;
  // The collective's buffer, in the communication precision: the bucket itself, else a copy converted to it
  // (stage_1_and_2.py allreduce_bucket: tensor.to(communication_data_type)). Stages 0-1 with fp32 accumulation and
  // 16-bit communication convert into the micro-step gradients' region of the bucket, finished with.
  void* src = held;
  if (comm_type_ != held_type) {
    src = comm_copy_ ? comm_copy_ : at(micro_grads_, b.begin, type_);
    device_.convert(src, comm_type_, held, held_type, b.elements(), Lane::comm);
  }
  void* mine = at(src, static_cast<std::int64_t>(rank_) * b.chunk, comm_type_);  // the rank's chunk after it
  void* part = stage >= 2 ? at(grads_, b.partition_offset, grad_type_) : nullptr;  // the gradient partition's
  if (kind == CommKind::all_reduce) {
    comm_.all_reduce_sum(src, src, b.elements(), comm_type_);
  } else {
    // Stage 1 in place; from stage 2 straight into the gradient partition when nothing is there to add to and the
    // precisions agree.
    if (stage >= 2) mine = micro_ == 0 && comm_type_ == grad_type_ ? part : reduce_scratch_;
    comm_.reduce_scatter_sum(src, mine, b.chunk, comm_type_);
  }
  if (stage < 2 && src != held) {
    // Back into the gradients: the whole bucket at stage 0, the rank's chunk (all the optimizer reads) at stage 1.
    if (stage == 0) device_.convert(held, held_type, src, comm_type_, b.elements(), Lane::comm);
    else
      device_.convert(at(grads_, b.chunk_begin(rank_), grad_type_), grad_type_, mine, comm_type_, b.chunk, Lane::comm);
  }
  if (stage >= 2) {
    if (mine != part) {
      if (micro_ == 0) device_.convert(part, grad_type_, mine, comm_type_, b.chunk, Lane::comm);
      else device_.accumulate(part, grad_type_, mine, comm_type_, b.chunk, Lane::comm);
    }
    device_.record_event(buffers_.bucket_slot[k], Lane::comm);  // the bucket buffer is free again
  }
  end_reduction(kind, begin);
}

double ZeroEngine::sum_over_ranks(double value) {
  sum_over_ranks(&value, 1);
  return value;
}

void ZeroEngine::sum_over_ranks(double* values, int count) { comm_.all_reduce_host(values, count); }

double ZeroEngine::finish_step(double loss_scale, const std::function<bool(double)>& skip) {
  if (frozen_) throw std::logic_error("ZeroEngine: an optimizer step of frozen parameters");
  complete_deferred_update();  // (a forward has normally done it: it needs every parameter)
  if (stage3()) start_schedule(nullptr);
  const auto& buckets = partition_.buckets();
  for (std::size_t k = 0; k < buckets.size(); ++k)
    if (!reduced_[k]) throw std::logic_error("ZeroEngine: backward did not finish bucket " + std::to_string(k));
  const int stage = config_.zero.stage;
  {
    const int a = device_.mark(Lane::compute);
    device_.lane_waits_for(Lane::compute, Lane::comm);
    wait_marks_.emplace_back(a, device_.mark(Lane::compute));
  }
  // Sum of squares of the rank's reduced gradients, in a fixed order, then summed over ranks in rank order.
  int slots = 1;
  if (stage == 0) {
    device_.sum_squares(grads_, grad_type_, layout_.total(), 0);
  } else if (stage == 1) {
    slots = static_cast<int>(buckets.size());
    for (int k = 0; k < slots; ++k)
      device_.sum_squares(at(grads_, buckets[k].chunk_begin(rank_), grad_type_), grad_type_, buckets[k].chunk, k);
  } else {
    device_.sum_squares(grads_, grad_type_, partition_.partition_elements(), 0);  // stages 2-3: the gradient partition
  }
  std::vector<double> sq(slots);
  device_.read_sum_squares(sq.data(), slots);
  double total = 0;
  for (double x : sq) total += x;
  if (stage > 0 && world_ > 1) comm_.all_reduce_host(&total, 1);
  const double norm = std::sqrt(total) / loss_scale;
  const bool skipped = skip(norm);
  if (!skipped) {
    const auto& o = config_.optimizer;
    double clip = 1.0;
    if (o.grad_clip > 0 && norm > o.grad_clip) clip = o.grad_clip / (norm + 1e-6);
    ++optimizer_step_;
    const float grad_scale = static_cast<float>(clip / loss_scale);
    const bool fp32_grads = grad_type_ == CommDtype::f32;
    auto update = [&](AdamwRange r) {
      r.fp32_grads = fp32_grads;
      device_.adamw(r, static_cast<float>(o.learning_rate), static_cast<float>(o.beta1), static_cast<float>(o.beta2),
                    static_cast<float>(o.epsilon), static_cast<float>(o.weight_decay), grad_scale, optimizer_step_);
    };
    if (stage == 0) {
      update(AdamwRange{params_, master_, grads_, m_, v_, layout_.total(), 0});
    } else if (offload_) {
      if (offload_param_) {
        // The CPU AdamW writes the host partition: the copies that read it for this step's gathers are done.
        const int copies_done = staging_event_base_ + static_cast<int>(staging_.size());
        device_.record_event(copies_done, Lane::to_device);
        device_.host_wait_event(copies_done);
      }
      if (defers_update()) {
        deferred_ = DeferredUpdate{true, offload_hyper(grad_scale), 0};  // the next forward runs it
      } else {
        offloaded_update(grad_scale);  // stages 1-2 on several ranks: each group's all-gather as it is updated
        if (param_nvme_) finish_param_swap();  // the updated chunks on disk before the next step reads them
        if (stage == 3) all_gather_persistent();
      }
    } else if (offload_param_) {
      update_offloaded_params(update);
      if (param_nvme_) finish_param_swap();
      all_gather_persistent();
    } else {
      const auto update_bucket = [&](const GradientBucket& b) {
        const std::int64_t cb = b.chunk_begin(rank_);
        const void* g = stage == 1 ? at(grads_, cb, grad_type_) : at(grads_, b.partition_offset, grad_type_);
        void* p = stage == 3 ? partition_params(b.partition_offset) : at(params_, cb, type_);
        update(AdamwRange{p, master_ ? master_ + b.partition_offset : nullptr, g, m_ + b.partition_offset,
                          v_ + b.partition_offset, b.chunk, cb});
      };
      if (stage == 3 || world_ == 1) {
        for (const GradientBucket& b : buckets) update_bucket(b);
        if (stage == 3) all_gather_persistent();  // the next forward gathers the rest
      } else {
        // Stages 1-2: group by group (allgather_bucket_size elements of buckets), each group's all-gather starts
        // on the comm lane once its AdamW is done, beside the next group's update. DeepSpeed gathers after the
        // whole step (stage_1_and_2.py all_gather_dp_groups); the values gathered are the same.
        for (const auto& [first, last] : gather_groups_) {
          for (std::size_t k = first; k < last; ++k) update_bucket(buckets[k]);
          all_gather_group(first, last);
        }
      }
    }
  }
  device_.synchronize();
  collect_comm_times();
  collect_offload_times();
  collect_timeline();
  return norm;
}

void ZeroEngine::all_gather_group(std::size_t first, std::size_t last, Lane after) {
  // After the updates issued so far on the `after` lane (this group's among them).
  device_.lane_waits_for(Lane::comm, after);
  const auto& buckets = partition_.buckets();
  const int begin = device_.mark(Lane::comm);
  comm_.group_start();
  for (std::size_t k = first; k < last; ++k) {
    const GradientBucket& b = buckets[k];
    comm_.all_gather(at(params_, b.chunk_begin(rank_), type_), at(params_, b.begin, type_), b.chunk, type_);
  }
  comm_.group_end();
  comm_marks_.emplace_back(static_cast<int>(CommKind::all_gather), begin, device_.mark(Lane::comm));
}

void ZeroEngine::collect_comm_times() {
  times_ = CommTimes{};
  for (const auto& [kind, a, b] : comm_marks_) times_.seconds[kind] += device_.seconds_between(a, b);
  if (device_.lanes_concurrent()) {
    for (const auto& [a, b] : wait_marks_) times_.exposed_s += device_.seconds_between(a, b);
  } else {
    for (double s : times_.seconds) times_.exposed_s += s;  // one thread: every collective is waited for
  }
}

void ZeroEngine::collect_timeline() {
  timeline_.clear();
  if (!config_.record_timeline || step_mark_ < 0) return;
  const auto span = [&](const char* lane, std::string name, int a, int b) {
    timeline_.push_back(MeasuredSpan{lane, std::move(name), device_.seconds_between(step_mark_, a),
                                     device_.seconds_between(a, b)});
  };
  for (const auto& [kind, a, b] : comm_marks_) span("collectives", to_string(static_cast<CommKind>(kind)), a, b);
  for (const auto& [a, b] : wait_marks_) span("compute waits", "wait for another lane", a, b);
  for (const auto& [unit, m] : unit_marks_) span("compute", "unit " + std::to_string(unit), m, m);
  for (const auto& [a, b] : to_host_marks_) span("D2H", "gradients to host", a, b);
  for (const auto& [a, b] : to_device_marks_) span("H2D", "parameters to device", a, b);
  for (const auto& [a, b] : param_h2d_marks_) span("H2D", "offloaded parameters to device", a, b);
  for (const auto& [a, b] : param_d2h_marks_) span("D2H", "offloaded parameters to host", a, b);
}

std::vector<float> ZeroEngine::gathered_params() {
  complete_deferred_update();
  std::vector<float> out(layout_.total(), 0.0f);
  if (!stage3()) {
    device_.download(params_, out.data(), layout_.total(), type_, 1.0);
    return out;
  }
  // Unit by unit through the arena (free between steps), the persistent tensors from their whole copy.
  start_schedule(nullptr);
  const auto& buckets = partition_.buckets();
  for (std::size_t u = 0; u < buffers_.units.size(); ++u) {
    if (buffers_.unit_buckets[u].empty()) continue;
    gather_unit(static_cast<int>(u), 0);
    device_.wait_event(gather_event_base_ + static_cast<int>(u), Lane::compute);
    for (int k : buffers_.unit_buckets[u])
      device_.download(at(arena_, buckets[k].begin - buffers_.unit_gather_lo[u], type_), out.data() + buckets[k].begin,
                       buckets[k].elements(), type_, 1.0);
    unit_region_[u] = -1;
    device_.record_event(release_event_base_ + static_cast<int>(u), Lane::compute);
    freed_.push_back(FreedRange{0, buffers_.train_plan.unit_elements[u], release_event_base_ + static_cast<int>(u)});
  }
  for (std::size_t k = 0; k < buckets.size(); ++k)
    if (buckets[k].persistent)
      device_.download(at(persistent_, buffers_.persistent_offset[k], type_), out.data() + buckets[k].begin,
                       buckets[k].elements(), type_, 1.0);
  return out;
}

void ZeroEngine::set_params(const std::vector<float>& flat) {
  if (static_cast<std::int64_t>(flat.size()) != layout_.total())
    throw std::invalid_argument("set_params: expected " + std::to_string(layout_.total()) + " values");
  complete_deferred_update();  // its writes would land on the values set here
  if (stage3()) {
    start_schedule(nullptr);
    const auto& buckets = partition_.buckets();
    for (std::size_t k = 0; k < buckets.size(); ++k) {
      const GradientBucket& b = buckets[k];
      float* master = master_ ? master_ + b.partition_offset : nullptr;
      const float* values = flat.data() + b.chunk_begin(rank_);
      if (!offload_param_) device_.upload_params(partition_params(b.partition_offset), master, values, b.chunk);
      else if (param_nvme_ || params_ != host_master_) write_host_params(b.partition_offset, values, b.chunk, master);
      // (fp32 with offload_optimizer: the partition is the host master, set below)
      if (b.persistent)
        device_.upload_params(at(persistent_, buffers_.persistent_offset[k], type_), nullptr, flat.data() + b.begin,
                              b.elements());
    }
  } else if (config_.zero.stage == 0 || !master_) {
    device_.upload_params(params_, master_, flat.data(), layout_.total());
  } else {
    device_.upload_params(params_, nullptr, flat.data(), layout_.total());
    for (const GradientBucket& b : partition_.buckets())
      device_.upload_params(nullptr, master_ + b.partition_offset, flat.data() + b.chunk_begin(rank_), b.chunk);
  }
  if (offload_)  // the host (or swapped) master partition; the moments stay
    for_each_offloaded_piece(offload::SwapAccess::update, [&](const Piece& p, float* master, float*, float*) {
      std::memcpy(master, flat.data() + p.flat, p.n * sizeof(float));
    });
  if (param_nvme_) finish_param_swap();
  device_.synchronize();
}

std::vector<float> ZeroEngine::gathered_grads(double loss_scale) {
  if (frozen_) throw std::logic_error("ZeroEngine: gradients of frozen parameters");
  std::vector<float> out(layout_.total(), 0.0f);
  const double f = 1.0 / loss_scale;
  if (config_.zero.stage == 0) {
    device_.download(grads_, out.data(), layout_.total(), grad_type_, f);
  } else {
    // Stages 1-2-3: this rank's chunks of the reduced gradients (the rest of `out` stays 0).
    for (const GradientBucket& b : partition_.buckets()) {
      const std::int64_t cb = b.chunk_begin(rank_);
      const void* g = config_.zero.stage == 1 ? at(grads_, cb, grad_type_) : at(grads_, b.partition_offset, grad_type_);
      device_.download(g, out.data() + cb, b.chunk, grad_type_, f);
    }
  }
  return out;
}

// ---- checkpoints ----

std::vector<std::pair<std::int64_t, std::int64_t>> ZeroEngine::owned_ranges() const {
  std::vector<std::pair<std::int64_t, std::int64_t>> r;
  for (const GradientBucket& b : partition_.buckets()) r.emplace_back(b.chunk_begin(rank_), b.chunk);
  return r;
}

void ZeroEngine::read_owned_state(std::vector<float>& master, std::vector<float>& m, std::vector<float>& v) {
  if (frozen_) throw std::logic_error("ZeroEngine: optimizer states of frozen parameters");
  complete_deferred_update();
  start_schedule(nullptr);
  std::int64_t total = 0;
  for (const GradientBucket& b : partition_.buckets()) total += b.chunk;
  master.assign(total, 0.0f);
  m.assign(total, 0.0f);
  v.assign(total, 0.0f);
  const bool whole = config_.zero.stage == 0;  // stage 0 keeps every state whole: the chunk sits at its flat index
  if (swapper_) {  // swapped in piece by piece; a bucket's chunk starts where the chunks before it end
    const auto& buckets = partition_.buckets();
    std::vector<std::int64_t> out_at(buckets.size(), 0);
    for (std::size_t k = 1; k < buckets.size(); ++k) out_at[k] = out_at[k - 1] + buckets[k - 1].chunk;
    for_each_offloaded_piece(offload::SwapAccess::read, [&](const Piece& p, float* pm, float* pv1, float* pv2) {
      const std::int64_t o = out_at[p.bucket] + (p.part - buckets[p.bucket].partition_offset);
      std::memcpy(master.data() + o, pm, p.n * sizeof(float));
      std::memcpy(m.data() + o, pv1, p.n * sizeof(float));
      std::memcpy(v.data() + o, pv2, p.n * sizeof(float));
    });
    return;
  }
  std::int64_t at_out = 0;
  for (const GradientBucket& b : partition_.buckets()) {
    const std::int64_t flat = b.chunk_begin(rank_);
    const std::int64_t state_at = whole ? flat : b.partition_offset;
    if (offload_) {  // the states live in host memory, the partition's layout
      std::memcpy(master.data() + at_out, host_master_ + state_at, b.chunk * sizeof(float));
      std::memcpy(m.data() + at_out, host_m_ + state_at, b.chunk * sizeof(float));
      std::memcpy(v.data() + at_out, host_v_ + state_at, b.chunk * sizeof(float));
      at_out += b.chunk;
      continue;
    }
    if (master_) {
      device_.download(master_ + state_at, master.data() + at_out, b.chunk, CommDtype::f32, 1.0);
    } else if (offload_param_) {  // fp32 training, the partition in host memory (or its files)
      device_.synchronize();
      const int k = static_cast<int>(&b - partition_.buckets().data());
      if (const void* host = host_chunk(k)) std::memcpy(master.data() + at_out, host, b.chunk * sizeof(float));
      else read_param_chunk(k, master.data() + at_out);
    } else {  // fp32 training: the parameters are the master (whole at stages 0-2, the partition at stage 3)
      const std::int64_t param_at = stage3() ? b.partition_offset : flat;
      device_.download(at(params_, param_at, type_), master.data() + at_out, b.chunk, type_, 1.0);
    }
    device_.download(m_ + state_at, m.data() + at_out, b.chunk, CommDtype::f32, 1.0);
    device_.download(v_ + state_at, v.data() + at_out, b.chunk, CommDtype::f32, 1.0);
    at_out += b.chunk;
  }
}

void ZeroEngine::restore_state(const StateSource& source, int optimizer_step) {
  complete_deferred_update();
  start_schedule(nullptr);
  const int stage = config_.zero.stage;
  constexpr std::int64_t kPiece = std::int64_t{1} << 24;  // host staging per call: 3 x 64 MiB at most
  std::vector<float> master, m, v;
  // Sets [flat, flat + n) of the states kept at `state_at` (and the parameters at `param_at`, -1: none).
  auto restore = [&](std::int64_t flat, std::int64_t n, std::int64_t state_at, std::int64_t param_at, bool moments) {
    moments = moments && !frozen_;  // frozen parameters have no moments
    for (std::int64_t done = 0; done < n; done += kPiece) {
      const std::int64_t k = std::min(kPiece, n - done);
      master.resize(k);
      m.resize(k);
      v.resize(k);
      source(flat + done, k, master.data(), moments ? m.data() : nullptr, moments ? v.data() : nullptr);
      float* mp = state_at >= 0 && master_ ? master_ + state_at + done : nullptr;
      void* pp = param_at >= 0 && !offload_param_ && params_ ? at(params_, param_at + done, type_) : nullptr;
      if (param_at >= 0 && offload_param_ && (param_nvme_ || params_ != host_master_)) {
        write_host_params(param_at + done, master.data(), k, mp);  // through the device's rounding
        mp = nullptr;
      }
      if (pp || mp) device_.upload_params(pp, mp, master.data(), k);  // 16-bit params = the rounding of the master
      if (offload_ && state_at >= 0 && swapper_) {
        // swapped states: written below, piece by piece
      } else if (offload_ && state_at >= 0) {  // host states
        std::memcpy(host_master_ + state_at + done, master.data(), k * sizeof(float));
        if (moments) {
          std::memcpy(host_m_ + state_at + done, m.data(), k * sizeof(float));
          std::memcpy(host_v_ + state_at + done, v.data(), k * sizeof(float));
        }
      } else if (moments) {
        device_.upload_params(nullptr, m_ + state_at + done, m.data(), k);
        device_.upload_params(nullptr, v_ + state_at + done, v.data(), k);
      }
    }
  };
  const auto& buckets = partition_.buckets();
  for (std::size_t bi = 0; bi < buckets.size(); ++bi) {
    const GradientBucket& b = buckets[bi];
    const std::int64_t chunk = b.chunk_begin(rank_);
    if (stage == 0) {
      restore(b.begin, b.elements(), b.begin, b.begin, true);
    } else if (stage < 3) {
      restore(b.begin, b.elements(), -1, b.begin, false);  // whole parameters
      restore(chunk, b.chunk, b.partition_offset, -1, true);
    } else {
      restore(chunk, b.chunk, b.partition_offset, b.partition_offset, true);
      if (b.persistent) {
        for (std::int64_t done = 0; done < b.elements(); done += kPiece) {
          const std::int64_t k = std::min(kPiece, b.elements() - done);
          master.resize(k);
          source(b.begin + done, k, master.data(), nullptr, nullptr);
          device_.upload_params(at(persistent_, buffers_.persistent_offset[bi] + done, type_),
                                nullptr, master.data(), k);
        }
      }
    }
  }
  if (swapper_)
    for_each_offloaded_piece(offload::SwapAccess::write, [&](const Piece& p, float* pm, float* pv1, float* pv2) {
      source(p.flat, p.n, pm, pv1, pv2);
    });
  optimizer_step_ = optimizer_step;
  if (param_nvme_) finish_param_swap();
  device_.synchronize();
}

}  // namespace zeroplan::exec
