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

std::vector<bool> reuse_kept_layers(const ModelDescription& model, const ZeroConfig& zero) {
  std::vector<bool> kept(model.layers.size(), false);
  std::int64_t behind = 0;
  for (std::size_t i = model.layers.size(); i-- > 0;) {
    const std::int64_t gathered = model.layers[i].params - persistent_params(model.layers[i], zero);
    kept[i] = gathered > 0 && 2 * behind < zero.max_reuse_distance;
    behind += std::max<std::int64_t>(0, gathered);
  }
  return kept;
}

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// The executor's offload pipeline unit (exec/zero/zero_engine.cpp kOffloadPieceElements): 2^24 elements, or
// sub_group_size when smaller.
constexpr std::int64_t kExecutorOffloadPieceElements = std::int64_t{1} << 24;

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
        e_(communication_element_bytes(*inputs.training)),
        grad_e_(gradient_communication_bytes(*inputs.training)),
        accumulation_e_(inputs.training->precision != Precision::fp32 &&
                                inputs.training->grad_accum_dtype == Precision::fp32
                            ? 4
                            : precision_bytes(inputs.training->precision)),
        ds_(inputs.deepspeed),
        executor_(inputs.training->engine == TrainingEngine::zeroplan) {}

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
    kept_.assign(layer_count, false);
    if (ds_ && zero_.stage == 3) kept_ = reuse_kept_layers(*in_.model, zero_);
    total_params_ = std::max<std::int64_t>(1, in_.model->params());
    total_tensors_ = 0;
    for (std::int64_t t : in_.tensors_per_layer) total_tensors_ += t;
    total_tensors_ = std::max<std::int64_t>(1, total_tensors_);

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

 private:
  // --- steady state of the accumulation (SteadyMicroSteps) ------------------------------------------------

  // What the next micro-step's tasks can see of the earlier ones, relative to the end of the compute so far.
  struct MicroStepState {
    double compute_end = 0.0;
    std::array<double, kResourceCount + 6> relative{};  // resources' free times, then the tasks depended on
    std::int64_t bucket_elements = 0;
    Bytes gathered_bytes = 0;
    Bytes transient_live = 0;

    bool repeats(const MicroStepState& earlier) const {
      if (bucket_elements != earlier.bucket_elements || gathered_bytes != earlier.gathered_bytes) return false;
      if (transient_live != earlier.transient_live) return false;
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
    s.transient_live = backward_grads_live_ + buckets_live_ + grad_partition_live_;
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
      // DeepSpeed: the layer's hooks run on the host first; they issue its fetch and its kernels.
      const TaskId hooks = ds_ ? host_hooks(forward, layer, micro, position == 0, previous_compute) : kNoTask;

      // Stage 3: fetch the layer on demand (when the previous layer's compute is done) unless prefetched, or (in
      // backward) still gathered since its forward.
      const bool still_gathered = !forward && kept_[index];
      if (zero_.stage == 3 && issued <= position) {
        if (!still_gathered) {
          gather_task_[index] = fetch(layer, micro, after(previous_compute), with_start_of(hooks));
        } else {
          gather_task_[index] = kNoTask;
        }
        issued = position + 1;
      }

      std::array<Dependency, 3> first_deps{after(zero_.stage == 3 ? gather_task_[index] : kNoTask),
                                           after(compute_barrier_), after(hooks)};
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
                                                    static_cast<double>(layers_[index].params),
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

      if (zero_.stage == 3) {
        // Prefetch while this layer computes: the next layers, at most prefetch_window ahead, within the
        // prefetch bucket, and with no more than max_live_parameters gathered at once.
        std::int64_t ahead = 0;
        std::int64_t live = gather_elements_[index];
        for (std::size_t next = position + 1; next < count && next <= position + static_cast<std::size_t>(in_.prefetch_window); ++next) {
          const auto next_index = static_cast<std::size_t>(layer_at(forward, next));
          if (!forward && kept_[next_index]) {  // still gathered since its forward: nothing to fetch
            if (next >= issued) issued = next + 1;
            continue;
          }
          const std::int64_t elements = gather_elements_[next_index];
          ahead += elements;
          live += elements;
          // Our executor prefetches the first unit ahead even when it is larger than the bucket
          // (core/zero3_fetch_plan.h: a unit larger than the bucket would otherwise never overlap); DeepSpeed's
          // per-module fetches (and the ZeRO paper's schedule) are modelled by the bucket alone.
          const bool first_unit_ahead = executor_ && ahead == elements && zero_.prefetch_bucket_size > 0;
          if ((ahead > zero_.prefetch_bucket_size && !first_unit_ahead) || live > zero_.max_live_parameters) break;
          if (next >= issued) {
            const std::int32_t next_layer = layer_at(forward, next);
            gather_task_[next_index] = fetch(next_layer, micro, with_start_of(first));
            issued = next + 1;
          }
        }
        // Released after use (forward: after the layer's forward unless kept for its backward; backward: after its
        // weight gradient).
        if (!(forward && kept_[index])) {
          if (gathered_bytes_[index] > 0) {
            timeline_.free_at_finish(consumer, gathered_bytes_[index], MemoryUse::gathered_params);
          }
          gathered_bytes_[index] = 0;
        }
      }

      // (DeepSpeed paths that reduce after the whole backward pass do it in reduce_after_backward.)
      if (!forward && reduce_this_micro_step_ && !(ds_ && in_.path.reduces_after_backward)) {
        // zeroplan's executor cuts the first block and the embeddings into buckets of their own
        // (exec/zero/zero_partition.h): what backward wrote before them is reduced first.
        if (executor_ && bucket_elements_ > 0 && closes_executor_bucket(index))
          reduce_bucket(layer, micro, last_gradient_);
        add_gradients(layer, micro, consumer, layers_[index].params);
      }
      previous_compute = consumer;
      last_compute_ = consumer;
    }
  }

  // --- stage 3 parameter fetch -----------------------------------------------------------------------------

  // `issued_by`: DeepSpeed's hook that issues the fetch on the host (none for a prefetch or another engine).
  TaskId fetch(std::int32_t layer, std::int32_t micro, Dependency when, Dependency issued_by = {}) {
    const auto index = static_cast<std::size_t>(layer);
    const std::int64_t elements = gather_elements_[index];
    if (elements <= 0) return kNoTask;
    const Bytes full_bytes = elements * e_;
    const Bytes partition_bytes = ceil_div(full_bytes, n_);
    Dependency ready = when;
    Dependency issued = issued_by;  // applies to the first task of the fetch
    TaskId allocating = kNoTask;
    if (zero_.offload_param != OffloadDevice::none) {
      if (zero_.offload_param == OffloadDevice::nvme) {
        const TaskId read = timeline_.add(Resource::nvme, TaskKind::nvme_read,
                                          static_cast<double>(partition_bytes) / in_.nvme_read_bandwidth,
                                          {ready, issued}, layer, micro, partition_bytes);
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
      // DeepSpeed (and the ZeRO paper's schedule): one coalesced all-gather per module (gathered_module_count),
      // the layer's bytes split evenly over them. Our executor: one NCCL group per gather unit (exec/zero/zero_engine.cpp gather_unit), which
      // NCCL runs as one collective of the unit's bytes.
      const std::int64_t modules =
          executor_ ? 1 : std::max<std::int64_t>(1, gathered_module_count(layers_[index], zero_));
      const Bytes per_module = full_bytes / modules;
      for (std::int64_t m = 0; m < modules; ++m) {
        const Bytes bytes = m + 1 == modules ? full_bytes - per_module * (modules - 1) : per_module;
        // Our executor's gathers (and the ZeRO paper schedule's) run beside the passes' kernels (prefetch), at the
        // link's rate beside compute; DeepSpeed's measured stage-3 rows are matched with the isolated rate and its
        // host hooks (sim/deepspeed_step.h).
        const double seconds = ds_ ? in_.collectives->seconds(CollectiveKind::all_gather, bytes)
                                   : in_.collectives->seconds_beside_compute(CollectiveKind::all_gather, bytes);
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

  // --- gradient reduction ----------------------------------------------------------------------------------

  // Whether layer `index` starts a bucket of the executor's own (the lowest transformer block, the embeddings).
  bool closes_executor_bucket(std::size_t index) const {
    if (layers_[index].kind == "embedding") return true;
    if (layers_[index].kind != "transformer_block") return false;
    for (std::size_t i = 0; i < index; ++i)
      if (layers_[i].kind == "transformer_block") return false;
    return true;
  }

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
    if (ds_) {
      const std::int64_t elements = bucket_elements_;
      bucket_elements_ = 0;
      deepspeed_reduction(elements, layer, micro, produced_by, /*after_backward=*/false);
      return;
    }
    const std::int64_t elements = bucket_elements_;
    const Bytes bytes = elements * grad_e_;
    bucket_elements_ = 0;
    TaskId reduced = produced_by;
    if (n_ > 1) {
      // Stage 0 all-reduces (every rank keeps every gradient); stages 1-3 reduce-scatter to the owners.
      const CollectiveKind kind = zero_.stage == 0 ? CollectiveKind::all_reduce : CollectiveKind::reduce_scatter;
      // With overlap_comm it runs beside the backward kernels, at the link's rate beside compute.
      const double seconds = (zero_.overlap_comm ? in_.collectives->seconds_beside_compute(kind, bytes)
                                                 : in_.collectives->seconds(kind, bytes)) +
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

  // zeroplan's executor: the conversions on the communication lane around one bucket's reduction when its
  // gradients are held in another precision than they are reduced in (exec/zero/zero_engine.cpp reduce_bucket),
  // and the reduced chunk's conversion or addition into an fp32 gradient partition (stages 2-3).
  double executor_reduction_copy_seconds(std::int64_t elements, std::int32_t micro) const {
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

  // --- DeepSpeed's engine: host hooks, gradient buffers and its reductions --------------------------------

  // The optimizer step's fp32 gradients and Adam temporaries, and what it releases: the .grad of stage 0 and
  // BF16_Optimizer, the stage 1-2 gradient partition.
  void step_buffers(TaskId step) {
    const TransientGpuBytes& t = in_.transient;
    timeline_.set_memory(step, t.step_grads, t.step_grads, MemoryUse::grads);
    timeline_.set_memory(step, t.step_temporaries, t.step_temporaries, MemoryUse::optimizer_temporaries);
    if (backward_grads_live_ > 0) timeline_.free_at_finish(step, backward_grads_live_, MemoryUse::grads);
    if (grad_partition_live_ > 0) timeline_.free_at_finish(step, grad_partition_live_, MemoryUse::grads);
    backward_grads_live_ = grad_partition_live_ = 0;
  }

  // The layer's hooks on the host (host_python): stage 3's fetch/release/prefetch per module and pass
  // (parameter_offload.py pre/post forward and backward hooks, one per module and one for the layer's own
  // module), the gradient hooks per parameter tensor in backward (stage_1_and_2.py grad_handling_hook). The host
  // runs ahead of the GPU within a micro-step and waits for it between micro-steps (the loss is read back).
  // With the optimizer on the CPU at stages 1-2 the gradient hook copies the tensor's partition to the host in
  // fp32 (copy_grads_in_partition: .float(), then copy_ into the pinned fp32 gradient partition) and checks its
  // norm and overflow, reading each back (.item(), a device synchronisation per check): the host waits for the
  // GPU at every tensor, so the hooks follow the previous layer's compute and its own copies. Measured on one H100
  // (bench/deepspeed/results-pending/, ds_peer.py --profile): backward 463.8 ms against 130.0 without offload, of
  // which 117.2 ms device-to-host copies; 580 AccumulateGrad hooks. Micro-steps before the accumulation boundary
  // take another path (async_accumulate_grad_in_cpu_via_gpu, a copy each way per tensor) that is not modelled:
  // they are timed without these hooks.
  //
  // Stage 3 (DeepSpeed 0.19.8, host costs per call from the cluster description): every module of the layer (and
  // the layer's own module) runs the parameter coordinator's fetch before and its release after it, in both passes
  // (parameter_offload.py _pre_forward_module_hook / _post_forward_module_hook call
  // partitioned_param_coordinator.py fetch_sub_module / release_sub_module; in backward,
  // PreBackwardFunctionForModule.backward and PostBackwardFunctionModule.backward call them again); in forward the
  // hooks also apply those two autograd Functions to the module's inputs and outputs. Under zero.Init each
  // F.linear call runs zero/linear.py LinearFunctionForZeroStage3, a Python autograd Function, forward and
  // backward. In backward each parameter tensor's AccumulateGrad runs stage3.py reduce_partition_and_remove_grads
  // (-> __add_grad_to_ipg_bucket: the copy into the bucket on the reduce stream; a full bucket reduced and
  // partitioned by __reduce_and_partition_ipg_grads -> partition_grads inside the hook that fills it); with the
  // optimizer offloaded partition_grads also copies each partition to the host buffer and back, takes its norm and
  // copies it to the fp32 gradient (asynchronous copies, on the reduce stream). At the end of the backward pass
  // independent_gradient_partition_epilogue waits for the reduce stream (reduce_and_partition_stream.synchronize),
  // so the next micro-step's hooks start after the last reduction. The GPU is left waiting for the host whenever
  // these cost more than the layer's kernels.
  TaskId host_hooks(bool forward, std::int32_t layer, std::int32_t micro, bool first_of_pass,
                    TaskId previous_compute) {
    const auto index = static_cast<std::size_t>(layer);
    double seconds = 0.0;
    const bool stage3 = in_.path.wrapper == DeepSpeedOptimizerWrapper::zero_3;
    if (zero_.stage == 3) {
      const double modules = static_cast<double>(layers_[index].module_calls);
      seconds += modules * in_.module_hook_seconds;
      if (forward) seconds += modules * in_.forward_module_function_seconds;
      if (zero_.zero_init && index < in_.linear_calls_per_layer.size())
        seconds += static_cast<double>(in_.linear_calls_per_layer[index]) *
                   (forward ? in_.linear_forward_seconds : in_.linear_backward_seconds);
    }
    if (!forward && stage3 && index < in_.tensors_per_layer.size()) {
      const double tensors = static_cast<double>(in_.tensors_per_layer[index]);
      seconds += tensors * in_.stage3_gradient_hook_seconds;
      // stage3.py partition_grads: the offloaded path's extra work per tensor (_offload_grad_partition_at_boundary:
      // the partition's norm and its fp32 copy to the host gradient) runs at the accumulation boundary only; the
      // micro-steps before it keep accumulating into the gradient partition buffer.
      if (zero_.offload_optimizer == OffloadDevice::cpu && boundary_)
        seconds += tensors * in_.stage3_offload_gradient_hook_seconds;
    }
    const bool offload_hooks = !forward && in_.path.wrapper == DeepSpeedOptimizerWrapper::zero_1_2 &&
                               zero_.offload_optimizer == OffloadDevice::cpu && boundary_;
    // Stages 1-2 register a gradient hook on every parameter (stage_1_and_2.py __init__ ->
    // create_gradient_handling_hooks, with partition_gradients, overlap_comm, contiguous_gradients or a gradient
    // accumulation dtype other than the model's) and run it every micro-step (grad_handling_hook ->
    // process_gradients -> setup_buckets). It copies the gradient into the reduce bucket where
    // reduce_ready_partitions_and_remove_grads reduces: always at stage 2 (partition_gradients), at the
    // accumulation boundary with overlap_comm at stage 1; otherwise it only keeps the bookkeeping.
    const bool gradient_hooks = zero_.stage == 2 || zero_.overlap_comm || zero_.contiguous_gradients ||
                                in_.path.accumulation_bytes != in_.path.model_bytes;
    const bool hook_reduces = zero_.stage == 2 || (zero_.overlap_comm && boundary_);
    if (!forward && in_.path.wrapper == DeepSpeedOptimizerWrapper::zero_1_2 &&
        index < in_.tensors_per_layer.size()) {
      const double tensors = static_cast<double>(in_.tensors_per_layer[index]);
      if (gradient_hooks)
        seconds += tensors * (hook_reduces ? in_.gradient_hook_seconds : in_.bookkeeping_gradient_hook_seconds);
      if (offload_hooks) {
        const double fp32_grad_bytes = 4.0 * static_cast<double>(ceil_div(layers_[index].params, n_));
        seconds += tensors * in_.offload_gradient_hook_seconds + fp32_grad_bytes / in_.pcie_bandwidth;
      }
    }
    if (seconds <= 0.0) return kNoTask;
    const Dependency sync = (forward && first_of_pass) || offload_hooks
                                ? after(offload_hooks ? previous_compute : last_compute_)
                                : Dependency{};
    // Stage 3: the previous micro-step's backward ended waiting for its reductions (the epilogue's synchronize).
    const bool after_epilogue = forward && first_of_pass && stage3;
    return timeline_.add(Resource::host_python, TaskKind::engine_hooks, seconds,
                         {sync, after(after_epilogue ? last_reduction_ : kNoTask),
                          after(after_epilogue ? last_download_ : kNoTask)},
                         layer, micro);
  }

  // Over a layer's backward: its .grad kept (first micro-step: later ones accumulate into the same tensors), and
  // the reduce buckets allocated by the micro-step's first gradient hook (stage_1_and_2.py setup_buckets; stage 1
  // keeps them across micro-steps to the boundary's epilogue).
  void backward_buffers(TaskId first, TaskId produced, std::size_t index, std::int32_t micro) {
    const TransientGpuBytes& t = in_.transient;
    if (micro == 0 && t.backward_grads > 0) {
      const Bytes bytes = static_cast<Bytes>(static_cast<double>(t.backward_grads) *
                                             static_cast<double>(layers_[index].params) /
                                             static_cast<double>(total_params_));
      timeline_.set_memory(produced, bytes, 0, MemoryUse::grads);
      backward_grads_live_ += bytes;
    }
    // The first gradient hook runs once the first layer's weight gradients exist: the buckets come into use with
    // the next layer's backward (or the reduction, for a one-layer model).
    if (buckets_pending_ && t.backward_buckets > 0 && buckets_live_ == 0) {
      timeline_.set_memory(first, t.backward_buckets, 0, MemoryUse::gradient_buckets);
      buckets_live_ = t.backward_buckets;
      buckets_pending_ = false;
    }
    if (micro_first_backward_) buckets_pending_ = true;
    micro_first_backward_ = false;
  }

  // Bytes read and written per gradient element by one reduction's copies, before and after the collective.
  struct CopyBytes {
    double before = 0.0, after = 0.0;
  };
  CopyBytes reduction_copies() const {
    const DeepSpeedEnginePath& p = in_.path;
    const double c = p.communication_bytes;
    const double n = static_cast<double>(n_);
    CopyBytes bytes;
    switch (p.wrapper) {
      case DeepSpeedOptimizerWrapper::plain:
      case DeepSpeedOptimizerWrapper::fp16_fused:
      case DeepSpeedOptimizerWrapper::fp16_unfused:
      case DeepSpeedOptimizerWrapper::bf16_optimizer: {
        // engine.py allreduce_and_copy: flatten the bucket (read + write), the communication dtype copy and back
        // when it differs, unflatten copies back into every .grad.
        const double h = p.wrapper == DeepSpeedOptimizerWrapper::bf16_optimizer ? p.accumulation_bytes : p.model_bytes;
        bytes.before = 2.0 * h + (c != h ? h + c : 0.0);
        bytes.after = 2.0 * h + (c != h ? c + h : 0.0);
        break;
      }
      case DeepSpeedOptimizerWrapper::zero_1_2: {
        // Each .grad copied into the bucket (reduce_independent_p_g_buckets_and_remove_grads), flattened
        // (allreduce_bucket); the result copied back into the bucket and the rank's part into its partition.
        const double b = zero_.stage == 1 && p.accumulation_bytes != p.model_bytes ? p.accumulation_bytes : p.model_bytes;
        bytes.before = 4.0 * b + (c != b ? b + c : 0.0);
        bytes.after = 2.0 * b + 2.0 * b / n;
        break;
      }
      case DeepSpeedOptimizerWrapper::zero_3:
        // .grad copied into the bucket on the reduce stream, torch.cat of the chunks (reduce_scatter_coalesced),
        // the rank's chunk added to its gradient partition.
        bytes.before = 2.0 * p.model_bytes + 2.0 * c;
        bytes.after = (c + p.accumulation_bytes + p.accumulation_bytes) / n;
        break;
    }
    return bytes;
  }

  // Copies of `bytes` in `kernels` launches (DeepSpeed copies gradients tensor by tensor).
  double copy_seconds(double bytes, double kernels) const {
    return bytes / in_.streaming_bandwidth + kernels * in_.kernel_overhead_seconds;
  }

  // One DeepSpeed reduction of `elements` gradients: its copies and collective, on the compute stream when it
  // runs there (after backward, or in the hooks without overlap_comm) or on the reduction stream.
  void deepspeed_reduction(std::int64_t elements, std::int32_t layer, std::int32_t micro, TaskId produced_by,
                           bool after_backward) {
    if (elements <= 0) return;
    const DeepSpeedEnginePath& p = in_.path;
    const CopyBytes copies = reduction_copies();
    const double count = static_cast<double>(elements);
    const Bytes wire = elements * p.communication_bytes;
    const std::int64_t full = std::max<std::int64_t>(1, std::min(p.reduction_bucket_elements, total_params_));
    const auto copy = static_cast<Bytes>(static_cast<double>(in_.transient.reduction_copy) *
                                         std::min(1.0, count / static_cast<double>(full)));
    const TaskKind kind = p.gradient_collective == CollectiveKind::all_reduce ? TaskKind::all_reduce
                                                                              : TaskKind::reduce_scatter;
    // Tensors in the bucket: each is copied in (ZeRO's buckets) and back (every path) one launch apiece.
    const double tensors = std::max(1.0, static_cast<double>(total_tensors()) * count / static_cast<double>(total_params_));
    const double launches_before = p.wrapper == DeepSpeedOptimizerWrapper::zero_1_2 ||
                                           p.wrapper == DeepSpeedOptimizerWrapper::zero_3
                                       ? tensors + 1.0
                                       : 1.0;
    const double launches_after = tensors + 1.0;
    const double collective = n_ > 1 ? in_.collectives->seconds(p.gradient_collective, wire) : 0.0;
    last_gradient_ = produced_by;
    // A reduction issued after the backward pass (engine.py allreduce_gradients, stage_1_and_2.py reduce_gradients
    // or the epilogue's last bucket, layer -1): the host issues its per-tensor copies one call at a time once the
    // backward pass is done (deepspeed_tensor_ops); the copies back wait for it. Those inside the backward hooks
    // are issued while the GPU computes the backward pass.
    const double host_ops = in_.tensor_op_seconds > 0.0 && (after_backward || layer < 0)
                                ? tensors * deepspeed_tensor_ops(p, training_).reduction * in_.tensor_op_seconds
                                : 0.0;
    const TaskId issued = host_ops > 0.0 ? timeline_.add(Resource::host_python, TaskKind::engine_hooks, host_ops,
                                                         {after(produced_by), after(compute_barrier_)}, layer, micro)
                                         : kNoTask;
    TaskId reduced = kNoTask;
    if (after_backward || !zero_.overlap_comm) {
      const TaskId before = timeline_.add(Resource::gpu_compute, TaskKind::gradient_copy,
                                          copy_seconds(count * copies.before, launches_before),
                                          {after(produced_by), after(compute_barrier_)}, layer, micro);
      timeline_.set_memory(before, copy, 0, MemoryUse::gradient_buckets);
      TaskId last = before;
      if (n_ > 1) last = timeline_.add(Resource::nccl, kind, collective, {after(before)}, layer, micro, wire);
      reduced = timeline_.add(Resource::gpu_compute, TaskKind::gradient_copy,
                              copy_seconds(count * copies.after, launches_after),
                              {after(last), after(issued)}, layer, micro);
      timeline_.free_at_finish(reduced, copy, MemoryUse::gradient_buckets);
      compute_barrier_ = reduced;
    } else {
      // overlap_comm: the reduction stream copies and reduces in order beside the backward pass (stage 3 with the
      // optimizer offloaded: after the previous bucket's copies to the host, on the same stream).
      const bool stage3_offload = p.wrapper == DeepSpeedOptimizerWrapper::zero_3 &&
                                  zero_.offload_optimizer == OffloadDevice::cpu;
      reduced = timeline_.add(Resource::nccl, n_ > 1 ? kind : TaskKind::gradient_copy,
                              collective + copy_seconds(count * (copies.before + copies.after),
                                                        launches_before + launches_after),
                              {after(produced_by), after(stage3_offload ? last_download_ : kNoTask), after(issued)},
                              layer, micro, n_ > 1 ? wire : 0);
      timeline_.set_memory(reduced, copy, copy, MemoryUse::gradient_buckets);
    }
    if (p.wrapper == DeepSpeedOptimizerWrapper::zero_1_2 && in_.transient.grad_partition > 0 &&
        grad_partition_live_ == 0) {
      timeline_.set_memory(reduced, in_.transient.grad_partition, 0, MemoryUse::grads);
      grad_partition_live_ = in_.transient.grad_partition;
    }
    last_reduction_ = reduced;
    if (p.wrapper == DeepSpeedOptimizerWrapper::zero_3 && zero_.offload_optimizer == OffloadDevice::cpu) {
      stage3_offload_copies(elements, layer, micro, reduced);
      return;
    }
    if (zero_.offload_optimizer != OffloadDevice::none) {
      // This rank's share of the reduced bucket goes to the host (stage_1_and_2.py
      // async_inplace_copy_grad_to_fp32_buffer_from_gpu; stage3.py partition_grads with offload).
      const Bytes partition_bytes = ceil_div(elements * p.model_bytes, n_);
      last_download_ = timeline_.add(Resource::device_to_host, TaskKind::grad_download,
                                     static_cast<double>(partition_bytes) / in_.pcie_bandwidth, {after(reduced)},
                                     layer, micro, partition_bytes);
    }
  }

  // Stage 3 with the optimizer on the CPU (stage3.py partition_grads, on the reduce stream after the bucket's
  // reduce-scatter): each gradient partition is copied into grad_partitions_flat_buffer, which lives in (pinned)
  // host memory, and back to the device (grad_buffer.to(device): later micro-steps add the new partition there
  // and copy the sum back to the host); at the accumulation boundary _offload_grad_partition_at_boundary takes
  // its norm and copies it in fp32 into the sub-group's host gradient (fp32_partitioned_groups_flat[i].grad).
  // All on one CUDA stream: the copies of a bucket follow each other and the next bucket's reduction.
  void stage3_offload_copies(std::int64_t elements, std::int32_t layer, std::int32_t micro, TaskId reduced) {
    const std::int64_t partition = ceil_div(elements, n_);
    const Bytes grad_bytes = partition * in_.path.accumulation_bytes;
    TaskId down = timeline_.add(Resource::device_to_host, TaskKind::grad_download,
                                static_cast<double>(grad_bytes) / in_.pcie_bandwidth,
                                {after(reduced), after(last_download_)}, layer, micro, grad_bytes);
    TaskId last = timeline_.add(Resource::host_to_device, TaskKind::gradient_copy,
                                static_cast<double>(grad_bytes) / in_.pcie_bandwidth, {after(down)}, layer, micro,
                                grad_bytes);
    if (boundary_) {
      const Bytes fp32_bytes = partition * 4;
      last = timeline_.add(Resource::device_to_host, TaskKind::grad_download,
                           static_cast<double>(fp32_bytes) / in_.pcie_bandwidth, {after(last)}, layer, micro,
                           fp32_bytes);
    }
    last_download_ = last;
  }

  // Stage 0, BF16_Optimizer and stage 1 without overlap_comm: every gradient reduced after the backward pass, in
  // buckets of the path's size (engine.py buffered_allreduce_fallback / stage_1_and_2.py reduce_gradients).
  void reduce_after_backward(std::int32_t micro) {
    if (in_.path.wrapper == DeepSpeedOptimizerWrapper::bf16_optimizer) {
      // bf16_optimizer.py backward_epilogue -> update_hp_grads: each bf16 .grad added into the fp32 buffer, one
      // add per parameter tensor.
      const double tensors = static_cast<double>(total_tensors());
      const double seconds = static_cast<double>(total_params_) * (in_.path.model_bytes + 8.0) / in_.streaming_bandwidth +
                             tensors * in_.kernel_overhead_seconds;
      compute_barrier_ = timeline_.add(Resource::gpu_compute, TaskKind::gradient_copy, seconds,
                                       {after(last_backward_), after(compute_barrier_)}, -1, micro);
    }
    const std::int64_t bucket = std::max<std::int64_t>(1, in_.path.reduction_bucket_elements);
    for (std::int64_t first = 0; first < total_params_; first += bucket) {
      deepspeed_reduction(std::min(bucket, total_params_ - first), -1, micro, last_backward_,
                          /*after_backward=*/true);
    }
  }

  // What a micro-step's end releases: stage 1-2 buckets at the epilogue (stage 2 every micro-step, stage 1 at the
  // boundary), and stage 1's .grad once reduced into the partition (_clear_param_grad_only).
  void end_of_micro_step_buffers(bool boundary) {
    const TaskId end = last_reduction_ != kNoTask ? last_reduction_ : last_backward_;
    if (buckets_live_ > 0 && (zero_.stage == 2 || boundary)) {
      timeline_.free_at_finish(end, buckets_live_, MemoryUse::gradient_buckets);
      buckets_live_ = 0;
    }
    if (boundary && in_.path.wrapper == DeepSpeedOptimizerWrapper::zero_1_2 && backward_grads_live_ > 0) {
      timeline_.free_at_finish(end, backward_grads_live_, MemoryUse::grads);
      backward_grads_live_ = 0;
    }
  }

  std::int64_t total_tensors() const { return total_tensors_; }

  // DeepSpeed paths whose gradients build up in the parameters' .grad over the micro-steps: stage 0's wrappers
  // (fp16/unfused_optimizer.py, fused_optimizer.py: the engine reduces them at the boundary) and stage 1 in the
  // model's dtype (stage_1_and_2.py reduces only at the boundary; with another accumulation dtype it adds into
  // grad_accum instead, _fill_param_grad_accum_attribute). BF16_Optimizer moves them into its fp32 buffer every
  // micro-step (backward_epilogue), stage 2 into its partition.
  bool accumulates_in_grad() const {
    const DeepSpeedEnginePath& p = in_.path;
    switch (p.wrapper) {
      case DeepSpeedOptimizerWrapper::plain:
      case DeepSpeedOptimizerWrapper::fp16_fused:
      case DeepSpeedOptimizerWrapper::fp16_unfused:
        return true;
      case DeepSpeedOptimizerWrapper::zero_1_2:
        return zero_.stage == 1 && p.accumulation_bytes == p.model_bytes;
      case DeepSpeedOptimizerWrapper::bf16_optimizer:
      case DeepSpeedOptimizerWrapper::zero_3:
        return false;
    }
    return false;
  }

  // --- optimizer step and the parameter all-gather after it ----------------------------------------------

  void optimizer_step() {
    const std::int64_t params = in_.model->params();
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
                    in_.optimizer_bandwidth;
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
        if (zero_.offload_param == OffloadDevice::nvme) {
          updated = timeline_.add(Resource::nvme, TaskKind::nvme_write,
                                  static_cast<double>(param_bytes) / in_.nvme_write_bandwidth, {after(updated)}, -1,
                                  micro, param_bytes);
        }
      }
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
      const double host_bytes_per_second = 30.0 * in_.cpu_optimizer_params_per_second;
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
  }

  // DeepSpeed stage 3 with the optimizer on the CPU (stage3.py step), all on the training process's thread:
  // - _get_norm_groups -> complete_grad_norm_calculation_for_cpu_offload: each tensor's norm squared and added up on
  //   the device (two small operations the host issues per tensor), then total_norm.cpu(): the host waits for the
  //   GPU, so for every gradient's copy to the host;
  // - per sub-group (sub_group_size elements): unscale_and_clip_grads multiplies the fp32 gradient on the CPU (read
  //   and write 4 bytes), DeepSpeedCPUAdam steps it, and _reassign_or_swap_out_partitioned_parameters copies the
  //   updated fp32 partition into the 16-bit one: with the parameters on the GPU,
  //   fp16_partitioned_groups_flat[i].data.copy_(fp32) converts on the CPU into a new pageable tensor (ATen's
  //   copy_ across devices with a dtype change converts on the source device first) and copies that from pageable
  //   memory, the thread waiting for it; with the parameters offloaded the 16-bit partition is host memory and the
  //   cast is the whole copy. Nothing overlaps: the next sub-group starts when the copy returns.
  // The CPU passes stream memory as the CPU Adam does (30 bytes per parameter update at its rate, as for stages
  // 1-2 above); the pageable buffer fills at fresh_pageable_write_bandwidth where the cluster gives it.
  TaskId deepspeed_stage3_offloaded_update(std::int64_t partition, std::int32_t micro) {
    const double host_bytes_per_second = 30.0 * in_.cpu_optimizer_params_per_second;
    const bool params_on_host = zero_.offload_param != OffloadDevice::none;
    TaskId previous = timeline_.add(Resource::host_python, TaskKind::engine_hooks,
                                    static_cast<double>(total_tensors()) * in_.step_tensor_seconds,
                                    {after(last_download_), after(last_reduction_), after(last_gradient_)}, -1, micro);
    const std::int64_t sub_group = std::max<std::int64_t>(1, zero_.sub_group_size);
    for (std::int64_t first = 0; first < partition; first += sub_group) {
      const auto elements = static_cast<double>(std::min(sub_group, partition - first));
      const TaskId unscale = timeline_.add(Resource::host_cpu, TaskKind::cpu_optimizer_step,
                                           8.0 * elements / host_bytes_per_second, {after(previous)}, -1, micro);
      const TaskId step = timeline_.add(Resource::host_cpu, TaskKind::cpu_optimizer_step,
                                        elements / in_.cpu_optimizer_params_per_second, {after(unscale)}, -1, micro);
      if (first == 0) step_buffers(step);
      const double e = static_cast<double>(e_);
      const double cast_seconds =
          !params_on_host && in_.fresh_pageable_write_bandwidth > 0.0
              ? e * elements / in_.fresh_pageable_write_bandwidth
              : (4.0 + e) * elements / host_bytes_per_second;
      previous = timeline_.add(Resource::host_cpu, TaskKind::cpu_optimizer_step, cast_seconds, {after(step)}, -1,
                               micro);
      if (!params_on_host) {
        const auto bytes = static_cast<Bytes>(e * elements);
        const double pageable = in_.pageable_pcie_bandwidth > 0.0 ? in_.pageable_pcie_bandwidth : in_.pcie_bandwidth;
        previous = timeline_.add(Resource::host_to_device, TaskKind::param_upload,
                                 static_cast<double>(bytes) / pageable, {after(previous)}, -1, micro, bytes);
      }
    }
    last_update_ = previous;
    return previous;
  }

  // zeroplan's executor's ZeRO-Offload step (exec/zero/zero_engine.cpp finish_step and offloaded_update): the
  // compute lane waits for every reduction and sums the squares of the gradient partition (one read of it); the
  // host reads the norm, then updates the partition piece by piece with the CPU AdamW, each piece once its
  // gradients are on the host (its bucket's copy), and copies each updated 16-bit piece to the device while it
  // updates the next. The step ends when the last piece has arrived.
  TaskId executor_offloaded_update(std::int64_t partition, std::int32_t micro) {
    const TaskId norm = timeline_.add(Resource::gpu_compute, TaskKind::optimizer_step,
                                      static_cast<double>(partition * e_) / in_.optimizer_bandwidth,
                                      {after(last_reduction_), after(last_gradient_), after(compute_barrier_)}, -1,
                                      micro);
    const std::int64_t piece = std::max<std::int64_t>(1, std::min(kExecutorOffloadPieceElements, zero_.sub_group_size));
    std::size_t arrived = 0;  // downloads_[arrived] holds the piece's last element
    TaskId updated = norm;
    for (std::int64_t first = 0; first < partition; first += piece) {
      const std::int64_t elements = std::min(piece, partition - first);
      while (arrived + 1 < downloads_.size() && downloads_[arrived].end_elements < first + elements) ++arrived;
      const TaskId download = downloads_.empty() ? last_download_ : downloads_[arrived].task;
      const TaskId step = timeline_.add(Resource::host_cpu, TaskKind::cpu_optimizer_step,
                                        static_cast<double>(elements) / in_.cpu_optimizer_params_per_second,
                                        {after(norm), after(download)}, -1, micro);
      const Bytes param_bytes = elements * e_;
      updated = timeline_.add(Resource::host_to_device, TaskKind::param_upload,
                              static_cast<double>(param_bytes) / in_.pcie_bandwidth, {after(step)}, -1, micro,
                              param_bytes);
    }
    last_update_ = updated;
    return updated;
  }

  const StepScheduleInputs& in_;
  Timeline& timeline_;
  const TrainingConfig& training_;
  const ZeroConfig& zero_;
  const std::vector<LayerDescription>& layers_;
  const std::vector<LayerCompute>& compute_;
  const int n_;
  const Bytes e_;
  const Bytes grad_e_;  // bytes of a gradient element on the wire (communication_data_type)
  const Bytes accumulation_e_;  // bytes of an accumulated gradient element (data_types.grad_accum_dtype)

  std::vector<std::int64_t> gather_elements_;  // per layer: stage-3 elements all-gathered (all but persistent)
  std::vector<Bytes> gathered_bytes_;          // per layer: gathered bytes awaiting release
  std::vector<TaskId> gather_task_;            // per layer: the fetch the layer's compute waits for
  std::vector<bool> kept_;                     // per layer: DeepSpeed keeps it gathered from forward to backward

  const bool ds_;                              // DeepSpeed's engine (the paths of deepspeed_engine.h)
  const bool executor_;                        // zeroplan's executor (exec/zero/zero_engine.cpp)
  std::int64_t total_params_ = 1;
  std::int64_t total_tensors_ = 1;             // parameter tensors of the model (DeepSpeed's per-tensor work)
  bool micro_first_backward_ = true;           // the micro-step's first gradient hook has not run yet
  bool buckets_pending_ = false;               // the buckets come into use with the next backward task
  Bytes backward_grads_live_ = 0;              // DeepSpeed transient buffers allocated and not yet freed
  Bytes buckets_live_ = 0;
  Bytes grad_partition_live_ = 0;

  bool reduce_this_micro_step_ = false;
  bool boundary_ = false;                      // the micro-step is the accumulation boundary
  struct Download {
    std::int64_t end_elements;  // partition elements on the host once this copy is done
    TaskId task;
  };
  std::vector<Download> downloads_;            // zeroplan's executor: the boundary's gradient copies, in order
  std::int64_t downloaded_elements_ = 0;
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
