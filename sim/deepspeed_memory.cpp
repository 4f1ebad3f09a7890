#include "sim/deepspeed_memory.h"

#include <algorithm>

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

bool offloads_optimizer(const MemoryInputs& in) { return in.offload_optimizer != OffloadDevice::none; }

// torch.optim.AdamW's foreach step keeps one more tensor the size of the second moment
// (torch/optim/adamw.py _multi_tensor_adamw: exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs)); its fused
// kernel and DeepSpeed's FusedAdam (multi_tensor_apply) update in place.
Bytes adam_temporaries(const MemoryInputs& in, const DeepSpeedEnginePath& path, std::int64_t params) {
  if (path.adam != AdamImplementation::torch_foreach || in.optimizer != OptimizerKind::adamw) return 0;
  return sat_mul(4, params);
}

// The flat copy one reduction makes of at most `elements` gradients held in `held_bytes` per element, plus the
// copy in communication_data_type when that differs.
Bytes reduction_copy_bytes(std::int64_t elements, int held_bytes, int communication_bytes) {
  const Bytes flat = sat_mul(elements, held_bytes);
  return held_bytes == communication_bytes ? flat : sat_add(flat, sat_mul(elements, communication_bytes));
}

}  // namespace

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
        const std::int64_t sub_group = std::min(zero.sub_group_size, Pp);
        t.step_grads = a == 4 ? 0 : sat_mul(4, sub_group);  // the sub-group's fp32 gradient at the step
        t.step_temporaries = adam_temporaries(in, path, sub_group);
      }
      return b;
    }
  }
  return b;
}

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
    host(sat_mul(4, Pp), zero.pin_memory);
    host(sat_mul(4, Pp), zero.pin_memory);
    host(states, false);
    if (path.wrapper == DeepSpeedOptimizerWrapper::zero_1_2) {
      // param_buffer_of_bit16_for_cpu_offload_groups and temp_grad_buffer_for_cpu_offload (largest parameter);
      // with accumulation, accumulated_grads_in_cpu holds the partition's 16-bit gradients between micro-steps.
      host(sat_mul(e, Pp), zero.pin_memory);
      host(sat_mul(e, in.largest_module_params), zero.pin_memory);
      if (training.grad_accum > 1) host(sat_mul(e, Pp), zero.pin_memory);
    } else {
      // stage3.py: the gradient partitions live on the host in the accumulation dtype.
      host(sat_mul(path.accumulation_bytes, Pp), zero.pin_memory);
    }
  } else if (in.offload_optimizer == OffloadDevice::nvme) {
    // ZeRO-Infinity: fp32 master and states on NVMe, the fp32 gradient partition on the host.
    h.nvme = sat_add(sat_mul(4, Pp), states);
    host(sat_mul(4, Pp), zero.pin_memory);
    host(sat_mul(path.accumulation_bytes, Pp), zero.pin_memory);
  }
  if (in.offload_param == OffloadDevice::cpu) host(sat_mul(e, Pp), zero.pin_memory);
  if (in.offload_param == OffloadDevice::nvme) h.nvme = sat_add(h.nvme, sat_mul(e, Pp));
  return h;
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
