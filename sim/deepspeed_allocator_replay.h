// PyTorch's caching allocator replayed over DeepSpeed's allocations. sim/deepspeed_memory.h says which tensors
// DeepSpeed 0.19.8 allocates and when; what the device reserves is more than their sum, because torch's
// CUDACachingAllocator (c10/cuda/CUDACachingAllocator.cpp) keeps every segment it made cached after its tensors are
// freed and serves later requests only from blocks it can carve out of them. Which segments stay reserved and idle
// at the step's allocated peak depends on the order of the requests, so this file replays them in DeepSpeed's order
// with the allocator's own rules: a request rounded to kMinBlockSize (512 B) is served by the smallest free block at
// least its size (get_free_block, best fit; among equal sizes by address, BlockComparatorSize), which is split when
// more than kSmallSize (1 MiB) would be left (should_split); with none large enough cudaMalloc makes a segment
// (alloc_block; get_allocation_size: kLargeBuffer, 20 MiB, for a request below kMinLargeAlloc, 10 MiB, else the
// request rounded to kRoundLarge, 2 MiB); a freed block merges with its free neighbours in its segment, never across
// segments (free_block -> try_merge_blocks); a block freed on one stream is kept for that stream (a block's stream
// is part of its pool key). What these segments hold reserved and idle is the memory model's DeepSpeed
// runtime_overhead (explain_deepspeed_reserve_and_host in sim/deepspeed_memory.h).
#pragma once

#include <cstdint>
#include <vector>

#include "core/model_description.h"
#include "core/training_config.h"
#include "core/units.h"
#include "sim/deepspeed_engine.h"
#include "sim/memory_inputs.h"

namespace zeroplan {

struct DeepSpeedGpuBytes;  // sim/deepspeed_memory.h
struct LossTensorBytes;    // sim/deepspeed_memory.h

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
// `idle_at_loss` is the part of it measured at the loss's backward: the default stream's free blocks there, which
// the step's later requests (the optimizer's fp32 gradients and temporaries, FP16_UnfusedOptimizer's per-parameter
// ones) take before any new segment is made. Where the step's allocated peak comes later than the loss (full
// activation checkpointing: the loss holds little beside the model states), the timeline's peak holds only what of
// it is still idle then (sim/simulator.cpp). The side stream's segments, the small pools and the process's memory
// outside the allocator are not part of it.
struct DeepSpeedCachedReserve {
  Bytes total = 0;
  Bytes idle_at_loss = 0;  // 0 without a language model's loss (the replay then measures in the backward)
};
DeepSpeedCachedReserve deepspeed_flat_buffer_segments(const ModelDescription& model, const MemoryInputs& in,
                                                      const TrainingConfig& training, const DeepSpeedEnginePath& path,
                                                      const DeepSpeedGpuBytes& gpu, Bytes activation_block,
                                                      const LossTensorBytes& loss, Bytes device_free_bytes);

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

// Stage 3's sub-groups, in elements of one rank's partition, as stage3.py _create_fp16_sub_groups cuts the trainable
// parameters (deepspeed_allocator_replay.cpp says how); the replay's set-up and step go sub-group by sub-group.
std::vector<std::int64_t> deepspeed_stage3_sub_groups(const ModelDescription& model, const TrainingConfig& training,
                                                      const MemoryInputs& in);

// The elements in stage 3's ipg bucket at each of a backward's reductions, in their order (stage3.py
// reduce_independent_p_g_buckets_and_remove_grads); each sets a reduce-scatter's torch.cat.
std::vector<std::int64_t> deepspeed_stage3_reduce_bucket_fills(const ModelDescription& model,
                                                               const TrainingConfig& training);

}  // namespace zeroplan
