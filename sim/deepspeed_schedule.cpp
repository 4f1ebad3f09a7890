// DeepSpeed's engine in the step schedule (sim/step_builder.h): the host hooks of its Python, the gradient buffers
// it allocates and frees, its reductions with their copies, and stage 3's update with the optimizer on the CPU,
// each following the DeepSpeed 0.19.8 code path its comment names (sim/deepspeed_engine.h picks the path).
#include <algorithm>
#include <cmath>

#include "sim/step_builder.h"

namespace zeroplan::schedule_internal {

// The optimizer step's fp32 gradients and Adam temporaries, and what it releases: the .grad of stage 0 and
// BF16_Optimizer, the stage 1-2 gradient partition. The flattened gradients in their own dtype (stage_1_and_2.py step:
// flatten(...).to(fp32); stage3.py _prepare_fp32_grad_for_sub_group: torch.cat(...).to(fp32)) are dropped once
// converted, before the optimizer makes its temporaries, so over the step the two take one peak, the larger: a
// step counted with both at once put TinyLlama's checkpointed stage 3, whose allocated peak is the step's, 1.75 GiB
// (one H200) and 0.92 GiB (two) over the measured 24.92 and 14.80 GiB.
void StepBuilder::step_buffers(TaskId step) {
  const TransientGpuBytes& t = in_.transient;
  const Bytes fp32_grads = t.step_grads - t.step_flat_copy;
  const Bytes step_peak_rest = std::max(t.step_flat_copy, t.step_temporaries);
  timeline_.set_memory(step, fp32_grads, fp32_grads, MemoryUse::grads);
  timeline_.set_memory(step, step_peak_rest, step_peak_rest, MemoryUse::optimizer_temporaries);
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
// which 117.2 ms device-to-host copies; 580 AccumulateGrad hooks. With gradient accumulation every micro-step's
// hooks also keep each tensor's gradient in a pinned host buffer between micro-steps
// (async_accumulate_grad_in_cpu_via_gpu, below), waiting for the GPU at every tensor as well.
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
TaskId StepBuilder::host_hooks(bool forward, std::int32_t layer, std::int32_t micro, bool first_of_pass,
                               TaskId previous_compute) {
  const auto index = static_cast<std::size_t>(layer);
  double seconds = 0.0;
  const bool stage3 = in_.path.wrapper == DeepSpeedOptimizerWrapper::zero_3;
  // Under zero.Init at stage 3 each F.linear of the layer is zero/linear.py's LinearFunctionForZeroStage3.
  const double zero_init_linears = zero_.stage == 3 && zero_.zero_init && index < in_.linear_calls_per_layer.size()
                                       ? static_cast<double>(in_.linear_calls_per_layer[index])
                                       : 0.0;
  const double modules = static_cast<double>(layers_[index].module_calls);
  // Stage 3's module hooks and zero.Init's linears for one pass over the layer's modules, and eager PyTorch's
  // issue of the modules' operators from Python (and of its autograd nodes in backward): the GPU's kernels for a
  // small convolution, or a small transformer block's, finish sooner than the host issues them. zero.Init's
  // F.linear calls are timed with their GEMM launches (linear_forward_seconds, linear_backward_seconds), so they
  // are not counted twice.
  const auto module_pass_seconds = [&](bool forward_pass) {
    double pass = 0.0;
    if (zero_.stage == 3) {
      pass += modules * in_.module_hook_seconds;
      if (forward_pass) pass += modules * in_.forward_module_function_seconds;
      pass += zero_init_linears * (forward_pass ? in_.linear_forward_seconds : in_.linear_backward_seconds);
    }
    return pass + std::max(0.0, modules - zero_init_linears) *
                      (forward_pass ? in_.eager_forward_module_seconds : in_.eager_backward_module_seconds);
  };
  seconds += module_pass_seconds(forward);
  // Full checkpointing recomputes the layer's forward inside its backward (torch.utils.checkpoint, which
  // transformers' gradient_checkpointing_enable wraps each decoder layer in; DeepSpeed's own
  // checkpointing.checkpoint alike): its modules run again, with their stage-3 fetch and release hooks and their
  // Python, before the backward's own. Measured (bench/deepspeed/results/, TinyLlama-1.1B stage 3 on one H200):
  // 444 ms a step with transformers' gradient checkpointing against 324 without.
  if (!forward && training_.checkpointing == Checkpointing::full) seconds += module_pass_seconds(true);
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
  const bool accumulation_offload_hooks = !forward && in_.path.wrapper == DeepSpeedOptimizerWrapper::zero_1_2 &&
                                          zero_.offload_optimizer == OffloadDevice::cpu && hook_reduces &&
                                          training_.grad_accum > 1 &&
                                          in_.path.accumulation_bytes == in_.path.model_bytes;
  if (!forward && in_.path.wrapper == DeepSpeedOptimizerWrapper::zero_1_2 &&
      index < in_.tensors_per_layer.size()) {
    const double tensors = static_cast<double>(in_.tensors_per_layer[index]);
    if (gradient_hooks)
      seconds += tensors * (hook_reduces ? in_.gradient_hook_seconds : in_.bookkeeping_gradient_hook_seconds);
    if (offload_hooks) {
      const double fp32_grad_bytes = 4.0 * static_cast<double>(ceil_div(trainable_params(index), n_));
      seconds += tensors * in_.offload_gradient_hook_seconds + fp32_grad_bytes / in_.pcie_bandwidth;
    }
    if (accumulation_offload_hooks) {
      // stage_1_and_2.py copy_grads_in_partition -> async_accumulate_grad_in_cpu_via_gpu, per tensor of the rank's
      // partition at every micro-step of a step with several (micro_step_id counts them from 0, setup_buckets):
      // _wait_for_offload_copies first (event.synchronize on the previous tensor's copy: the host waits for the
      // GPU at every tensor), from the second micro-step accumulated_grads_in_cpu copied up into
      // temp_grad_buffer_for_gpu_offload and added into the gradient, then the gradient copied down into its
      // pinned buffer and an event recorded. Host operations at host.deepspeed_tensor_op_seconds each (the copy
      // down and the event; the copy up and the add besides from the second micro-step), the copies at the pinned
      // PCIe rate in the model's precision, the add at the streaming rate; the boundary's own hook work
      // (offload_hooks) follows. The compact fp32 partition buffer (grad_accum_dtype fp32,
      // _use_compact_grad_partition_buffer) takes another path.
      const double bytes =
          static_cast<double>(in_.path.model_bytes) * static_cast<double>(ceil_div(trainable_params(index), n_));
      const bool restore = micro > 0;
      seconds += tensors * (restore ? 4.0 : 2.0) * in_.tensor_op_seconds +
                 (restore ? 2.0 : 1.0) * bytes / in_.pcie_bandwidth +
                 (restore ? 3.0 * bytes / in_.streaming_bandwidth : 0.0);
    }
  }
  if (seconds <= 0.0) return kNoTask;
  const bool host_waits = offload_hooks || accumulation_offload_hooks;
  const Dependency sync = (forward && first_of_pass) || host_waits
                              ? after(host_waits ? previous_compute : last_compute_)
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
void StepBuilder::backward_buffers(TaskId first, TaskId produced, std::size_t index, std::int32_t micro) {
  const TransientGpuBytes& t = in_.transient;
  if (micro == 0 && t.backward_grads > 0) {
    const Bytes bytes = static_cast<Bytes>(static_cast<double>(t.backward_grads) *
                                           static_cast<double>(trainable_params(index)) /
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

StepBuilder::CopyBytes StepBuilder::reduction_copies() const {
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
double StepBuilder::copy_seconds(double bytes, double kernels) const {
  return bytes / in_.streaming_bandwidth + kernels * in_.kernel_overhead_seconds;
}

// One DeepSpeed reduction of `elements` gradients: its copies and collective, on the compute stream when it
// runs there (after backward, or in the hooks without overlap_comm) or on the reduction stream.
void StepBuilder::deepspeed_reduction(std::int64_t elements, std::int32_t layer, std::int32_t micro, TaskId produced_by,
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
void StepBuilder::stage3_offload_copies(std::int64_t elements, std::int32_t layer, std::int32_t micro, TaskId reduced) {
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
void StepBuilder::reduce_after_backward(std::int32_t micro) {
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
void StepBuilder::end_of_micro_step_buffers(bool boundary) {
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

// DeepSpeed paths whose gradients build up in the parameters' .grad over the micro-steps: stage 0's wrappers
// (fp16/unfused_optimizer.py, fused_optimizer.py: the engine reduces them at the boundary) and stage 1 in the
// model's dtype (stage_1_and_2.py reduces only at the boundary; with another accumulation dtype it adds into
// grad_accum instead, _fill_param_grad_accum_attribute). BF16_Optimizer moves them into its fp32 buffer every
// micro-step (backward_epilogue), stage 2 into its partition.
bool StepBuilder::accumulates_in_grad() const {
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
TaskId StepBuilder::deepspeed_stage3_offloaded_update(std::int64_t partition, std::int32_t micro) {
  const double host_bytes_per_second = in_.host_memory_bytes_per_second;
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

}  // namespace zeroplan::schedule_internal
