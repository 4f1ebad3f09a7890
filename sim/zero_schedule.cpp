#include "sim/zero_schedule.h"

#include "sim/step_builder.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "exec/exec_config.h"
#include "exec/zero/zero_buffer_layout.h"
#include "exec/zero/zero_partition.h"
#include "sim/comm_model.h"
#include "sim/executor_layout.h"

namespace zeroplan {

std::int64_t persistent_params(const LayerDescription& layer, const ZeroConfig& zero) {
  // DeepSpeed stage 3 (parameter_offload.py mark_persistent_parameters): a parameter whose numel is at most
  // stage3_param_persistence_threshold is never partitioned. As the memory model counts it
  // (sim/memory_inputs.cpp): a layer whose largest module is under the threshold persists whole, otherwise its
  // small modules (norms, biases) do, when the threshold is on.
  const std::int64_t threshold = zero.param_persistence_threshold;
  if (threshold <= 0) return 0;
  if (layer.largest_module_params <= threshold) return layer.params;
  return std::min(layer.small_module_params, layer.params);
}

std::int64_t gathered_module_count(const LayerDescription& layer, const ZeroConfig& zero) {
  // DeepSpeed stage 3 (partitioned_param_coordinator.py fetch_sub_module -> __all_gather_params ->
  // all_gather_coalesced): each module's partitioned parameters are fetched with one coalesced all-gather when
  // the module runs, and a prefetch issues the upcoming modules' fetches ahead of it, module by module in the
  // steady state. A layer that persists whole is never fetched. The layer description carries only a module
  // count, so a module whose own parameters are all persistent (a norm inside a block) is still counted.
  const std::int64_t threshold = zero.param_persistence_threshold;
  if (threshold > 0 && layer.largest_module_params <= threshold) return 0;
  if (layer.params - persistent_params(layer, zero) <= 0) return 0;
  return std::max<std::int64_t>(1, layer.module_count);
}

namespace schedule_internal {

SteadyMicroSteps StepBuilder::build() {
  const std::size_t layer_count = layers_.size();
  // Tasks per micro-step: up to 4 compute + 3 stage-3 fetch tasks per layer and pass, plus buckets.
  timeline_.clear();
  timeline_.reserve(static_cast<std::size_t>(training_.grad_accum) * layer_count * 12 + 64);
  gather_elements_.assign(layer_count, 0);
  for (std::size_t i = 0; i < layer_count; ++i) {
    // Our executor's units gather their partitioned buckets (sim/executor_layout.h unit_gather_elements); the
    // description's rule (persistent_params) stands for the others.
    gather_elements_[i] = i < in_.executor_unit_gather_elements.size()
                              ? in_.executor_unit_gather_elements[i]
                              : layers_[i].params - (zero_.stage == 3 ? persistent_params(layers_[i], zero_) : 0);
  }
  gathered_bytes_.assign(layer_count, 0);
  gather_task_.assign(layer_count, kNoTask);
  if (ds_ && zero_.stage == 3) coordinator_ = replay_deepspeed_param_coordinator(*in_.model, zero_);
  total_params_ = 0;
  for (std::size_t i = 0; i < layer_count; ++i) total_params_ += trainable_params(i);
  total_params_ = std::max<std::int64_t>(1, total_params_);
  total_tensors_ = 0;
  for (std::int64_t t : in_.tensors_per_layer) total_tensors_ += t;
  total_tensors_ = std::max<std::int64_t>(1, total_tensors_);

  update_ready_.clear();
  if (defers_offloaded_update()) deferred_offloaded_update();

  SteadyMicroSteps steady;
  MicroStepState previous;
  for (std::int32_t micro = 0; micro < training_.grad_accum; ++micro) {
    // Stages 0/1 keep full gradients and reduce at the boundary only; 2/3 reduce every micro-step.
    const bool boundary = micro + 1 == training_.grad_accum;
    if (boundary) steady.boundary_start = timeline_.resource_free_at(Resource::gpu_compute);
    reduce_this_micro_step_ = zero_.stage >= 2 || boundary;
    boundary_ = boundary;
    const auto first_task = static_cast<TaskId>(timeline_.size());
    micro_first_backward_ = true;
    run_pass(/*forward=*/true, micro);
    run_pass(/*forward=*/false, micro);
    if (ds_ && in_.path.reduces_after_backward) {
      if (boundary) reduce_after_backward(micro);
    } else if (reduce_this_micro_step_ && bucket_elements_ > 0) {
      reduce_bucket(-1, micro, last_backward_);
    }
    if (ds_) end_of_micro_step_buffers(boundary);
    if (boundary || in_.every_micro_step || steady.count > 0) continue;
    const MicroStepState now = state();
    // The micro-steps after this one up to the boundary repeat it. One of them stays on the timeline, so that
    // the communication this one leaves running into the next overlaps a steady micro-step there too.
    const std::int64_t repeats = training_.grad_accum - 2 - micro;
    if (repeats >= 2 && micro > 0 && now.repeats(previous)) {
      steady.count = repeats - 1;
      steady.period_seconds = now.compute_end - previous.compute_end;
      steady.first_task = first_task;
      steady.end_task = static_cast<TaskId>(timeline_.size());
      micro += static_cast<std::int32_t>(steady.count);
    }
    previous = now;
  }
  optimizer_step();
  return steady;
}

StepBuilder::MicroStepState StepBuilder::state() const {
  MicroStepState s;
  s.compute_end = timeline_.resource_free_at(Resource::gpu_compute);
  // Every task of the next micro-step waits, directly or through others, for the compute stream or for the
  // last compute task, so a time before compute_end holds nothing back: it counts as compute_end.
  const auto relative = [&](double time) { return std::max(time, s.compute_end) - s.compute_end; };
  std::size_t i = 0;
  for (int r = 0; r < kResourceCount; ++r) s.relative[i++] = relative(timeline_.resource_free_at(static_cast<Resource>(r)));
  for (TaskId task : {compute_barrier_, last_compute_, last_backward_, last_gradient_, last_reduction_, last_download_})
    s.relative[i++] = task == kNoTask ? 0.0 : relative(timeline_.task(task).finish);
  s.bucket_elements = bucket_elements_;
  for (Bytes bytes : gathered_bytes_) s.gathered_bytes += bytes;
  s.transient_live = backward_grads_live_ + buckets_live_ + grad_partition_live_;
  return s;
}

std::int32_t StepBuilder::layer_at(bool forward, std::size_t position) const {
  return static_cast<std::int32_t>(forward ? position : layers_.size() - 1 - position);
}

void StepBuilder::run_pass(bool forward, std::int32_t micro) {
  const std::size_t count = layers_.size();
  std::size_t issued = 0;  // positions [0, issued) have their stage-3 fetch issued
  TaskId previous_compute = last_compute_;
  for (std::size_t position = 0; position < count; ++position) {
    const std::int32_t layer = layer_at(forward, position);
    const auto index = static_cast<std::size_t>(layer);
    const LayerCompute& work = compute_[index];
    // DeepSpeed: the layer's hooks run on the host first; they issue its fetch and its kernels.
    const TaskId hooks = ds_ ? host_hooks(forward, layer, micro, position == 0, previous_compute) : kNoTask;

    // Stage 3: DeepSpeed's coordinator issues what its replay says at this position: the layer's own modules (on
    // demand, or by the prefetch of an earlier call of the layer) before its compute. Other engines fetch the
    // layer on demand (when the previous layer's compute is done) unless prefetched.
    const CoordinatorPosition* coordinator =
        coordinator_ ? &(forward ? coordinator_->forward : coordinator_->backward)[position] : nullptr;
    if (coordinator) {
      for (const CoordinatorGather& g : coordinator->gathers)
        if (!g.prefetch || g.layer == layer)
          gather_task_[static_cast<std::size_t>(g.layer)] =
              fetch(g.layer, g.elements, g.modules, micro, forward ? FetchFor::forward : FetchFor::backward,
                    after(previous_compute), with_start_of(hooks));
    } else if (zero_.stage == 3 && issued <= position) {
      if (!kept_from_forward(forward, index))
        gather_task_[index] = fetch(layer, gather_elements_[index], gathered_module_count(layers_[index], zero_),
                                    micro, forward ? FetchFor::forward : FetchFor::backward,
                                    after(previous_compute), with_start_of(hooks));
      issued = position + 1;
    }

    const TaskId params_ready = zero_.stage == 3                 ? gather_task_[index]
                                : forward && micro == 0 && !update_ready_.empty() ? update_ready_[index]
                                                                                  : kNoTask;
    // Our executor's tied head at the end of the forward may need the embeddings gathered again (its fetch plan
    // released them after the first layer): fetched when the head's layer is reached, as the plan issues it.
    TaskId head_embeddings = kNoTask;
    if (forward && zero_.stage == 3 && in_.head_regathers_embeddings && index + 1 == count && count > 1)
      head_embeddings = fetch(0, gather_elements_[0], gathered_module_count(layers_[0], zero_), micro,
                              FetchFor::head, after(previous_compute));
    std::array<Dependency, 4> first_deps{after(params_ready), after(compute_barrier_), after(hooks),
                                         after(head_embeddings)};
    TaskId first = kNoTask;
    TaskId consumer = kNoTask;
    if (forward) {
      first = consumer = timeline_.add(Resource::gpu_compute, TaskKind::forward,
                                       work.forward_seconds + executor_lane_waits(true, index),
                                       first_deps.data(), first_deps.size(), layer, micro, 0, work.forward_flops);
      timeline_.set_memory(first, in_.activation_bytes[index], 0, MemoryUse::activations);
      if (index + 1 == count) timeline_.set_memory(first, in_.logits_bytes, 0, MemoryUse::logits);
    } else {
      if (work.recompute_seconds > 0.0) {
        first = timeline_.add(Resource::gpu_compute, TaskKind::recompute, work.recompute_seconds,
                              first_deps.data(), first_deps.size(), layer, micro, 0, work.recompute_flops);
      }
      const TaskId input = timeline_.add(Resource::gpu_compute, TaskKind::backward_input,
                                         work.backward_input_seconds + executor_lane_waits(false, index),
                                         first_deps.data(), first_deps.size(), layer,
                                         micro, 0, work.backward_flops / 2.0);
      if (first == kNoTask) first = input;
      consumer = timeline_.add(Resource::gpu_compute, TaskKind::backward_weight, work.backward_weight_seconds,
                               nullptr, 0, layer, micro, 0, work.backward_flops / 2.0);
      timeline_.free_at_finish(consumer, in_.activation_bytes[index], MemoryUse::activations);
      if (index + 1 == count) timeline_.free_at_finish(consumer, in_.logits_bytes, MemoryUse::logits);
      last_backward_ = consumer;
      if (ds_) backward_buffers(first, consumer, index, micro);
      if (ds_ && micro > 0 && accumulates_in_grad()) {
        // Stages 0-1 keep the gradients in .grad between micro-steps: from the second micro-step on, autograd's
        // AccumulateGrad adds each new gradient into the one there (torch/csrc/autograd/functions/
        // accumulate_grad.h: variable.grad += new_grad), a read of both and a write per parameter tensor.
        const double tensors = index < in_.tensors_per_layer.size()
                                   ? static_cast<double>(in_.tensors_per_layer[index])
                                   : 1.0;
        consumer = timeline_.add(Resource::gpu_compute, TaskKind::gradient_copy,
                                 copy_seconds(3.0 * static_cast<double>(e_) *
                                                  static_cast<double>(trainable_params(index)),
                                              tensors),
                                 {after(consumer)}, layer, micro);
        last_backward_ = consumer;
      }
      if (executor_ && zero_.stage < 2 && accumulation_e_ != precision_bytes(training_.precision)) {
        // zeroplan's executor with fp32 accumulation at stages 0-1: each finished bucket of the micro-step
        // gradients is converted (first micro-step) or added into the fp32 gradients on the compute lane
        // (exec/zero/zero_engine.cpp finish_bucket).
        const double params = static_cast<double>(layers_[index].params);
        const double bytes = params * (static_cast<double>(precision_bytes(training_.precision)) +
                                       static_cast<double>(accumulation_e_) * (micro > 0 ? 2.0 : 1.0));
        consumer = timeline_.add(Resource::gpu_compute, TaskKind::gradient_copy,
                                 bytes / in_.streaming_bandwidth + in_.kernel_overhead_seconds, {after(consumer)},
                                 layer, micro);
        last_backward_ = consumer;
      }
    }

    if (coordinator) {
      // The prefetcher's gathers of later layers run beside this compute; what the coordinator releases after
      // this position's modules goes at the end of its compute.
      for (const CoordinatorGather& g : coordinator->gathers)
        if (g.prefetch && g.layer != layer)
          gather_task_[static_cast<std::size_t>(g.layer)] =
              fetch(g.layer, g.elements, g.modules, micro, forward ? FetchFor::forward : FetchFor::backward,
                    with_start_of(first));
      for (const CoordinatorRelease& r : coordinator->releases) {
        Bytes& held = gathered_bytes_[static_cast<std::size_t>(r.layer)];
        const Bytes bytes = std::min(held, gather_bytes(static_cast<std::size_t>(r.layer), r.elements));
        if (bytes > 0) timeline_.free_at_finish(consumer, bytes, MemoryUse::gathered_params);
        held -= bytes;
      }
    } else if (zero_.stage == 3) {
      // Prefetch while this layer computes: the next layers, at most prefetch_window ahead, within the
      // prefetch bucket, and with no more than max_live_parameters gathered at once.
      std::int64_t ahead = 0;
      std::int64_t live = gather_elements_[index];
      for (std::size_t next = position + 1; next < count && next <= position + static_cast<std::size_t>(in_.prefetch_window); ++next) {
        const auto next_index = static_cast<std::size_t>(layer_at(forward, next));
        if (kept_from_forward(forward, next_index)) {  // still gathered: nothing to prefetch, nothing added
          if (next >= issued) issued = next + 1;
          continue;
        }
        const std::int64_t elements = gather_elements_[next_index];
        ahead += elements;
        live += elements;
        // Our executor prefetches the first unit ahead even when it is larger than the bucket
        // (core/zero3_fetch_plan.h: a unit larger than the bucket would otherwise never overlap); the ZeRO
        // paper's schedule is modelled by the bucket alone.
        const bool first_unit_ahead = executor_ && ahead == elements && zero_.prefetch_bucket_size > 0;
        if ((ahead > zero_.prefetch_bucket_size && !first_unit_ahead) || live > zero_.max_live_parameters) break;
        if (next >= issued) {
          const std::int32_t next_layer = layer_at(forward, next);
          gather_task_[next_index] = fetch(next_layer, elements, gathered_module_count(layers_[next_index], zero_),
                                           micro, forward ? FetchFor::forward : FetchFor::backward,
                                           with_start_of(first));
          issued = next + 1;
        }
      }
      // Released after use.
      if (gathered_bytes_[index] > 0)
        timeline_.free_at_finish(consumer, gathered_bytes_[index], MemoryUse::gathered_params);
      gathered_bytes_[index] = 0;
    }

    // (DeepSpeed paths that reduce after the whole backward pass do it in reduce_after_backward.)
    if (!forward && reduce_this_micro_step_ && !(ds_ && in_.path.reduces_after_backward)) {
      // zeroplan's executor cuts the first block and the embeddings into buckets of their own
      // (exec/zero/zero_partition.h): what backward wrote before them is reduced first.
      if (executor_ && bucket_elements_ > 0 && closes_executor_bucket(index))
        reduce_bucket(layer, micro, last_gradient_);
      if (executor_ && index < in_.executor_unit_reduce_calls.size())
        bucket_calls_ += in_.executor_unit_reduce_calls[index];
      add_gradients(layer, micro, consumer, trainable_params(index));
    }
    previous_compute = consumer;
    last_compute_ = consumer;
  }
}

double StepBuilder::executor_lane_waits(bool forward, std::size_t index) const {
  if (!executor_ || zero_.stage != 3) return 0.0;
  // The unit's NCCL calls (several GPUs; one GPU gathers a unit with one cast, no collective).
  const bool figures = index < in_.executor_unit_gather_calls.size();
  const std::int64_t gathers = figures ? in_.executor_unit_gather_calls[index] : (gather_elements_[index] > 0 ? 1 : 0);
  // A unit gathered for this use first had its chunks cast from the master on the communication lane: a kernel
  // over the whole GPU, whose blocks the compute lane's kernels wait behind. Charged at its whole length, an upper
  // bound: Llama-2 7B at stage 3 on 2x H200 took 6.8 ms a step longer than keeping a 16-bit partition, where its
  // casts take 11 ms at the streaming rate (bench/llama/results/2026-11-30-h200x2/call4). On one GPU the cast into
  // the arena is the whole gather.
  const double cast = gathers > 0 && !kept_from_forward(forward, index)
                          ? executor_gather_cast_seconds(gather_elements_[index], gathers)
                          : 0.0;
  if (!figures) return cast;
  std::int64_t waits = gathers > 0 ? 1 : 0;
  if (!forward && index < in_.executor_unit_reduce_calls.size()) waits += in_.executor_unit_reduce_calls[index];
  return static_cast<double>(waits) * kExecutorLaneWaitSeconds + cast;
}

// Our executor's fetch plan keeps the layer gathered from its forward use to its backward use.
bool StepBuilder::kept_from_forward(bool forward, std::size_t index) const {
  return !forward && index < in_.backward_regathers.size() && in_.backward_regathers[index] == 0;
}

// `elements` of layer `layer` in `modules` parameter groups; `issued_by`: DeepSpeed's hook that issues the fetch on
// the host (none for a prefetch or another engine).
// Our executor's parameter swapper finds some chunks still in its swap buffers (the update's last at the next
// forward, a backward's last at the next micro-step's forward): the share it reads, replayed through its buffer
// policy (sim/executor_layout.h param_nvme_forward_read_share). Other engines read nvme_param_read_share of every
// fetch (DeepSpeed: the partition beyond max_in_cpu).
double StepBuilder::nvme_read_share(std::size_t index, std::int32_t micro, FetchFor use) const {
  const auto m = static_cast<std::size_t>(micro);
  switch (use) {
    case FetchFor::head:
      return m < in_.nvme_head_read_share.size() ? in_.nvme_head_read_share[m] : in_.nvme_param_read_share;
    case FetchFor::forward:
      return m < in_.nvme_forward_read_share.size() && index < in_.nvme_forward_read_share[m].size()
                 ? in_.nvme_forward_read_share[m][index]
                 : in_.nvme_param_read_share;
    case FetchFor::backward:
      return m < in_.nvme_backward_read_share.size() && index < in_.nvme_backward_read_share[m].size()
                 ? in_.nvme_backward_read_share[m][index]
                 : in_.nvme_param_read_share;
  }
  return in_.nvme_param_read_share;
}

TaskId StepBuilder::fetch(std::int32_t layer, std::int64_t elements, std::int64_t modules, std::int32_t micro,
                          FetchFor use, Dependency when, Dependency issued_by) {
  const auto index = static_cast<std::size_t>(layer);
  if (elements <= 0) return kNoTask;
  const Bytes full_bytes = gather_bytes(index, elements);
  const Bytes partition_bytes = ceil_div(full_bytes, n_);
  Dependency ready = when;
  Dependency issued = issued_by;  // applies to the first task of the fetch
  TaskId allocating = kNoTask;
  if (zero_.offload_param != OffloadDevice::none) {
    const double share = nvme_read_share(index, micro, use);
    if (zero_.offload_param == OffloadDevice::nvme && share > 0.0) {
      const auto read_bytes = static_cast<Bytes>(std::llround(static_cast<double>(partition_bytes) * share));
      const TaskId read = timeline_.add(Resource::nvme, TaskKind::nvme_read,
                                        static_cast<double>(read_bytes) / in_.nvme_read_bandwidth, {ready, issued},
                                        layer, micro, read_bytes);
      ready = after(read);
      issued = {};
    }
    allocating = timeline_.add(Resource::host_to_device, TaskKind::param_upload,
                               static_cast<double>(partition_bytes) / in_.pcie_bandwidth, {ready, issued}, layer,
                               micro, partition_bytes);
    ready = after(allocating);
    issued = {};
  }
  TaskId done = allocating;
  if (n_ > 1) {
    // DeepSpeed (and the ZeRO paper's schedule): one coalesced all-gather per module, the bytes split evenly over
    // them. Our executor: one NCCL group per gather unit (exec/zero/zero_engine.cpp gather_unit), which NCCL runs
    // as one collective of the unit's bytes.
    modules = executor_ ? 1 : std::max<std::int64_t>(1, modules);
    const Bytes per_module = full_bytes / modules;
    for (std::int64_t m = 0; m < modules; ++m) {
      const Bytes bytes = m + 1 == modules ? full_bytes - per_module * (modules - 1) : per_module;
      // Our executor's gathers (and the ZeRO paper schedule's) run beside the passes' kernels (prefetch), at the
      // link's rate beside compute; DeepSpeed's measured stage-3 rows are matched with the isolated rate and its
      // host hooks (sim/deepspeed_step.h).
      // Our executor's unit is one NCCL group of a call per partitioned bucket.
      const std::int64_t calls =
          executor_ && index < in_.executor_unit_gather_calls.size() ? in_.executor_unit_gather_calls[index] : 1;
      const double seconds =
          ds_ ? in_.collectives->seconds(CollectiveKind::all_gather, bytes)
              : in_.collectives->grouped_seconds_beside_compute(CollectiveKind::all_gather, bytes, calls) +
                    executor_gather_cast_seconds(elements, calls);
      done = timeline_.add(Resource::nccl, TaskKind::all_gather, seconds, {ready, issued}, layer, micro, bytes);
      issued = {};
      if (allocating == kNoTask) allocating = done;
    }
  }
  if (allocating == kNoTask) return kNoTask;  // one GPU, parameters resident: nothing to fetch
  if (!in_.static_gathered_params) {
    timeline_.set_memory(allocating, full_bytes, 0, MemoryUse::gathered_params);
    gathered_bytes_[index] += full_bytes;
  }
  return done;
}

// Whether the executor closes its pending bucket before layer `index`'s gradients join: before the embeddings,
// and before a transformer block whose upper boundary is one of the executor's cuts (exec/zero/zero_partition.h
// doubling_bucket_cuts: single blocks at both ends, segments doubling towards the middle).
bool StepBuilder::closes_executor_bucket(std::size_t index) const {
  // Stage 3: no bucket crosses a gather unit (exec/zero/zero_partition.h), and the engine reduces each layer's
  // buckets as one NCCL group when backward finishes them.
  if (!in_.executor_unit_reduce_calls.empty()) return true;
  if (layers_[index].kind == "embedding") return true;
  if (layers_[index].kind != "transformer_block") return false;
  std::int64_t block = 0, blocks = 0;  // this block's number among the blocks, and their count
  for (std::size_t i = 0; i < layers_.size(); ++i)
    if (layers_[i].kind == "transformer_block") {
      if (i < index) ++block;
      ++blocks;
    }
  for (std::int64_t b : exec::doubling_bucket_cuts(blocks, layers_[index].params, zero_.reduce_bucket_size))
    if (b == block + 1) return true;
  return false;
}

void StepBuilder::add_gradients(std::int32_t layer, std::int32_t micro, TaskId produced_by, std::int64_t elements) {
  last_gradient_ = produced_by;
  while (elements > 0) {
    const std::int64_t take = std::min(elements, zero_.reduce_bucket_size - bucket_elements_);
    bucket_elements_ += take;
    elements -= take;
    if (bucket_elements_ >= zero_.reduce_bucket_size) reduce_bucket(layer, micro, produced_by);
  }
}

void StepBuilder::reduce_bucket(std::int32_t layer, std::int32_t micro, TaskId produced_by) {
  if (ds_) {
    const std::int64_t elements = bucket_elements_;
    bucket_elements_ = 0;
    deepspeed_reduction(elements, layer, micro, produced_by, /*after_backward=*/false);
    return;
  }
  const std::int64_t elements = bucket_elements_;
  const Bytes bytes = elements * grad_e_;
  bucket_elements_ = 0;
  // Our executor at stage 3: the layer's buckets, a call each in one NCCL group.
  const std::int64_t calls = std::max<std::int64_t>(1, bucket_calls_);
  bucket_calls_ = 0;
  TaskId reduced = produced_by;
  if (n_ > 1) {
    // Stage 0 all-reduces (every rank keeps every gradient); stages 1-3 reduce-scatter to the owners.
    const CollectiveKind kind = zero_.stage == 0 ? CollectiveKind::all_reduce : CollectiveKind::reduce_scatter;
    // With overlap_comm it runs beside the backward kernels, at the link's rate beside compute.
    const double seconds = (zero_.overlap_comm ? in_.collectives->seconds_beside_compute(kind, bytes)
                                               : in_.collectives->seconds(kind, bytes)) +
                           static_cast<double>(calls - 1) * in_.collectives->grouped_call_seconds() +
                           executor_reduction_copy_seconds(elements, micro);
    reduced = timeline_.add(Resource::nccl,
                            kind == CollectiveKind::all_reduce ? TaskKind::all_reduce : TaskKind::reduce_scatter,
                            seconds, {after(produced_by)}, layer, micro, bytes);
    last_reduction_ = reduced;
    // Without overlap_comm the reduction runs inside the backward hook: compute waits for it.
    if (!zero_.overlap_comm) compute_barrier_ = reduced;
  }
  // This rank's share of the reduced bucket goes to the host (ZeRO-Offload: 16-bit gradients down). zeroplan's
  // executor copies it once, at the accumulation boundary (exec/zero/zero_engine.cpp finish_bucket ->
  // copy_gradients_to_host), in bucket order, which is the order of its partition.
  if (zero_.offload_optimizer != OffloadDevice::none && (boundary_ || !executor_)) {
    const Bytes partition_bytes = ceil_div(bytes, n_);
    last_download_ = timeline_.add(Resource::device_to_host, TaskKind::grad_download,
                                   static_cast<double>(partition_bytes) / in_.pcie_bandwidth, {after(reduced)},
                                   layer, micro, partition_bytes);
    downloaded_elements_ += ceil_div(partition_bytes, e_);
    downloads_.push_back({downloaded_elements_, last_download_});
  }
}

// zeroplan's executor at stage 3 with the fp32 master on the device: before each all-gather, a cast of the rank's
// chunk of every bucket (`elements` / N of them, fp32 read and 16-bit written) into its slot of the gathered
// buffer on the communication lane (exec/zero/zero_buffer_layout.h stage3_gathers_cast_master).
bool StepBuilder::casts_master(const TrainingConfig& training) {
  return !training.lora.enabled &&
         exec::stage3_gathers_cast_master(executor_zero_settings(training, training.zero.stage),
                                          training.precision != Precision::fp32, false);
}

double StepBuilder::executor_gather_cast_seconds(std::int64_t elements, std::int64_t buckets) const {
  if (!executor_casts_master_) return 0.0;
  const double bytes = static_cast<double>(ceil_div(elements, n_)) * (4.0 + precision_bytes(training_.precision));
  return bytes / in_.streaming_bandwidth + static_cast<double>(buckets) * in_.kernel_overhead_seconds;
}

// zeroplan's executor: the conversions on the communication lane around one bucket's reduction when its
// gradients are held in another precision than they are reduced in (exec/zero/zero_engine.cpp reduce_bucket),
// and the reduced chunk's conversion or addition into an fp32 gradient partition (stages 2-3).
double StepBuilder::executor_reduction_copy_seconds(std::int64_t elements, std::int32_t micro) const {
  if (!executor_) return 0.0;
  const double model = precision_bytes(training_.precision), held = zero_.stage < 2 ? accumulation_e_ : model;
  const double c = static_cast<double>(grad_e_), count = static_cast<double>(elements);
  double bytes = 0.0;
  if (c != held) bytes += count * (held + c);  // into the communication copy
  if (zero_.stage < 2 && c != held) bytes += count * (c + held) / (zero_.stage == 0 ? 1.0 : n_);  // and back
  if (zero_.stage >= 2 && (c != accumulation_e_ || micro > 0))
    bytes += count / n_ * (c + accumulation_e_ + (micro > 0 ? accumulation_e_ : 0.0));  // into the partition
  return bytes > 0.0 ? bytes / in_.streaming_bandwidth + in_.kernel_overhead_seconds : 0.0;
}

void StepBuilder::optimizer_step() {
  const std::int64_t params = in_.trainable_params_per_layer.empty() ? in_.model->params() : total_params_;
  const std::int64_t partition = zero_.stage == 0 ? params : ceil_div(params, n_);
  const std::int32_t micro = static_cast<std::int32_t>(training_.grad_accum - 1);
  TaskId updated = kNoTask;
  // zeroplan's executor at stages 1-2 without offload, several ranks: AdamW group by group, each group's
  // all-gather once that group's update is done (exec/zero/zero_engine.cpp finish_step); the update is added
  // with the gathers below.
  const bool interleaved =
      executor_ && (zero_.stage == 1 || zero_.stage == 2) && n_ > 1 && zero_.offload_optimizer == OffloadDevice::none;
  double interleaved_update_seconds = 0.0;
  if (zero_.offload_optimizer == OffloadDevice::none) {
    const bool whole = ds_ && zero_.stage == 0;
    const std::int64_t step_tensors =
        whole || zero_.stage == 3 ? total_tensors() : ceil_div(total_tensors(), n_);
    // DeepSpeed stages 0-2: the step's per-tensor loops on the host (deepspeed_tensor_ops), after the GPU has
    // finished the backward pass and its reduction: fp16/unfused_optimizer.py reads every tensor's overflow test
    // back, and stage_1_and_2.py step reads the overflow count back (has_overflow: overflow_gpu[0].item())
    // before the norm loop. The host may have issued the overflow loop of stages 1-2 while the GPU was still
    // finishing the backward pass; the model does not credit that overlap (it needs the host's lead over the
    // GPU, which depends on PyTorch's own launch costs per operator, not modelled).
    const DeepSpeedTensorOps tensor_ops = ds_ ? deepspeed_tensor_ops(in_.path, training_) : DeepSpeedTensorOps{};
    const bool host_loops = ds_ && in_.tensor_op_seconds > 0.0 && tensor_ops.step > 0.0;
    const double seconds =
        ds_ ? deepspeed_step_seconds(in_.path, training_, whole ? params : partition, step_tensors,
                                     in_.deepspeed_optimizer_bandwidth, in_.kernel_overhead_seconds, host_loops)
            : static_cast<double>(partition) *
                      (executor_ ? executor_optimizer_step_bytes_per_param(training_)
                                 : optimizer_step_bytes_per_param(training_)) /
                      in_.optimizer_bandwidth +
                  (executor_ ? in_.executor_adamw_launch_seconds : 0.0);
    // DeepSpeed stage 3: the host issues each tensor's norm kernels (stage3.py get_grad_norm_direct) before the
    // flat work of the sub-groups; the backward pass ended waiting for the reduce stream.
    const TaskId host_norm =
        ds_ && in_.path.wrapper == DeepSpeedOptimizerWrapper::zero_3 && in_.step_tensor_seconds > 0.0
            ? timeline_.add(Resource::host_python, TaskKind::engine_hooks,
                            static_cast<double>(total_tensors()) * in_.step_tensor_seconds,
                            {after(last_reduction_), after(last_gradient_), after(compute_barrier_)}, -1, micro)
            : kNoTask;
    const TaskId host_loop =
        host_loops ? timeline_.add(Resource::host_python, TaskKind::engine_hooks,
                                   static_cast<double>(step_tensors) * tensor_ops.step * in_.tensor_op_seconds,
                                   {after(last_reduction_), after(last_gradient_), after(compute_barrier_)}, -1,
                                   micro)
                   : kNoTask;
    if (interleaved)
      interleaved_update_seconds = seconds;
    else
      updated = timeline_.add(Resource::gpu_compute, TaskKind::optimizer_step, seconds,
                              {after(last_reduction_), after(last_gradient_), after(compute_barrier_),
                               after(host_norm), after(host_loop)},
                              -1, micro);
    if (ds_) step_buffers(updated);
    // fp16/unfused_optimizer.py step: the copy back to 16 bits is a loop of its own after optimizer.step(),
    // issued while the GPU runs the optimizer's kernels (its copies queue behind them, in the flat step's bytes):
    // the step ends when both the GPU and this loop are done.
    if (host_loops && tensor_ops.after_step > 0.0)
      timeline_.add(Resource::host_python, TaskKind::engine_hooks,
                    static_cast<double>(step_tensors) * tensor_ops.after_step * in_.tensor_op_seconds,
                    {after(host_loop)}, -1, micro);
    if (zero_.stage == 3 && zero_.offload_param != OffloadDevice::none) {
      // Parameters offloaded, optimizer on the GPU: the updated 16-bit partition goes back to the host (and on
      // to NVMe), where the next step's gathers fetch it.
      const Bytes param_bytes = partition * e_;
      updated = timeline_.add(Resource::device_to_host, TaskKind::param_download,
                              static_cast<double>(param_bytes) / in_.pcie_bandwidth, {after(updated)}, -1, micro,
                              param_bytes);
      if (zero_.offload_param == OffloadDevice::nvme && in_.nvme_param_write_share > 0.0) {
        const auto written = static_cast<Bytes>(std::llround(static_cast<double>(param_bytes) * in_.nvme_param_write_share));
        updated = timeline_.add(Resource::nvme, TaskKind::nvme_write,
                                static_cast<double>(written) / in_.nvme_write_bandwidth, {after(updated)}, -1, micro,
                                written);
      }
    }
  } else if (defers_offloaded_update()) {
    // The norm here; the update runs in the next step's forward (deferred_offloaded_update).
    updated = timeline_.add(Resource::gpu_compute, TaskKind::optimizer_step,
                            static_cast<double>(partition * e_) / in_.optimizer_bandwidth,
                            {after(last_reduction_), after(last_gradient_), after(compute_barrier_)}, -1, micro);
  } else if (executor_ && zero_.offload_optimizer == OffloadDevice::cpu) {
    updated = executor_offloaded_update(partition, micro);
  } else if (ds_ && in_.path.wrapper == DeepSpeedOptimizerWrapper::zero_3 &&
             zero_.offload_optimizer == OffloadDevice::cpu) {
    updated = deepspeed_stage3_offloaded_update(partition, micro);
  } else {
    // Host CPU, one sub-group at a time; NVMe states read before and written after each; updated 16-bit
    // parameters up over H2D (stage 1/2, stage 3 without param offload) or kept on the host / NVMe.
    const double state_bytes_per_param = 4.0 + optimizer_state_bytes_per_param(training_.optimizer);
    const bool params_stay_on_host = zero_.stage == 3 && zero_.offload_param != OffloadDevice::none;
    // DeepSpeed stages 1-2 (stage_1_and_2.py step, cpu_offload): unscale_and_clip_grads multiplies the fp32
    // gradient partition on the CPU whatever the scale (grad.data.mul_(1 / combined_scale): 4 bytes read and 4
    // written per element), and bit16_partitions[partition_id].data.copy_(fp32_partition.data) casts the updated
    // fp32 partition to 16 bits on the host (4 read, 2 written) before its host-to-device copy, serially. Both
    // stream memory as the CPU Adam does, which reaches the host's bandwidth (bench/cpu_adam_benchmark:
    // bandwidth_fraction 1.0-1.18 on the H100 host of 2026-11-25) at 30 bytes per parameter: their rate is that
    // bandwidth, this rank's share. Profiled on that host (ds_peer.py --profile, GPT-2 1.5B, one GPU): mul_
    // 102.6 ms, DeepSpeedCPUAdam.step 376.6 ms, host-to-device 57.7 ms in one copy.
    const bool deepspeed_host_passes = ds_ && zero_.stage <= 2 && zero_.offload_optimizer == OffloadDevice::cpu;
    const double host_bytes_per_second = in_.host_memory_bytes_per_second;
    // stage_1_and_2.py step -> scaled_global_norm -> complete_grad_norm_calculation_for_cpu_offload: each
    // tensor's norm (taken in its gradient hook) read back to the host before the unscale (deepspeed_tensor_ops).
    const double norm_reads = deepspeed_host_passes ? deepspeed_tensor_ops(in_.path, training_).step : 0.0;
    const TaskId norm_read =
        norm_reads > 0.0 && in_.tensor_op_seconds > 0.0
            ? timeline_.add(Resource::host_python, TaskKind::engine_hooks,
                            static_cast<double>(ceil_div(total_tensors(), n_)) * norm_reads * in_.tensor_op_seconds,
                            {after(last_download_), after(last_reduction_), after(last_gradient_)}, -1, micro)
            : kNoTask;
    const std::int64_t sub_group = std::max<std::int64_t>(1, zero_.sub_group_size);
    for (std::int64_t first = 0; first < partition; first += sub_group) {
      const std::int64_t elements = std::min(sub_group, partition - first);
      Dependency ready = after(last_download_);
      if (zero_.offload_optimizer == OffloadDevice::nvme) {
        const auto bytes = static_cast<Bytes>(static_cast<double>(elements) * state_bytes_per_param);
        const TaskId read = timeline_.add(Resource::nvme, TaskKind::nvme_read,
                                          static_cast<double>(bytes) / in_.nvme_read_bandwidth,
                                          {after(last_download_)}, -1, micro, bytes);
        ready = after(read);
      }
      if (deepspeed_host_passes) {
        const TaskId unscale = timeline_.add(Resource::host_cpu, TaskKind::cpu_optimizer_step,
                                             8.0 * static_cast<double>(elements) / host_bytes_per_second,
                                             {ready, after(last_reduction_), after(last_gradient_), after(norm_read)},
                                             -1, micro);
        ready = after(unscale);
      }
      TaskId step = timeline_.add(Resource::host_cpu, TaskKind::cpu_optimizer_step,
                                  static_cast<double>(elements) / in_.cpu_optimizer_params_per_second,
                                  {ready, after(last_reduction_), after(last_gradient_)}, -1, micro);
      if (ds_ && first == 0) step_buffers(step);
      if (deepspeed_host_passes)
        step = timeline_.add(Resource::host_cpu, TaskKind::cpu_optimizer_step,
                             6.0 * static_cast<double>(elements) / host_bytes_per_second, {after(step)}, -1, micro);
      updated = step;
      if (zero_.offload_optimizer == OffloadDevice::nvme) {
        const auto bytes = static_cast<Bytes>(static_cast<double>(elements) * state_bytes_per_param);
        timeline_.add(Resource::nvme, TaskKind::nvme_write, static_cast<double>(bytes) / in_.nvme_write_bandwidth,
                      {after(step)}, -1, micro, bytes);
      }
      const Bytes param_bytes = elements * e_;
      if (!params_stay_on_host) {
        updated = timeline_.add(Resource::host_to_device, TaskKind::param_upload,
                                static_cast<double>(param_bytes) / in_.pcie_bandwidth, {after(step)}, -1, micro,
                                param_bytes);
      } else if (zero_.offload_param == OffloadDevice::nvme && in_.nvme_param_write_share > 0.0) {
        const auto written = static_cast<Bytes>(std::llround(static_cast<double>(param_bytes) * in_.nvme_param_write_share));
        updated = timeline_.add(Resource::nvme, TaskKind::nvme_write,
                                static_cast<double>(written) / in_.nvme_write_bandwidth, {after(step)}, -1, micro,
                                written);
      }
      last_update_ = updated;
    }
    updated = last_update_;
  }
  if ((zero_.stage == 1 || zero_.stage == 2) && n_ > 1 && !defers_offloaded_update()) {
    // stage_1_and_2.py (and bf16_optimizer.py update_lp_params) all_gather_dp_groups: with torch's
    // all_gather_into_tensor, one call for the whole flat group (runtime/utils.py
    // all_gather_into_tensor_dp_groups); zeroplan's executor gathers allgather_bucket_size elements a call.
    const std::int64_t chunk = ds_ ? params : std::max<std::int64_t>(1, zero_.allgather_bucket_size);
    TaskId group_updated = updated;
    for (std::int64_t first = 0; first < params; first += chunk) {
      const std::int64_t elements = std::min(chunk, params - first);
      const Bytes bytes = elements * e_;
      if (interleaved)  // this group's share of the update, after the previous group's
        group_updated = timeline_.add(
            Resource::gpu_compute, TaskKind::optimizer_step,
            interleaved_update_seconds * static_cast<double>(elements) / static_cast<double>(params),
            {after(group_updated), after(last_reduction_), after(last_gradient_), after(compute_barrier_)}, -1,
            micro);
      timeline_.add(Resource::nccl, TaskKind::all_gather,
                    in_.collectives->seconds(CollectiveKind::all_gather, bytes), {after(group_updated)}, -1, micro,
                    bytes);
    }
  }
  if (executor_ && zero_.stage == 3 && n_ > 1 && in_.executor_persistent_buckets > 0) {
    // Our executor at stage 3 (exec/zero/zero_engine.cpp all_gather_persistent): after the update, each rank's
    // chunks of the persistent tensors go to every rank, a call per persistent bucket in one NCCL group, on the
    // communication lane while nothing else runs (the next forward reads them).
    const Bytes bytes = in_.executor_persistent_elements * e_;
    timeline_.add(Resource::nccl, TaskKind::all_gather,
                  in_.collectives->seconds(CollectiveKind::all_gather, bytes) +
                      static_cast<double>(in_.executor_persistent_buckets - 1) *
                          in_.collectives->grouped_call_seconds() +
                      executor_gather_cast_seconds(in_.executor_persistent_elements,
                                                   in_.executor_persistent_buckets),
                  {after(updated), after(last_update_)}, -1, micro, bytes);
  }
}

bool StepBuilder::defers_offloaded_update() const {
  return executor_ && (zero_.stage == 1 || zero_.stage == 2) && zero_.offload_optimizer == OffloadDevice::cpu;
}

// zeroplan's executor at stages 1-2 with the optimizer on the CPU (exec/zero/zero_engine_offload.cpp
// update_buckets_below): the previous step's CPU AdamW runs as this step's forward needs the parameters, bucket by
// bucket from the bottom of the layout, each piece copied to the device as it is updated and each bucket
// all-gathered once its pieces are there; a layer's forward waits for the last bucket holding it. The buckets
// are the executor's (the greedy cut from the top at reduce_bucket_size, closed where closes_executor_bucket
// says), in layer terms. In the steady state the previous step's gradient copies are done by then.
void StepBuilder::deferred_offloaded_update() {
  struct Bucket {
    std::int64_t elements = 0;
    std::size_t lowest = 0, highest = 0;  // layers holding its elements
  };
  std::vector<Bucket> buckets;  // from the top of the layout down, as backward closes them
  Bucket open;
  bool has_open = false;
  for (std::size_t index = layers_.size(); index-- > 0;) {
    std::int64_t elements = layers_[index].params;
    if (elements <= 0) continue;
    if (has_open && closes_executor_bucket(index)) {
      buckets.push_back(open);
      has_open = false;
    }
    while (elements > 0) {
      if (!has_open) {
        open = Bucket{0, index, index};
        has_open = true;
      }
      const std::int64_t take = std::min(elements, zero_.reduce_bucket_size - open.elements);
      open.elements += take;
      open.lowest = index;
      elements -= take;
      if (open.elements >= zero_.reduce_bucket_size) {
        buckets.push_back(open);
        has_open = false;
      }
    }
  }
  if (has_open) buckets.push_back(open);

  update_ready_.assign(layers_.size(), kNoTask);
  const std::int64_t piece = std::max<std::int64_t>(1, std::min(kExecutorOffloadPieceElements, zero_.sub_group_size));
  const std::int32_t micro = 0;
  for (auto b = buckets.rbegin(); b != buckets.rend(); ++b) {  // bottom up, the forward's order
    const std::int64_t chunk = ceil_div(b->elements, n_);  // this rank's share
    TaskId ready = kNoTask;
    for (std::int64_t first = 0; first < chunk; first += piece) {
      const std::int64_t elements = std::min(piece, chunk - first);
      const TaskId step = timeline_.add(Resource::host_cpu, TaskKind::cpu_optimizer_step,
                                        in_.cpu_optimizer_call_seconds +
                                            static_cast<double>(elements) / in_.cpu_optimizer_params_per_second,
                                        {}, -1, micro);
      const Bytes param_bytes = elements * e_;
      ready = timeline_.add(Resource::host_to_device, TaskKind::param_upload,
                            static_cast<double>(param_bytes) / in_.pcie_bandwidth, {after(step)}, -1, micro,
                            param_bytes);
    }
    if (n_ > 1) {
      const Bytes bytes = b->elements * e_;
      ready = timeline_.add(Resource::nccl, TaskKind::all_gather,
                            in_.collectives->seconds(CollectiveKind::all_gather, bytes), {after(ready)}, -1, micro,
                            bytes);
    }
    for (std::size_t layer = b->lowest; layer <= b->highest; ++layer) update_ready_[layer] = ready;
  }
}

// zeroplan's executor's ZeRO-Offload step (exec/zero/zero_engine.cpp finish_step and offloaded_update): the
// compute lane waits for every reduction and sums the squares of the gradient partition (one read of it); the
// host reads the norm, then updates the partition piece by piece with the CPU AdamW, each piece once its
// gradients are on the host (its bucket's copy), and copies each updated 16-bit piece to the device while it
// updates the next. The step ends when the last piece has arrived.
TaskId StepBuilder::executor_offloaded_update(std::int64_t partition, std::int32_t micro) {
  const TaskId norm = timeline_.add(Resource::gpu_compute, TaskKind::optimizer_step,
                                    static_cast<double>(partition * e_) / in_.optimizer_bandwidth,
                                    {after(last_reduction_), after(last_gradient_), after(compute_barrier_)}, -1,
                                    micro);
  // The executor's own pieces when the layout gives them (each bucket's chunk cut at the piece size: many small
  // ones for a model of many small units), else the partition cut evenly.
  std::vector<std::int64_t> pieces = in_.offload_pieces;
  if (pieces.empty()) {
    const std::int64_t piece = std::max<std::int64_t>(1, std::min(kExecutorOffloadPieceElements, zero_.sub_group_size));
    for (std::int64_t first = 0; first < partition; first += piece) pieces.push_back(std::min(piece, partition - first));
  }
  // With the parameters on the device the executor updates the pieces a batch at a time, one CPU AdamW call and
  // one copy per batch (exec/exec_config.h offload_update_batches; exec/zero/zero_engine_offload.cpp
  // update_in_batches).
  if (zero_.offload_param == OffloadDevice::none) {
    std::vector<std::int64_t> batches;
    for (const auto& [first, last] : exec::offload_update_batches(pieces)) {
      std::int64_t elements = 0;
      for (std::size_t i = first; i < last; ++i) elements += pieces[i];
      batches.push_back(elements);
    }
    pieces = std::move(batches);
  }
  std::size_t arrived = 0;  // downloads_[arrived] holds the piece's last element
  TaskId updated = norm;
  std::int64_t first = 0;
  for (const std::int64_t elements : pieces) {
    while (arrived + 1 < downloads_.size() && downloads_[arrived].end_elements < first + elements) ++arrived;
    const TaskId download = downloads_.empty() ? last_download_ : downloads_[arrived].task;
    first += elements;
    const TaskId step = timeline_.add(Resource::host_cpu, TaskKind::cpu_optimizer_step,
                                      in_.cpu_optimizer_call_seconds +
                                          static_cast<double>(elements) / in_.cpu_optimizer_params_per_second,
                                      {after(norm), after(download)}, -1, micro);
    const Bytes param_bytes = elements * e_;
    if (zero_.offload_param == OffloadDevice::nvme) {
      // offload_param nvme: the CPU AdamW writes the piece into its chunk's swap buffer, which goes to disk
      // beside the next pieces' updates (exec/zero/zero_engine_offload.cpp update_piece), or into the chunk kept in
      // host memory (max_in_cpu: nvme_param_write_share of the bytes go to disk); the step ends with
      // every write done.
      const auto written = static_cast<Bytes>(std::llround(static_cast<double>(param_bytes) * in_.nvme_param_write_share));
      updated = written > 0 ? timeline_.add(Resource::nvme, TaskKind::nvme_write,
                                            static_cast<double>(written) / in_.nvme_write_bandwidth, {after(step)},
                                            -1, micro, written)
                            : step;
      continue;
    }
    updated = timeline_.add(Resource::host_to_device, TaskKind::param_upload,
                            static_cast<double>(param_bytes) / in_.pcie_bandwidth, {after(step)}, -1, micro,
                            param_bytes);
  }
  last_update_ = updated;
  return updated;
}

}  // namespace schedule_internal

SteadyMicroSteps build_step_schedule(const StepScheduleInputs& inputs, Timeline& timeline) {
  return schedule_internal::StepBuilder(inputs, timeline).build();
}

}  // namespace zeroplan
