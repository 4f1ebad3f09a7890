// DeepSpeed 0.19.8's GPU memory per rank, term by term as its engine allocates it (the DeepSpeed engine of the
// memory model; --engine zeroplan keeps model_states_memory / zero_buffers_memory). Each term says which
// DeepSpeed function allocates it and when it exists:
// - held all step: the 16-bit parameters, the fp32 master copy and the optimizer states (partitioned from stage
//   1), BF16_Optimizer's fp32 gradient buffer, stage 3's gradient partitions and its reduce bucket;
// - transient, placed on the step's timeline by the schedule (zero_schedule.h), so that buffers which exist only
//   after the backward pass are not added on top of the activation peak: the gradients autograd leaves in .grad,
//   the stage 1-2 reduce buckets (from the first gradient hook to the end of the reduction), the flat copy each
//   reduction makes, the stage 1-2 gradient partition, and the fp32 gradients and Adam temporaries of the
//   optimizer step.
// What PyTorch's caching allocator keeps reserved around these buffers is replayed in deepspeed_allocator_replay.h.
#pragma once

#include <vector>

#include "core/model_description.h"
#include "core/training_config.h"
#include "core/units.h"
#include "sim/activation_memory.h"
// The caching allocator's segments for these buffers (deepspeed_flat_buffer_segments,
// deepspeed_overflow_test_segments), declared there for the memory model's callers.
#include "sim/deepspeed_allocator_replay.h"
#include "sim/deepspeed_engine.h"
#include "sim/memory_inputs.h"

