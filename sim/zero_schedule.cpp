#include "sim/zero_schedule.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "sim/comm_model.h"

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

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

class StepBuilder {
 public:
  StepBuilder(const StepScheduleInputs& inputs, Timeline& timeline)
      : in_(inputs),
        timeline_(timeline),
        training_(*inputs.training),
        zero_(inputs.training->zero),
        layers_(inputs.model->layers),
        compute_(*inputs.compute),
        n_(inputs.world_size),
        e_(communication_element_bytes(*inputs.training)) {}

  SteadyMicroSteps build() {
    const std::size_t layer_count = layers_.size();
    // Tasks per micro-step: up to 4 compute + 3 stage-3 fetch tasks per layer and pass, plus buckets.
    timeline_.clear();
    timeline_.reserve(static_cast<std::size_t>(training_.grad_accum) * layer_count * 12 + 64);
    gather_elements_.assign(layer_count, 0);
    for (std::size_t i = 0; i < layer_count; ++i) {
      gather_elements_[i] = layers_[i].params - (zero_.stage == 3 ? persistent_params(layers_[i], zero_) : 0);
    }
    gathered_bytes_.assign(layer_count, 0);
    gather_task_.assign(layer_count, kNoTask);

    SteadyMicroSteps steady;
    MicroStepState previous;
    for (std::int32_t micro = 0; micro < training_.grad_accum; ++micro) {
      // Stages 0/1 keep full gradients and reduce at the boundary only; 2/3 reduce every micro-step.
      const bool boundary = micro + 1 == training_.grad_accum;
      if (boundary) steady.boundary_start = timeline_.resource_free_at(Resource::gpu_compute);
      reduce_this_micro_step_ = zero_.stage >= 2 || boundary;
      const auto first_task = static_cast<TaskId>(timeline_.size());
      run_pass(/*forward=*/true, micro);
      run_pass(/*forward=*/false, micro);
      if (reduce_this_micro_step_ && bucket_elements_ > 0) reduce_bucket(-1, micro, last_backward_);
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

 private:
  // --- steady state of the accumulation (SteadyMicroSteps) ------------------------------------------------

  // What the next micro-step's tasks can see of the earlier ones, relative to the end of the compute so far.
  struct MicroStepState {
    double compute_end = 0.0;
    std::array<double, kResourceCount + 6> relative{};  // resources' free times, then the tasks depended on
    std::int64_t bucket_elements = 0;
    Bytes gathered_bytes = 0;

    bool repeats(const MicroStepState& earlier) const {
      if (bucket_elements != earlier.bucket_elements || gathered_bytes != earlier.gathered_bytes) return false;
      if (!(compute_end > earlier.compute_end)) return false;
      const double tolerance = 1e-12 * compute_end;
      for (std::size_t i = 0; i < relative.size(); ++i)
        if (std::abs(relative[i] - earlier.relative[i]) > tolerance) return false;
      return true;
    }
  };

  MicroStepState state() const {
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
    return s;
  }

  // --- passes ---------------------------------------------------------------------------------------------

  std::int32_t layer_at(bool forward, std::size_t position) const {
    return static_cast<std::int32_t>(forward ? position : layers_.size() - 1 - position);
  }

  void run_pass(bool forward, std::int32_t micro) {
    const std::size_t count = layers_.size();
    std::size_t issued = 0;  // positions [0, issued) have their stage-3 fetch issued
    TaskId previous_compute = last_compute_;
    for (std::size_t position = 0; position < count; ++position) {
      const std::int32_t layer = layer_at(forward, position);
      const auto index = static_cast<std::size_t>(layer);
      const LayerCompute& work = compute_[index];

      // Stage 3: fetch the layer on demand (when the previous layer's compute is done) unless prefetched.
      if (zero_.stage == 3 && issued <= position) {
        gather_task_[index] = fetch(layer, micro, after(previous_compute));
        issued = position + 1;
      }

      std::array<Dependency, 2> first_deps{after(zero_.stage == 3 ? gather_task_[index] : kNoTask),
                                           after(compute_barrier_)};
      TaskId first = kNoTask;
      TaskId consumer = kNoTask;
      if (forward) {
        first = consumer = timeline_.add(Resource::gpu_compute, TaskKind::forward, work.forward_seconds,
                                         first_deps.data(), first_deps.size(), layer, micro, 0, work.forward_flops);
        timeline_.set_memory(first, in_.activation_bytes[index], 0, MemoryUse::activations);
        if (index + 1 == count) timeline_.set_memory(first, in_.logits_bytes, 0, MemoryUse::logits);
      } else {
        if (work.recompute_seconds > 0.0) {
          first = timeline_.add(Resource::gpu_compute, TaskKind::recompute, work.recompute_seconds,
                                first_deps.data(), first_deps.size(), layer, micro, 0, work.recompute_flops);
        }
        const TaskId input = timeline_.add(Resource::gpu_compute, TaskKind::backward_input,
                                           work.backward_input_seconds, first_deps.data(), first_deps.size(), layer,
                                           micro, 0, work.backward_flops / 2.0);
        if (first == kNoTask) first = input;
        consumer = timeline_.add(Resource::gpu_compute, TaskKind::backward_weight, work.backward_weight_seconds,
                                 nullptr, 0, layer, micro, 0, work.backward_flops / 2.0);
        timeline_.free_at_finish(consumer, in_.activation_bytes[index], MemoryUse::activations);
        if (index + 1 == count) timeline_.free_at_finish(consumer, in_.logits_bytes, MemoryUse::logits);
        last_backward_ = consumer;
      }

      if (zero_.stage == 3) {
        // Prefetch while this layer computes: the next layers, at most prefetch_window ahead, within the
        // prefetch bucket, and with no more than max_live_parameters gathered at once.
        std::int64_t ahead = 0;
        std::int64_t live = gather_elements_[index];
        for (std::size_t next = position + 1; next < count && next <= position + static_cast<std::size_t>(in_.prefetch_window); ++next) {
          const std::int64_t elements = gather_elements_[static_cast<std::size_t>(layer_at(forward, next))];
          ahead += elements;
          live += elements;
          if (ahead > zero_.prefetch_bucket_size || live > zero_.max_live_parameters) break;
          if (next >= issued) {
            const std::int32_t next_layer = layer_at(forward, next);
            gather_task_[static_cast<std::size_t>(next_layer)] = fetch(next_layer, micro, with_start_of(first));
            issued = next + 1;
          }
        }
        // Released after use (forward: after the layer's forward; backward: after its weight gradient).
        if (gathered_bytes_[index] > 0) {
          timeline_.free_at_finish(consumer, gathered_bytes_[index], MemoryUse::gathered_params);
        }
        gathered_bytes_[index] = 0;
      }

      if (!forward && reduce_this_micro_step_) add_gradients(layer, micro, consumer, layers_[index].params);
      previous_compute = consumer;
      last_compute_ = consumer;
    }
  }

  // --- stage 3 parameter fetch -----------------------------------------------------------------------------

  TaskId fetch(std::int32_t layer, std::int32_t micro, Dependency when) {
    const auto index = static_cast<std::size_t>(layer);
    const std::int64_t elements = gather_elements_[index];
    if (elements <= 0) return kNoTask;
    const Bytes full_bytes = elements * e_;
    const Bytes partition_bytes = ceil_div(full_bytes, n_);
    Dependency ready = when;
    TaskId allocating = kNoTask;
    if (zero_.offload_param != OffloadDevice::none) {
      if (zero_.offload_param == OffloadDevice::nvme) {
        const TaskId read = timeline_.add(Resource::nvme, TaskKind::nvme_read,
                                          static_cast<double>(partition_bytes) / in_.nvme_read_bandwidth, {ready},
                                          layer, micro, partition_bytes);
        ready = after(read);
      }
      allocating = timeline_.add(Resource::host_to_device, TaskKind::param_upload,
                                 static_cast<double>(partition_bytes) / in_.pcie_bandwidth, {ready}, layer, micro,
                                 partition_bytes);
      ready = after(allocating);
    }
    TaskId done = allocating;
    if (n_ > 1) {
      // One coalesced all-gather per module (gathered_module_count), the layer's bytes split evenly over them.
      const std::int64_t modules = std::max<std::int64_t>(1, gathered_module_count(layers_[index], zero_));
      const Bytes per_module = full_bytes / modules;
      for (std::int64_t m = 0; m < modules; ++m) {
        const Bytes bytes = m + 1 == modules ? full_bytes - per_module * (modules - 1) : per_module;
        done = timeline_.add(Resource::nccl, TaskKind::all_gather,
                             in_.collectives->seconds(CollectiveKind::all_gather, bytes), {ready}, layer, micro,
                             bytes);
        if (allocating == kNoTask) allocating = done;
      }
    }
    if (allocating == kNoTask) return kNoTask;  // one GPU, parameters resident: nothing to fetch
    timeline_.set_memory(allocating, full_bytes, 0, MemoryUse::gathered_params);
    gathered_bytes_[index] += full_bytes;
    return done;
  }

  // --- gradient reduction ----------------------------------------------------------------------------------

  void add_gradients(std::int32_t layer, std::int32_t micro, TaskId produced_by, std::int64_t elements) {
    last_gradient_ = produced_by;
    while (elements > 0) {
      const std::int64_t take = std::min(elements, zero_.reduce_bucket_size - bucket_elements_);
      bucket_elements_ += take;
      elements -= take;
      if (bucket_elements_ >= zero_.reduce_bucket_size) reduce_bucket(layer, micro, produced_by);
    }
  }

  void reduce_bucket(std::int32_t layer, std::int32_t micro, TaskId produced_by) {
    const Bytes bytes = bucket_elements_ * e_;
    bucket_elements_ = 0;
    TaskId reduced = produced_by;
    if (n_ > 1) {
      // Stage 0 all-reduces (every rank keeps every gradient); stages 1-3 reduce-scatter to the owners.
      const CollectiveKind kind = zero_.stage == 0 ? CollectiveKind::all_reduce : CollectiveKind::reduce_scatter;
      reduced = timeline_.add(Resource::nccl,
                              kind == CollectiveKind::all_reduce ? TaskKind::all_reduce : TaskKind::reduce_scatter,
                              in_.collectives->seconds(kind, bytes), {after(produced_by)}, layer, micro, bytes);
      last_reduction_ = reduced;
      // Without overlap_comm the reduction runs inside the backward hook: compute waits for it.
      if (!zero_.overlap_comm) compute_barrier_ = reduced;
    }
    if (zero_.offload_optimizer != OffloadDevice::none) {
      // This rank's share of the reduced bucket goes to the host (ZeRO-Offload: 16-bit gradients down).
      const Bytes partition_bytes = ceil_div(bytes, n_);
      last_download_ = timeline_.add(Resource::device_to_host, TaskKind::grad_download,
                                     static_cast<double>(partition_bytes) / in_.pcie_bandwidth, {after(reduced)},
                                     layer, micro, partition_bytes);
    }
  }

  // --- optimizer step and the parameter all-gather after it ----------------------------------------------

  void optimizer_step() {
    const std::int64_t params = in_.model->params();
    const std::int64_t partition = zero_.stage == 0 ? params : ceil_div(params, n_);
    const std::int32_t micro = static_cast<std::int32_t>(training_.grad_accum - 1);
    TaskId updated = kNoTask;
    if (zero_.offload_optimizer == OffloadDevice::none) {
      const double seconds =
          static_cast<double>(partition) * optimizer_step_bytes_per_param(training_) / in_.optimizer_bandwidth;
      updated = timeline_.add(Resource::gpu_compute, TaskKind::optimizer_step, seconds,
                              {after(last_reduction_), after(last_gradient_), after(compute_barrier_)}, -1, micro);
      if (zero_.stage == 3 && zero_.offload_param != OffloadDevice::none) {
        // Parameters offloaded, optimizer on the GPU: the updated 16-bit partition goes back to the host (and on
        // to NVMe), where the next step's gathers fetch it.
        const Bytes param_bytes = partition * e_;
        updated = timeline_.add(Resource::device_to_host, TaskKind::param_download,
                                static_cast<double>(param_bytes) / in_.pcie_bandwidth, {after(updated)}, -1, micro,
                                param_bytes);
        if (zero_.offload_param == OffloadDevice::nvme) {
          updated = timeline_.add(Resource::nvme, TaskKind::nvme_write,
                                  static_cast<double>(param_bytes) / in_.nvme_write_bandwidth, {after(updated)}, -1,
                                  micro, param_bytes);
        }
      }
    } else {
      // Host CPU, one sub-group at a time; NVMe states read before and written after each; updated 16-bit
      // parameters up over H2D (stage 1/2, stage 3 without param offload) or kept on the host / NVMe.
      const double state_bytes_per_param = 4.0 + optimizer_state_bytes_per_param(training_.optimizer);
      const bool params_stay_on_host = zero_.stage == 3 && zero_.offload_param != OffloadDevice::none;
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
        const TaskId step = timeline_.add(Resource::host_cpu, TaskKind::cpu_optimizer_step,
                                          static_cast<double>(elements) / in_.cpu_optimizer_params_per_second,
                                          {ready, after(last_reduction_), after(last_gradient_)}, -1, micro);
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
        } else if (zero_.offload_param == OffloadDevice::nvme) {
          updated = timeline_.add(Resource::nvme, TaskKind::nvme_write,
                                  static_cast<double>(param_bytes) / in_.nvme_write_bandwidth, {after(step)}, -1,
                                  micro, param_bytes);
        }
        last_update_ = updated;
      }
      updated = last_update_;
    }
    if ((zero_.stage == 1 || zero_.stage == 2) && n_ > 1) {
      // stage_1_and_2.py all_gather_dp_groups: the updated partitions, allgather_bucket_size elements a call.
      const std::int64_t chunk = std::max<std::int64_t>(1, zero_.allgather_bucket_size);
      for (std::int64_t first = 0; first < params; first += chunk) {
        const Bytes bytes = std::min(chunk, params - first) * e_;
        timeline_.add(Resource::nccl, TaskKind::all_gather,
                      in_.collectives->seconds(CollectiveKind::all_gather, bytes), {after(updated)}, -1, micro,
                      bytes);
      }
    }
  }

