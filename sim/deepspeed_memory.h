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
#pragma once

#include <vector>

#include "core/model_description.h"
#include "core/training_config.h"
#include "core/units.h"
#include "sim/activation_memory.h"
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

// What a DeepSpeed rank holds on the device beyond its tensors and the cluster's generic runtime terms (CUDA
// context, cuBLAS workspace, NCCL buffers of a communicator of several ranks, the fragmentation of the activations'
// blocks), the memory model's DeepSpeed part of runtime_overhead:
// - where the cluster measured it, the rest of the process's memory outside the caching allocator
//   (MemoryInputs::deepspeed_process_device_extra: a torch process's context and libraries and the NCCL
//   communicator DeepSpeed creates even at one rank, beyond cudaFree(0)'s context);
// - the PyTorch caching allocator's segments that DeepSpeed's flat buffers leave reserved beyond the allocated
// peak (c10/cuda/CUDACachingAllocator.cpp): a buffer allocated after the backward pass (the reductions' flat copies,
// the stage 1-2 gradient partition, the step's flat fp32 gradient and torch AdamW's temporary) that is larger than
// every block the freed activations left cannot be carved from them (a block is split, never merged across
// segments), so cudaMalloc gives it a segment of its own, rounded to kRoundLarge (2 MiB). Freed, the segment stays
// cached; the next forward pass finds its activations' own blocks by best fit and leaves it idle, so at the
// activation peak it is reserved and not allocated. Later steps reuse these segments (best fit, splitting a larger
// free block and leaving its rest free, as stage 3's sub-groups of unequal size do), so their free blocks after two
// steps are the reserve; the first step's lazily created optimizer states, held ever after, are not counted. The
// stage 1-2 reduce buckets are taken out of the free blocks again: the step's peak is in the backward pass, after
// setup_buckets has allocated them at the first gradient hook. With a language model's loss (LossTensorBytes) its
// tensors, larger than any activation block, are replayed too, and the step's peak is in the loss's backward,
// where its three fp32 tensors are live and the buckets not yet allocated: the reserve is the free blocks then.
// Traced with torch's allocator history (bench/deepspeed/results-pending/README.md, 2026-11-26): the first step's
// LM-head backward puts the embedding gradient and autograd's cuBLAS workspace into a free logit-sized segment and
// the first optimizer step puts DeepSpeed's flat buffers and the lazy Adam states into others, so later steps'
// losses take segments of their own and these stay part-free.
// Before the first step the replay starts from what deepspeed.initialize left cached, unless the script empties the
// cache then (TrainingConfig::deepspeed_empty_cache_after_init). Stages 1-2 (stage_1_and_2.py __init__: empty_cache(),
// then flatten_dense_tensors_aligned on the device when it has room, then _update_model_bit16_weights points each
// parameter into the flat buffer) and BF16_Optimizer (stage 1 with fp32 gradient accumulation; bf16_optimizer.py
// _setup_for_real_optimizer: the same flatten and _update_storage_to_flattened_tensor, no empty_cache) free every
// per-parameter 16-bit tensor the engine moved to the device (engine.py _configure_distributed_model: cast on the
// host, then module.to(device)); the tensors no larger
// than an activation block stay idle (the activations' requests are larger than the blocks they free or are served
// from their own), the larger ones (the embedding) join the replay. Then the master partition is made from a clone of
// the 16-bit one (stage_1_and_2.py: .clone().to(master dtype); bf16_optimizer.py: .clone().float()), the clone freed.
// Stage 3 under zero.Init builds the partitions directly. Measured on 4x H200 (GPT-2 1.5B bf16, DeepSpeed 0.19.8,
// bench/deepspeed/results/x4_h200x4_2026-11-28.json): stages 1 and 2 use 2.81-2.88 GiB more than the planner's
// emptied-cache model, the per-parameter copies' 2.90 GiB.
// transformers' modules (TrainingConfig::model_code) save many tensors no larger than `activation_block`, which by
// best fit fill the free blocks of these segments each forward (only what they leave gets segments of their own):
// the reserve at the peak is what the step's segments have left beside the loss's tensors, and
// initialize_optimizer_states' zero fp32 gradient and stage 3's reduce-scatter stream are replayed too
// (bench/deepspeed/results-pending/README.md, traces of 2026-11-29).
// Stage 0's FP16_UnfusedOptimizer keeps one tensor per parameter instead: the 16-bit and fp32 zero gradients and the
// foreach step's temporaries of initialize_optimizer_states stay as free per-parameter segments, which the forward's
// saved tensors take by best fit where they fit (one hidden-state tensor per segment of a larger matrix); the rest
// of them, and the slack of the live per-parameter segments, is reserve at the peak (traces of 2026-11-29,
// memtrace-2026-11-29-stage0/).
// Stages 1-2 flatten on the host instead (moving the parameters there and emptying the cache: nothing is left)
// when the device's free memory is below the flat buffer; `device_free_bytes` is the device's memory less the CUDA
// context.
Bytes deepspeed_flat_buffer_segments(const ModelDescription& model, const MemoryInputs& in,
                                     const TrainingConfig& training, const DeepSpeedEnginePath& path,
                                     const DeepSpeedGpuBytes& gpu, Bytes activation_block, const LossTensorBytes& loss,
                                     Bytes device_free_bytes);

// fp16 at stage 3 with the optimizer on the GPU: the overflow test's segments, reserved and idle at the default
// stream's peak. stage3.py has_overflow runs torch.isinf and torch.isnan over the whole gradient partition
// (grad_partitions_flat_buffer, in the accumulation dtype) on reduce_and_partition_stream. ATen's isinf of a
// floating tensor is self.abs() == inf (aten/src/ATen/native/TensorCompare.cpp), so a partition-sized |g| and a
// bool mask are live together; isnan's mask (self != self) then takes the freed mask's block. The caching allocator
// keeps blocks freed on a stream for that stream (c10/cuda/CUDACachingAllocator.cpp: a block's stream is part of its
// pool key), so the default stream's forward and backward never reuse them. With the optimizer on the CPU the buffer
// is in host memory (stage3.py: device = "cpu"). Traced on one H200 for GPT-2 1.5B: a 2972 MiB and a 1486 MiB
// segment free at the allocated peak, 4.35 GiB more reserve than bf16 (bench/deepspeed/results-pending/
// probe-2026-11-26/).
Bytes deepspeed_overflow_test_segments(const MemoryInputs& in, const TrainingConfig& training,
                                       const DeepSpeedEnginePath& path);

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

// The terms of the two above: the process's device memory beyond the CUDA context and the flat buffers' segments
// (runtime_overhead; `flat_segments` is deepspeed_flat_buffer_segments' result, both together) and the host peak
// beyond DeepSpeed's offload buffers (host: the process, NCCL's and cuDNN's state, and the fp32 model built on the
// host where that moment is the larger).
void explain_deepspeed_reserve_and_host(const MemoryInputs& in, const TrainingConfig& training, Bytes flat_segments,
                                        const DeepSpeedHostBytes& steady, const DeepSpeedProcessHostBytes& process,
                                        std::vector<MemoryTerm>& terms);

void explain_deepspeed_memory(const MemoryInputs& in, const TrainingConfig& training, const DeepSpeedEnginePath& path,
                              const DeepSpeedGpuBytes& gpu, const DeepSpeedHostBytes& host,
                              std::vector<MemoryTerm>& terms);

}  // namespace zeroplan
