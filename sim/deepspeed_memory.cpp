#include "sim/deepspeed_memory.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "sim/memory_model.h"
#include "sim/model_states_memory.h"
#include "sim/saturating.h"
#include "sim/term_format.h"

namespace zeroplan {

namespace {

constexpr const char* kFusedFp16 = "DeepSpeed fp16/fused_optimizer.py FP16_Optimizer";
constexpr const char* kUnfusedFp16 = "DeepSpeed fp16/unfused_optimizer.py FP16_UnfusedOptimizer";
constexpr const char* kBf16Optimizer = "DeepSpeed bf16_optimizer.py BF16_Optimizer";
constexpr const char* kZero12 = "DeepSpeed zero/stage_1_and_2.py DeepSpeedZeroOptimizer";
constexpr const char* kZero3 = "DeepSpeed zero/stage3.py DeepSpeedZeroOptimizer_Stage3";
constexpr const char* kEngineAllreduce = "DeepSpeed engine.py allreduce_bucket (buffered_allreduce_fallback)";

// The flat copy one reduction makes of at most `elements` gradients held in `held_bytes` per element, plus the
// copy in communication_data_type when that differs.
Bytes reduction_copy_bytes(std::int64_t elements, int held_bytes, int communication_bytes) {
  const Bytes flat = sat_mul(elements, held_bytes);
  return held_bytes == communication_bytes ? flat : sat_add(flat, sat_mul(elements, communication_bytes));
}

}  // namespace

bool offloads_optimizer(const MemoryInputs& in) { return in.offload_optimizer != OffloadDevice::none; }

Bytes adam_temporaries(const MemoryInputs& in, const DeepSpeedEnginePath& path, std::int64_t params) {
  if (path.adam != AdamImplementation::torch_foreach || in.optimizer != OptimizerKind::adamw) return 0;
  return sat_mul(4, params);
}

DeepSpeedGpuBytes deepspeed_gpu_bytes(const MemoryInputs& in, const TrainingConfig& training,
                                      const DeepSpeedEnginePath& path) {
  DeepSpeedGpuBytes b;
  TransientGpuBytes& t = b.transient;
  const ZeroConfig& zero = training.zero;
  const std::int64_t P = in.params;
  const std::int64_t Pp = in.partition_params;
  const int e = path.model_bytes;
  const int a = path.accumulation_bytes;
  const int c = path.communication_bytes;
  const std::int64_t bucket = std::min(path.reduction_bucket_elements, P);
  const bool offload = offloads_optimizer(in);

  switch (path.wrapper) {
    case DeepSpeedOptimizerWrapper::plain:
    case DeepSpeedOptimizerWrapper::fp16_fused:
    case DeepSpeedOptimizerWrapper::fp16_unfused:
      // Without ZeRO every rank holds everything: the model's parameters, the fp32 copy the wrapper clones
      // (fused: one flat fp32 tensor; unfused: one per parameter; plain fp32: none), the optimizer states.
      b.params = sat_mul(e, P);
      b.master_params = path.wrapper == DeepSpeedOptimizerWrapper::plain ? 0 : sat_mul(4, P);
      b.optimizer_states = optimizer_state_bytes(in, P);
      // .grad of every parameter, built up over the backward pass and kept to the step.
      t.backward_grads = sat_mul(e, P);
      t.reduction_copy = reduction_copy_bytes(bucket, e, c);
      if (path.wrapper == DeepSpeedOptimizerWrapper::fp16_fused) {
        // FP16_Optimizer.step: each .grad converted to fp32 (p.grad.to(data_type)) and flattened into one tensor:
        // both lists exist until the flat one is assigned.
        t.step_grads = sat_mul(8, P);
      } else if (path.wrapper == DeepSpeedOptimizerWrapper::fp16_unfused) {
        // FP16_UnfusedOptimizer.step: fp32_param.grad = fp16_param.grad.to(fp32) for every parameter.
        t.step_grads = sat_mul(4, P);
      }
      t.step_temporaries = adam_temporaries(in, path, P);
      return b;
    case DeepSpeedOptimizerWrapper::bf16_optimizer:
      // _setup_for_real_optimizer: flat bf16 parameters, the rank's fp32 partition, and an fp32 gradient buffer
      // for the whole model (fp32_groups_gradients_flat, zeros_like(bf16_groups_flat, dtype=grad_acc_dtype)).
      b.params = sat_mul(e, P);
      b.master_params = sat_mul(4, Pp);
      b.optimizer_states = optimizer_state_bytes(in, Pp);
      b.held_grads = sat_mul(a, P);
      // immediate_grad_update is off by default: the bf16 .grad stays until update_hp_grads adds it in.
      t.backward_grads = sat_mul(e, P);
      t.reduction_copy = reduction_copy_bytes(bucket, a, c);
      t.step_temporaries = adam_temporaries(in, path, Pp);
      return b;
    case DeepSpeedOptimizerWrapper::zero_1_2: {
      b.params = sat_mul(e, P);
      // The fp32 partition is a clone even when training in fp32 (single_partition_of_fp32_groups).
      if (!offload) {
        b.master_params = sat_mul(4, Pp);
        b.optimizer_states = optimizer_state_bytes(in, Pp);
      } else {
        b.offload_staging = sat_mul(e, in.largest_module_params);  // temp_grad_buffer_for_gpu_offload
      }
      // Gradients accumulated in another dtype than the model's: stage 1 keeps a grad_accum attribute per
      // parameter and reduces from it, stage 2 adds into a compact fp32 partition (use_separate_grad_accum,
      // _use_compact_grad_partition_buffer).
      const bool separate = a != e;
      const int bucket_bytes = in.stage == 1 && separate ? a : e;  // _gradient_reduction_buffer_dtype
      if (in.stage == 1) t.backward_grads = sat_mul(separate ? a : e, P);
      // setup_buckets: reduce_bucket_size elements at full size, a second one with overlap_comm.
      if (zero.contiguous_gradients || offload)
        t.backward_buckets = sat_mul(bucket_bytes, zero.reduce_bucket_size, zero.overlap_comm ? 2 : 1);
      t.reduction_copy = reduction_copy_bytes(std::min(zero.reduce_bucket_size, P), bucket_bytes, c);
      if (!offload) {
        // copy_grads_in_partition (grads_in_partition) or the compact accumulation partition; at the step the
        // partition is flattened and converted to fp32 (stage_1_and_2.py step: flatten, .to(fp32)).
        t.grad_partition = sat_mul(separate ? a : e, Pp);
        t.step_grads = separate && a == 4 ? 0 : sat_add(sat_mul(separate ? a : e, Pp), sat_mul(4, Pp));
        t.step_flat_copy = t.step_grads > 0 ? sat_mul(separate ? a : e, Pp) : 0;
        t.step_temporaries = adam_temporaries(in, path, Pp);
      }
      return b;
    }
    case DeepSpeedOptimizerWrapper::zero_3: {
      if (in.offload_param == OffloadDevice::none) b.params = sat_mul(e, Pp);
      if (!offload) {
        b.master_params = sat_mul(4, Pp);
        b.optimizer_states = optimizer_state_bytes(in, Pp);
        // _setup_for_real_optimizer: grad_partitions_flat_buffer in the accumulation dtype (on the host when the
        // optimizer is offloaded).
        b.held_grads = sat_mul(a, Pp);
      }
      // The reduce bucket is allocated once at init in the communication dtype (ipg_buckets[dtype].buffer).
      if (zero.contiguous_gradients) b.held_buckets = sat_mul(c, zero.reduce_bucket_size);
      // coalesced_collectives.py reduce_scatter_coalesced: torch.cat of every rank's chunks, then the rank's
      // partition converted to the accumulation dtype.
      const std::int64_t reduced = std::min(zero.reduce_bucket_size, P);
      t.reduction_copy = sat_mul(c, reduced);
      if (c != a) t.reduction_copy = sat_add(t.reduction_copy, sat_mul(a, ceil_div(reduced, in.world_size)));
      if (!offload) {
        // stage3.py _prepare_fp32_grad_for_sub_group: the sub-group's gradient partitions flattened (torch.cat, in
        // the accumulation dtype) and converted to fp32 (a no-op when already fp32): both exist during the
        // conversion, the flat copy dropped with it; the fp32 gradient lives to the end of the sub-group's step.
        const std::int64_t sub_group = std::min(zero.sub_group_size, Pp);
        t.step_grads = a == 4 ? sat_mul(4, sub_group) : sat_mul(a + 4, sub_group);
        t.step_flat_copy = a == 4 ? 0 : sat_mul(a, sub_group);
        t.step_temporaries = adam_temporaries(in, path, sub_group);
      }
      return b;
    }
  }
  return b;
}

Bytes largest_activation_block(const ModelDescription& model, const TrainingConfig& training,
                               const ActivationBytes& activations) {
  if (model.transformer) {
    const TransformerShape& shape = *model.transformer;
    const std::int64_t e = precision_bytes(training.precision);
    // The MLP's inner activation; the fused QKV output. The loss's tensors are replayed on their own
    // (loss_tensor_bytes).
    const std::int64_t widest = std::max(sat_mul(shape.ffn_hidden, e), sat_mul(shape.hidden, 3 * e));
    return sat_mul(widest, activations.tokens);
  }
  // A layer list names no tensor: one layer's saved set (or its backward working set) bounds its largest tensor.
  return std::max({activations.block_saved, activations.backward_working_set, activations.logits});
}

LossTensorBytes loss_tensor_bytes(const ModelDescription& model, const TrainingConfig& training,
                                  const ActivationBytes& activations, Bytes cublas_workspace) {
  LossTensorBytes loss;
  if (!model.transformer) return loss;
  const TransformerShape& shape = *model.transformer;
  const std::int64_t e = precision_bytes(training.precision);
  const std::int64_t f = training.fp32_loss ? 4 : e;
  loss.logits = sat_mul(sat_mul(shape.vocab_size, e), activations.tokens);
  loss.upcast = f != e ? sat_mul(sat_mul(shape.vocab_size, f), activations.tokens) : 0;
  loss.log_probs = sat_mul(sat_mul(shape.vocab_size, f), activations.tokens);
  loss.embedding_grad = sat_mul(sat_mul(shape.vocab_size, shape.hidden), e);
  loss.backward_workspace = cublas_workspace;
  return loss;
}

bool deepspeed_uses_second_communicator(const MemoryInputs& in, const TrainingConfig& training) {
  return in.stage == 3 && (!training.zero.zero_init || training.precision == Precision::fp16);
}

namespace {

// The host bytes of a rank before deepspeed.initialize returns, beyond its process: the model the user's script
// builds in fp32 on the CPU (stages 0-2, or stage 3 without zero.Init); under zero.Init nothing (its tensor
// overrides create every parameter on the GPU: partition_parameters.py _add_tensor_creation_wrappers, device and
// dtype overridden by default) but, with the parameters left on the GPU, stage3.py
// _create_fp16_partitions_with_defragmentation -> zero/utils.py defragment, which copies the 16-bit partition
// into one pageable host tensor and back to the GPU (freed after).
Bytes deepspeed_host_init_bytes(const MemoryInputs& in, const TrainingConfig& training) {
  // LoRA (in.params the adapters): the model built before deepspeed.initialize is the frozen base and its adapters.
  // A quantised base is built on the GPU as transformers loads it (bitsandbytes quantises each weight on the device,
  // modeling_utils.py with a quantization_config and device_map): nothing of it stays on the host.
  if (in.lora_frozen_params > 0 && training.lora.quantize_base != BaseQuantization::none) return 0;
  // Under zero.Init the host holds only the defragmented 16-bit partition of the optimizer's groups, the adapters'.
  if (in.stage < 3 || !training.zero.zero_init) return sat_mul(4, sat_add(in.params, in.lora_frozen_params));
  return in.offload_param == OffloadDevice::none ? sat_mul(in.param_bytes, in.partition_params) : 0;
}

// The two moments of deepspeed_host_peak_per_rank beyond the process. The first: the model built on the host, with
// NCCL's communicator beside it at more than one rank (comm/torch.py init_process_group binds the device) and under
// zero.Init at any world size (partition_parameters.py _zero_init_param broadcasts every parameter as it is built).
// The second: the steady state.
Bytes deepspeed_host_init_moment(const MemoryInputs& in, const TrainingConfig& training,
                                 const DeepSpeedProcessHostBytes& process) {
  const bool communicator = in.world_size > 1 || (in.stage == 3 && training.zero.zero_init);
  return sat_add(deepspeed_host_init_bytes(in, training), communicator ? process.nccl : 0);
}
Bytes deepspeed_host_steady_moment(const DeepSpeedHostBytes& host, const DeepSpeedProcessHostBytes& process) {
  return sat_add(sat_add(host.pinned, host.pageable), sat_add(process.nccl, process.convolution));
}

}  // namespace

Bytes deepspeed_host_peak_per_rank(const MemoryInputs& in, const TrainingConfig& training,
                                   const DeepSpeedHostBytes& host, const DeepSpeedProcessHostBytes& process) {
  return sat_add(process.process, std::max(deepspeed_host_init_moment(in, training, process),
                                           deepspeed_host_steady_moment(host, process)));
}

namespace {
// The smallest power of two at least `bytes` (0 for 0).
Bytes power_of_two_ceil(Bytes bytes) {
  if (bytes <= 1) return bytes;
  const std::uint64_t rounded = std::bit_ceil(static_cast<std::uint64_t>(bytes));
  return rounded > static_cast<std::uint64_t>(std::numeric_limits<Bytes>::max()) ? std::numeric_limits<Bytes>::max()
                                                                                 : static_cast<Bytes>(rounded);
}
}  // namespace

DeepSpeedHostBytes deepspeed_host_bytes(const MemoryInputs& in, const TrainingConfig& training,
                                        const DeepSpeedEnginePath& path) {
  DeepSpeedHostBytes h;
  const ZeroConfig& zero = training.zero;
  const std::int64_t Pp = in.partition_params;
  const int e = path.model_bytes;
  const Bytes states = optimizer_state_bytes(in, Pp);
  const auto host = [&](Bytes bytes, bool pinned) {
    if (pinned) h.pinned = sat_add(h.pinned, bytes);
    else h.pageable = sat_add(h.pageable, bytes);
  };
  if (in.offload_optimizer == OffloadDevice::cpu) {
    // fp32 master partition and its fp32 gradient, pinned with pin_memory (stage_1_and_2.py __init__ and
    // initialize_optimizer_states; stage3.py _create_fp32_partitions); DeepSpeedCPUAdam creates its states with
    // torch.zeros_like on the CPU: pageable (deepspeed/ops/adam/cpu_adam.py step).
    if (path.wrapper == DeepSpeedOptimizerWrapper::zero_1_2) {
      // Stages 1-2 pin each buffer whole with tensor.pin_memory(), which takes its pages from torch's
      // CachingHostAllocator: every allocation rounded up to a power of two (aten/src/ATen/core/
      // CachingHostAllocator.h, PowerOf2Ceil), so the pinned bytes are the rounded sizes, one flat buffer per
      // parameter group (the whole partition: one group, as bench/deepspeed/ds_peer.py passes the model). GPT-2
      // 1.5B on one H100 (2026-11-25): 8 + 8 + 4 + 0.25 GiB = 20.25 GiB pinned, as measured.
      const auto pinned_buffer = [&](Bytes bytes) {
        host(zero.pin_memory ? power_of_two_ceil(bytes) : bytes, zero.pin_memory);
      };
      pinned_buffer(sat_mul(4, Pp));  // single_partition_of_fp32_groups
      pinned_buffer(sat_mul(4, Pp));  // its .grad (single_grad_partition)
      host(states, false);
      // param_buffer_of_bit16_for_cpu_offload_groups and temp_grad_buffer_for_cpu_offload (largest parameter).
      pinned_buffer(sat_mul(e, Pp));
      pinned_buffer(sat_mul(e, in.largest_module_params));
      // With accumulation at stage 2, accumulated_grads_in_cpu holds each parameter's 16-bit gradient between
      // micro-steps: one buffer per parameter tensor (async_accumulate_grad_in_cpu_via_gpu), each pinned and
      // rounded on its own (memory_inputs.cpp). Stage 1 has none: it reduces at the accumulation boundary only
      // (engine.py allreduce_gradients; its hooks reduce only with partition_gradients or overlap_comm), so
      // _release_ipg_buffers runs once a step, setup_buckets' micro_step_id is still 0 at the boundary, and
      // copy_grads_in_partition never takes the accumulation path: the gradients accumulate in .grad on the GPU.
      // GPT-2 350M and ResNet-101 at accumulation 4 on one H100 (2026-11-25): stage 2 pins 0.737 and 0.110 GiB
      // more than at accumulation 1 (754 and 112.8 MiB of rounded per-tensor buffers), stage 1 the same.
      host(in.deepspeed_grad_accumulation_host_buffers, zero.pin_memory);
      // torch_adam: torch.optim.AdamW's for-loop steps the flat partition (sim/simulator.cpp cpu_optimizer_rate)
      // and makes two temporaries the partition's size at once (torch/optim/adamw.py _single_tensor_adamw: denom =
      // (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)), fresh pageable memory at every step.
      if (path.adam == AdamImplementation::torch_foreach) host(sat_mul(8, Pp), false);
      // The step's bit16_partitions[partition_id].data.copy_(fp32_partition.data) converts on the host first
      // (ATen copy_ across devices with a dtype change makes the converted tensor on the source device): a
      // pageable 16-bit copy of the partition at the step, in the resident peak.
      host(sat_mul(e, Pp), false);
    } else {
      // Stage 3 (stage3.py), pinned buffers rounded as above:
      // - _create_fp32_partitions: the fp32 master partition of each sub-group, converted.clone().detach() on the
      //   CPU: pageable;
      // - initialize_optimizer_states: each sub-group's fp32 gradient, torch.zeros then pin_memory: one pinned
      //   buffer per sub-group (sub_group_size elements, the last the remainder);
      // - _setup_for_real_optimizer: grad_partitions_flat_buffer, the partition's gradients in the accumulation
      //   dtype, pinned whole;
      // - the step: with the parameters on the GPU, _reassign_or_swap_out_partitioned_parameters copies each updated
      //   fp32 sub-group into the 16-bit GPU partition, which ATen converts on the CPU first into a new pageable
      //   tensor (copy_ across devices with a dtype change): the largest sub-group's 16-bit copy, in the resident
      //   peak.
      const auto pinned_buffer = [&](Bytes bytes) {
        host(zero.pin_memory ? power_of_two_ceil(bytes) : bytes, zero.pin_memory);
      };
      host(sat_mul(4, Pp), false);
      host(states, false);
      const std::int64_t sub_group = std::max<std::int64_t>(1, std::min(zero.sub_group_size, Pp));
      const std::int64_t full = Pp / sub_group;
      if (zero.pin_memory) {
        h.pinned = sat_add(h.pinned, sat_mul(full, power_of_two_ceil(sat_mul(4, sub_group))));
        if (Pp % sub_group != 0) pinned_buffer(sat_mul(4, Pp % sub_group));
      } else {
        pinned_buffer(sat_mul(4, Pp));
      }
      pinned_buffer(sat_mul(path.accumulation_bytes, Pp));
      if (in.offload_param == OffloadDevice::none) host(sat_mul(e, sub_group), false);
      // torch_adam: the for-loop's two temporaries of a sub-group's size during its step (as at stages 1-2).
      if (path.adam == AdamImplementation::torch_foreach) host(sat_mul(8, sub_group), false);
    }
  } else if (in.offload_optimizer == OffloadDevice::nvme) {
    // ZeRO-Infinity: fp32 master and states on NVMe, the fp32 gradient partition on the host.
    h.nvme = sat_add(sat_mul(4, Pp), states);
    host(sat_mul(4, Pp), zero.pin_memory);
    host(sat_mul(path.accumulation_bytes, Pp), zero.pin_memory);
  }
  if (in.offload_param == OffloadDevice::cpu) {
    if (path.wrapper == DeepSpeedOptimizerWrapper::zero_3 && zero.pin_memory) {
      // stage3.py _create_param_groups_fp16_flat_cpu_memory: the 16-bit partition in one pinned flat buffer per
      // parameter group (rounded as above), and the per-parameter pinned partitions zero.Init made before it, which
      // torch's host allocator keeps cached (memory_inputs.h deepspeed_pinned_param_partitions).
      host(power_of_two_ceil(sat_mul(e, Pp)), true);
      host(in.deepspeed_pinned_param_partitions, true);
    } else {
      host(sat_mul(e, Pp), zero.pin_memory);
    }
  }
  if (in.offload_param == OffloadDevice::nvme) {
    // stage3.py: the sub-groups within max_in_cpu in one pinned flat buffer (rounded as above), the rest in the
    // swap files (memory_inputs.h deepspeed_param_elements_in_cpu).
    const std::int64_t kept = in.deepspeed_param_host_elements;
    if (kept > 0) host(zero.pin_memory ? power_of_two_ceil(sat_mul(e, kept)) : sat_mul(e, kept), zero.pin_memory);
    h.nvme = sat_add(h.nvme, sat_mul(e, Pp - kept));
  }
  return h;
}

void explain_deepspeed_reserve_and_host(const MemoryInputs& in, const TrainingConfig& training, Bytes flat_segments,
                                        const DeepSpeedHostBytes& steady, const DeepSpeedProcessHostBytes& process,
                                        std::vector<MemoryTerm>& terms) {
  const Bytes outside = std::min(flat_segments, in.deepspeed_process_device_extra);
  if (outside > 0)
    terms.push_back({"runtime_overhead",
                     "DeepSpeed process's device memory outside the caching allocator beyond the CUDA context "
                     "(torch's kernel modules and handles, NCCL's communicator at one rank too)",
                     outside, "runtime.deepspeed_process_device_bytes - runtime.cuda_context_bytes",
                     "cluster description (device used less torch.cuda.max_memory_reserved under DeepSpeed); DeepSpeed "
                     "comm/comm.py init_distributed"});
  if (flat_segments > outside)
    terms.push_back({"runtime_overhead",
                     "caching-allocator segments of flat buffers larger than any freed activation block (reserved, "
                     "idle at the activation peak)",
                     flat_segments - outside,
                     "free blocks of the segments after two steps' best-fit replay (split and merged as the allocator "
                     "does; segments rounded to 2 MiB)",
                     "PyTorch c10/cuda/CUDACachingAllocator.cpp (get_free_block best fit, should_split, alloc_block, "
                     "kRoundLarge, try_merge_blocks); "
                     "DeepSpeed zero/stage_1_and_2.py step, zero/stage3.py step, bf16_optimizer.py, "
                     "fp16/fused_optimizer.py, fp16/unfused_optimizer.py initialize_optimizer_states (stage 0's "
                     "per-parameter segments, with torch/optim/adam.py _init_group and _multi_tensor_adam)"});
  const std::string ranks = num(in.ranks_per_node);
  // A host term a rank's process holds, for every rank of the node.
  const auto per_rank_host_term = [&](const std::string& what, Bytes bytes, const char* source) {
    if (bytes > 0)
      terms.push_back({"host", what + " per rank x ranks per node", sat_mul(bytes, in.ranks_per_node),
                       num(bytes) + " * " + ranks, source});
  };
  per_rank_host_term("training process (torch, CUDA libraries)", process.process,
                     "cluster description runtime.host_process_bytes");
  const Bytes init = deepspeed_host_init_moment(in, training, process);
  const Bytes after = deepspeed_host_steady_moment(steady, process);
  per_rank_host_term("NCCL's communicator state", process.nccl,
                     "cluster description runtime.nccl_host_bytes (bench/deepspeed/process_footprint.py: resident set "
                     "after init_process_group less before); created by DeepSpeed comm/torch.py init_process_group "
                     "(device_id bound) at more than one rank, at the first collective at one rank");
  per_rank_host_term("cuDNN's libraries and kernels, loaded at the first convolution,", process.convolution,
                     "cluster description runtime.host_convolution_process_bytes (a ResNet rank's resident set beyond "
                     "runtime.host_process_bytes and runtime.nccl_host_bytes); torch aten/src/ATen/native/cudnn "
                     "(cuDNN's engine libraries, dlopened at first use)");
  if (init <= after) return;
  // The model built on the host is the peak's moment: what it holds beyond the steady state's terms above.
  const bool built_whole = in.stage < 3 || !training.zero.zero_init;
  const Bytes beyond = init - after;
  const Bytes model_bytes = deepspeed_host_init_bytes(in, training);
  // (model [+ NCCL] - held later) * ranks, appended piece by piece: a literal + a temporary string (operator+ with
  // an rvalue right side inserts at its front) makes GCC 12 warn -Wrestrict at -O3, a false positive.
  std::string formula = "(";
  if (built_whole) {
    formula += "4 * ";
    formula += num(sat_add(in.params, in.lora_frozen_params));
  } else {
    formula += num(in.param_bytes);
    formula += " * ";
    formula += num(in.partition_params);
  }
  if (init > model_bytes) {
    formula += " + ";
    formula += num(init - model_bytes);
    formula += " NCCL";
  }
  formula += " - ";
  formula += num(after);
  formula += " held later) * ";
  formula += ranks;
  if (built_whole)
    terms.push_back({"host",
                     "model built on the host in fp32 before deepspeed.initialize moves it, beyond what the rank "
                     "holds later, x ranks per node",
                     sat_mul(beyond, in.ranks_per_node), std::move(formula),
                     "the user's script (bench/deepspeed/ds_peer.py): the module is built on the CPU in fp32; "
                     "DeepSpeed engine.py _configure_distributed_model casts and moves it"});
  else
    terms.push_back({"host",
                     "16-bit partition copied to the host once while it is defragmented at initialization, beyond "
                     "what the rank holds later, x ranks per node",
                     sat_mul(beyond, in.ranks_per_node), std::move(formula),
                     "DeepSpeed zero/stage3.py _create_fp16_partitions_with_defragmentation -> zero/utils.py "
                     "defragment (zero.Init builds the parameters on the GPU: partition_parameters.py "
                     "_add_tensor_creation_wrappers)"});
}

void explain_deepspeed_memory(const MemoryInputs& in, const TrainingConfig& training, const DeepSpeedEnginePath& path,
                              const DeepSpeedGpuBytes& gpu, const DeepSpeedHostBytes& host,
                              std::vector<MemoryTerm>& terms) {
  const char* source = kZero12;
  switch (path.wrapper) {
    case DeepSpeedOptimizerWrapper::plain:
    case DeepSpeedOptimizerWrapper::fp16_fused: source = kFusedFp16; break;
    case DeepSpeedOptimizerWrapper::fp16_unfused: source = kUnfusedFp16; break;
    case DeepSpeedOptimizerWrapper::bf16_optimizer: source = kBf16Optimizer; break;
    case DeepSpeedOptimizerWrapper::zero_1_2: source = kZero12; break;
    case DeepSpeedOptimizerWrapper::zero_3: source = kZero3; break;
  }
  const std::string wrapper = to_string(path.wrapper);
  const std::string P = num(in.params), Pp = num(in.partition_params);
  const auto term = [&](const char* component, const std::string& name, Bytes bytes, const std::string& formula,
                        const char* from) {
    terms.push_back({component, name, bytes, formula, from});
  };
  term("params", "16-bit parameters", gpu.params,
       num(path.model_bytes) + " * " + (path.wrapper == DeepSpeedOptimizerWrapper::zero_3 ? Pp : P), source);
  term("master_params", "fp32 master parameters (" + wrapper + ")", gpu.master_params, "4 * P or 4 * P/N", source);
  term("optimizer_states", "optimizer states", gpu.optimizer_states,
       num(in.optimizer_state_bytes) + " * P or P/N", source);
  if (gpu.held_grads > 0)
    term("grads", path.wrapper == DeepSpeedOptimizerWrapper::zero_3 ? "gradient partitions (grad_partitions_flat_buffer)"
                                                                    : "fp32 gradient buffer (fp32_groups_gradients_flat)",
         gpu.held_grads, num(path.accumulation_bytes) + " * " + (path.wrapper == DeepSpeedOptimizerWrapper::zero_3 ? Pp : P),
         source);
  // (stage 3's bucket is explained with its gathered parameters, zero_buffers_memory.cpp)
  if (gpu.held_buckets > 0 && path.wrapper != DeepSpeedOptimizerWrapper::zero_3)
    term("gradient_buckets", "reduce bucket held all step (ipg_buckets)", gpu.held_buckets,
         "reduce_bucket_size * communication bytes", source);
  if (gpu.offload_staging > 0)
    term("offload_buffers", "GPU staging buffer for offloaded gradients", gpu.offload_staging,
         num(path.model_bytes) + " * largest parameter " + num(in.largest_module_params),
         "DeepSpeed zero/stage_1_and_2.py temp_grad_buffer_for_gpu_offload");
  const TransientGpuBytes& t = gpu.transient;
  if (t.backward_grads > 0)
    term("grads", "gradients left in .grad by the backward pass (timeline: built up layer by layer)", t.backward_grads,
         "bytes * P", source);
  if (t.backward_buckets > 0)
    term("gradient_buckets", "reduce buckets from the first gradient hook to the end of the reduction (timeline)",
         t.backward_buckets,
         "reduce_bucket_size" + std::string(training.zero.overlap_comm ? " * 2 (overlap_comm)" : "") + " * bytes",
         "DeepSpeed zero/stage_1_and_2.py setup_buckets");
  if (t.reduction_copy > 0)
    term("gradient_buckets", "flat copy one reduction makes (timeline: during each reduction)", t.reduction_copy,
         "elements per reduction * bytes (+ communication_data_type copy)",
         path.wrapper == DeepSpeedOptimizerWrapper::zero_3 ? "DeepSpeed runtime/comm/coalesced_collectives.py "
                                                            "reduce_scatter_coalesced (torch.cat)"
         : path.wrapper == DeepSpeedOptimizerWrapper::zero_1_2 ? "DeepSpeed zero/stage_1_and_2.py allreduce_bucket "
                                                                 "(flatten)"
                                                               : kEngineAllreduce);
  if (t.grad_partition > 0)
    term("grads", "gradient partition from the reduction to the step (grads_in_partition; timeline)", t.grad_partition,
         "bytes * P/N = bytes * " + Pp, "DeepSpeed zero/stage_1_and_2.py copy_grads_in_partition");
  if (t.step_grads > 0)
    term("grads", "fp32 gradients the optimizer step makes (timeline: during the step)", t.step_grads,
         "4 * P (unfused), 8 * P (fused: converted list + flat), or (bytes + 4) * P/N", source);
  if (t.step_temporaries > 0)
    term("optimizer_states", "torch foreach AdamW temporary during the step (timeline)", t.step_temporaries,
         "4 * parameters stepped", "torch/optim/adamw.py _multi_tensor_adamw (exp_avg_sq_sqrt)");
  const std::string ranks = num(in.ranks_per_node);
  if (host.pinned > 0)
    terms.push_back({"host", "page-locked host memory per rank x ranks per node", sat_mul(host.pinned, in.ranks_per_node),
                     num(host.pinned) + " * " + ranks, "DeepSpeed pin_memory buffers (fp32 master, gradients, staging)"});
  if (host.pageable > 0)
    terms.push_back({"host", "pageable host memory per rank x ranks per node (CPU Adam states)",
                     sat_mul(host.pageable, in.ranks_per_node), num(host.pageable) + " * " + ranks,
                     "DeepSpeed ops/adam/cpu_adam.py DeepSpeedCPUAdam.step (torch.zeros_like on the CPU)"});
  if (host.nvme > 0)
    terms.push_back({"nvme", "NVMe per rank x ranks per node", sat_mul(host.nvme, in.ranks_per_node),
                     num(host.nvme) + " * " + ranks, "ZeRO-Infinity (arXiv 2104.07857)"});
}

}  // namespace zeroplan