namespace zeroplan {

struct MemoryTerm;

// The transient bytes the schedule places in time (all zero for zeroplan's engine).
struct TransientGpuBytes {
  Bytes backward_grads = 0;      // .grad left by autograd over the backward pass, until released (whole model)
  Bytes backward_buckets = 0;    // stage 1-2 ipg buckets: from the first gradient hook to the end of the reduction
  Bytes reduction_copy = 0;      // one reduction's flat copy (flatten / torch.cat / dtype conversion), per call
  Bytes grad_partition = 0;      // stage 1-2 gradient partition (grads_in_partition), from the reduction to the step
  Bytes step_grads = 0;          // fp32 gradients the optimizer step makes, for the step
  // Of step_grads, the flattened copy in the gradients' dtype that is converted to fp32 and dropped before the
  // optimizer runs (stages 1-3): never live beside step_temporaries.
  Bytes step_flat_copy = 0;
  Bytes step_temporaries = 0;    // Adam's temporaries during the step (torch foreach AdamW)
  Bytes grads() const { return backward_grads + grad_partition + step_grads; }
  Bytes buckets() const { return backward_buckets + reduction_copy; }
  Bytes total() const { return grads() + buckets() + step_temporaries; }
};

struct DeepSpeedGpuBytes {
  Bytes params = 0;            // 16-bit parameters (the partition at stage 3; none with offload_param)
  Bytes master_params = 0;     // fp32 master copy
  Bytes optimizer_states = 0;  // Adam's (or SGD's) states
  Bytes held_grads = 0;        // BF16_Optimizer's fp32 gradient buffer; stage 3's gradient partitions
  Bytes held_buckets = 0;      // stage 3's reduce bucket
  Bytes offload_staging = 0;   // stage 1-2 offload: temp_grad_buffer_for_gpu_offload (the largest parameter)
  TransientGpuBytes transient;
};

DeepSpeedGpuBytes deepspeed_gpu_bytes(const MemoryInputs& in, const TrainingConfig& training,
                                      const DeepSpeedEnginePath& path);

// Whether the optimizer (its fp32 master, states and step) is offloaded to the host or NVMe (offload_optimizer).
bool offloads_optimizer(const MemoryInputs& in);

// torch.optim.AdamW's foreach step keeps one more tensor the size of the second moment
// (torch/optim/adamw.py _multi_tensor_adamw: exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs)); its fused
// kernel and DeepSpeed's FusedAdam (multi_tensor_apply) update in place. The bytes of that temporary for `params`
// parameters (0 where there is none).
Bytes adam_temporaries(const MemoryInputs& in, const DeepSpeedEnginePath& path, std::int64_t params);

// The largest single tensor of the forward and backward passes beside the loss's (LossTensorBytes): the largest
// block the caching allocator has free once the backward pass has released the activations (transformers: the
// MLP's inner activation or the fused QKV output; layer lists: one layer's saved set).
Bytes largest_activation_block(const ModelDescription& model, const TrainingConfig& training,
                               const ActivationBytes& activations);

// A language model's loss tensors, the largest of the step, in the order torch makes them
// (torch.nn.functional.cross_entropy = log_softmax + nll_loss over the logits, upcast to fp32 first with
// fp32_loss): the 16-bit logits, their fp32 copy (freed once log_softmax has read it: LogSoftmaxBackward saves its
// output), log_softmax's output (saved); in backward nll_loss's gradient and log_softmax's input gradient (the
// output's size), then ToCopyBackward's 16-bit gradient (the logits' size). Then the LM head's backward: the
// embedding's weight gradient (vocabulary x hidden) and, at its first GEMM, the cuBLAS workspace of autograd's
// thread (torch aten/src/ATen/cuda/CublasHandlePool.cpp: one per handle and stream, through the caching allocator,
// kept for the process). All zero for a model without an LM head.
struct LossTensorBytes {
  Bytes logits = 0;          // the 16-bit logits (and ToCopyBackward's gradient)
  Bytes upcast = 0;          // their fp32 copy (0 without fp32_loss, or in fp32 training)
  Bytes log_probs = 0;       // log_softmax's output (and each of its two gradients)
  Bytes embedding_grad = 0;  // the LM head's weight gradient
  Bytes backward_workspace = 0;
};
LossTensorBytes loss_tensor_bytes(const ModelDescription& model, const TrainingConfig& training,
                                  const ActivationBytes& activations, Bytes cublas_workspace);

// Whether a DeepSpeed rank runs collectives on a second NCCL group. DeepSpeed holds torch's world group and its
// clone of it (utils/groups.py _clone_world_group, the engine's seq_data_parallel_group); a group's buffers come
// with its first collective (at one rank its communicator too). The clone serves the engine (_broadcast_model of
// parameters not yet partitioned, the optimizers' reductions, norms and overflow tests); the world group serves
// zero.Init (partition_parameters.py Init: ds_process_group = the world group when no data_parallel_group is given;
// _zero_init_param and _convert_to_zero_parameters broadcast on it). Both run collectives at stage 3 when the model
// was built whole (the engine broadcasts it on the clone, then stage 3 converts it through Init on the world group)
// and under zero.Init with fp16, whose overflow test all-reduces on the clone (stage3.py has_overflow). Under
// zero.Init with bf16 or fp32, and at stages 0-2, one group runs them. Traced (bench/deepspeed/results-pending/
// probe-2026-11-26/): ResNet-101 fp16 at stage 3 on one and two ranks, GPT-2 1.5B fp16 at stage 3 on one; one group
// only: ResNet-101 stages 0 and 2, GPT-2 350M bf16 stages 2 and 3 on two ranks.
bool deepspeed_uses_second_communicator(const MemoryInputs& in, const TrainingConfig& training);

// Host memory per rank under offload (stage_1_and_2.py / stage3.py with offload_optimizer, offload_param): what
// is page-locked (pin_memory) and what is not (DeepSpeedCPUAdam keeps its states in pageable memory).
struct DeepSpeedHostBytes {
  Bytes pinned = 0;
  Bytes pageable = 0;
  Bytes nvme = 0;
};
DeepSpeedHostBytes deepspeed_host_bytes(const MemoryInputs& in, const TrainingConfig& training,
                                        const DeepSpeedEnginePath& path);

// What a DeepSpeed rank's process holds on the host beside tensors, each from its own moment (cluster runtime
// section): torch and the CUDA libraries from the start (host_process_bytes), NCCL's communicator state from its
// creation (nccl_host_bytes), cuDNN's libraries from the first convolution (host_convolution_process_bytes; 0 for a
// transformer).
struct DeepSpeedProcessHostBytes {
  Bytes process = 0;
  Bytes nccl = 0;
  Bytes convolution = 0;
};

// The host memory of a DeepSpeed rank's process at its peak, as a user's script has it: the process, plus the larger
// of two moments. Before deepspeed.initialize moves it, the model built on the host in fp32 (4 bytes per parameter;
// under zero.Init at stage 3 only the largest layer exists whole), with NCCL's communicator beside it at more than
// one rank: DeepSpeed's comm/torch.py TorchBackend.init_process_group binds the device (device_id) unless the world
// size is 1, and torch then creates the communicator at once; under zero.Init, whose _zero_init_param broadcasts
// each parameter as it is built, at one rank too; otherwise it comes with the first collective, after the model has
// left the host. Afterwards, what DeepSpeed keeps on the host (offload buffers) with NCCL's state and
// cuDNN's libraries.
Bytes deepspeed_host_peak_per_rank(const MemoryInputs& in, const TrainingConfig& training,
                                   const DeepSpeedHostBytes& host, const DeepSpeedProcessHostBytes& process);

// The terms of deepspeed_flat_buffer_segments (sim/deepspeed_allocator_replay.h) and the host peak above: the
// process's device memory beyond the CUDA context and the flat buffers' segments (runtime_overhead;
// `flat_segments` is deepspeed_flat_buffer_segments' result, both together) and the host peak
// beyond DeepSpeed's offload buffers (host: the process, NCCL's and cuDNN's state, and the fp32 model built on the
// host where that moment is the larger).
void explain_deepspeed_reserve_and_host(const MemoryInputs& in, const TrainingConfig& training, Bytes flat_segments,
                                        const DeepSpeedHostBytes& steady, const DeepSpeedProcessHostBytes& process,
                                        std::vector<MemoryTerm>& terms);

void explain_deepspeed_memory(const MemoryInputs& in, const TrainingConfig& training, const DeepSpeedEnginePath& path,
                              const DeepSpeedGpuBytes& gpu, const DeepSpeedHostBytes& host,
                              std::vector<MemoryTerm>& terms);

}  // namespace zeroplan