  const StepScheduleInputs& in_;
  Timeline& timeline_;
  const TrainingConfig& training_;
  const ZeroConfig& zero_;
  const std::vector<LayerDescription>& layers_;
  const std::vector<LayerCompute>& compute_;
  const int n_;
  const Bytes e_;

  std::vector<std::int64_t> gather_elements_;  // per layer: stage-3 elements all-gathered (all but persistent)
  std::vector<Bytes> gathered_bytes_;          // per layer: gathered bytes awaiting release
  std::vector<TaskId> gather_task_;            // per layer: the fetch the layer's compute waits for

  bool reduce_this_micro_step_ = false;
  std::int64_t bucket_elements_ = 0;
  TaskId compute_barrier_ = kNoTask;  // a synchronous collective the compute stream must wait for
  TaskId last_compute_ = kNoTask;
  TaskId last_backward_ = kNoTask;
  TaskId last_gradient_ = kNoTask;
  TaskId last_reduction_ = kNoTask;
  TaskId last_download_ = kNoTask;
  TaskId last_update_ = kNoTask;
};

}  // namespace

SteadyMicroSteps build_step_schedule(const StepScheduleInputs& inputs, Timeline& timeline) {
  return StepBuilder(inputs, timeline).build();
}

}  // namespace zeroplan
