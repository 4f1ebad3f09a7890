// The figures every memory term needs, gathered once per evaluation: parameter counts (total, partition,
// persistent, largest module), the data-parallel degree and the element sizes. One pass over the layers;
// no strings, no allocation (the planner's fast path evaluates millions of configurations per second).
#pragma once

#include <cstdint>

#include "core/cluster_description.h"
#include "core/model_description.h"
#include "core/training_config.h"
#include "sim/plan_choice.h"

namespace zeroplan {

struct MemoryInputs {
  int stage = 0;
  OffloadDevice offload_optimizer = OffloadDevice::none;
  OffloadDevice offload_param = OffloadDevice::none;
  TrainingEngine engine = TrainingEngine::deepspeed;
  bool mixed_precision = true;        // fp16/bf16 with an fp32 master copy; false for fp32 training
  int param_bytes = 2;                // bytes of a model parameter / gradient element (2 or 4)
  // zeroplan's executor: bytes of an accumulated gradient element (4 with data_types.grad_accum_dtype fp32 and a
  // 16-bit model, exec/zero/zero_engine.h; else param_bytes).
  int executor_grad_bytes = 2;
  int activation_bytes = 2;           // bytes of a saved activation element (the training precision's)
  // A model with convolutions (a layer list): cuDNN's workspace during a convolution's backward, from the cluster
  // (RuntimeOverhead::convolution_workspace_bytes); 0 for a transformer, which runs GEMMs only.
  std::int64_t convolution_workspace = 0;
  // A layer list: zeroplan's executor runs its convolutions and batch norms through cuDNN, whose engine libraries
  // each rank's process then maps (sim/host_memory.h executor_process_host_bytes).
  bool convolutions = false;
  OptimizerKind optimizer = OptimizerKind::adamw;
  int optimizer_state_bytes = 8;      // K' bytes per parameter, excluding the fp32 master copy

  std::int64_t params = 0;                 // P
  std::int64_t world_size = 1;             // N, the data-parallel degree
  std::int64_t ranks_per_node = 1;         // processes sharing one host
  std::int64_t partition_params = 0;       // ceil(P / N): one rank's partition (ZeRO stages 1-3)
  std::int64_t largest_module_params = 0;  // DeepSpeed's largest_layer_params
  std::int64_t persistent_params = 0;      // stage 3: params below stage3_param_persistence_threshold
  std::int64_t gathered_params_total = 0;  // stage 3: params that are partitioned and gathered (P - persistent)
  std::int64_t gathered_modules = 0;       // stage 3: modules whose parameters are gathered (all-gather calls)
  // DeepSpeed stage 3: the most parameters its coordinator holds gathered at once (sim/deepspeed_param_coordinator.h),
  // where a gather allocates (more than one rank, or parameters offloaded); 0 otherwise.
  std::int64_t deepspeed_gathered_live_params = 0;
  // DeepSpeed stage 3 with offload_param cpu and pin_memory: the page-locked bytes of every partitioned parameter's
  // own host partition as zero.Init pins it, each rounded up to a power of two by torch's caching host allocator
  // (memory_inputs.cpp says why they stay allocated). 0 otherwise.
  std::int64_t deepspeed_pinned_param_partitions = 0;
  // DeepSpeed stage 2 with the optimizer on the CPU and gradient accumulation: the host buffers that hold each
  // parameter's 16-bit gradient between micro-steps (accumulated_grads_in_cpu), one per parameter tensor, each
  // rounded up to a power of two when pinned (memory_inputs.cpp says why). 0 otherwise.
  std::int64_t deepspeed_grad_accumulation_host_buffers = 0;
  // DeepSpeed: its rank's device memory outside the caching allocator beyond the cluster's CUDA context
  // (RuntimeOverhead::deepspeed_process_device_bytes less cuda_context_bytes; 0 when the cluster gives none).
  std::int64_t deepspeed_process_device_extra = 0;

  // LoRA (sim/lora_model.h apply_lora_to_memory_inputs): params above are the adapters; these are the frozen base's
  // parameters, which the model built before deepspeed.initialize holds too. 0 without LoRA.
  std::int64_t lora_frozen_params = 0;

  // `--engine zeroplan` on a model the executor trains: the executor's own figures (sim/executor_layout.h).
  // Then params is the executor's flat buffer (padded vocabulary, aligned tensors) and partition_params its
  // partition, so that bytes and buffers are the ones the run measures.
  bool executor_exact = false;
  std::int64_t executor_buckets = 0;              // gradient buckets (reductions per pass)
  Bytes executor_gradient_buffer_bytes = 0;      // stages 2-3 gradient bucket buffers, scratch, fp32 comm copy
  std::int64_t executor_micro_step_gradients = 0;  // elements (model precision): fp32 accumulation at stages 0-1
  std::int64_t executor_arena = 0;                // elements: stage-3 gathered-parameter arena
  std::int64_t executor_gathered_per_micro = 0;   // elements all-gathered per micro-step (stage 3 fetch plan)
  std::int64_t executor_gathers_per_micro = 0;
  std::int64_t executor_persistent_buckets = 0;
  std::int64_t executor_param_staging = 0;        // elements: stage 3 offload_param's device staging buffers
  std::int64_t executor_offload_pieces = 0;       // offload_optimizer: the partition's pieces, and the largest
  std::int64_t executor_largest_piece = 0;
  // Stages 2-3: the gradient partition lies over the kept blocks' MLP tensors (exec/activation_accounting.h
  // mlp_saved_layout): no gradient allocation; the activations' allocation grows by the bytes past the blocks.
  bool executor_grads_over_activations = false;
  Bytes executor_grads_beyond_activations = 0;
  // offload_param nvme (sim/executor_layout.h): the swap files, the pinned swap buffers, the elements kept in host
  // memory, the disk's bytes per micro-step and per step.
  Bytes executor_param_nvme_files = 0;
  Bytes executor_param_swap_buffers = 0;
  std::int64_t executor_param_host_elements = 0;
  // DeepSpeed engine, stage 3 with offload_param nvme: the partition elements stage3.py keeps in its pinned flat
  // buffer instead of the swap files (deepspeed_param_elements_in_cpu); the rest is read from and written to NVMe.
  std::int64_t deepspeed_param_host_elements = 0;
  Bytes executor_param_nvme_read_per_step = 0;
  Bytes executor_param_nvme_write_per_step = 0;
};

MemoryInputs gather_memory_inputs(const ModelDescription& model, const ClusterDescription& cluster,
                                  const TrainingConfig& training, const PlanChoice& choice);

// DeepSpeed stage 3 with offload_param nvme: the elements of a rank's partition that stay in pinned host memory.
// stage3.py _create_param_groups_fp16_flat_cpu_memory allocates a flat buffer of up to max_in_cpu elements, and
// _create_fp16_partitions_with_defragmentation puts the sub-groups into it in order while they fit; the others
// live in the swap files. A sub-group closes once it holds sub_group_size elements or more (_create_fp16_sub_groups),
// so the k sub-groups kept are those with k x sub_group_size < max_in_cpu (the overshoot of a sub-group, at most one
// parameter's partition, is not known here): the whole partition when it fits, else k x sub_group_size.
std::int64_t deepspeed_param_elements_in_cpu(std::int64_t partition, std::int64_t max_in_cpu,
                                             std::int64_t sub_group_size);

}  // namespace zeroplan
