// What the ZeRO engine allocates beside the model states, decided from the layout, the partition and the
// settings alone (no device, no communicator): the gradient bucket buffers of stages 2-3 and stage 3's gather
// units, persistent tensors and fetch plans. The engine (zero_engine.cpp) allocates exactly this, and the
// planner's `--engine zeroplan` model (sim/executor_layout.cpp) counts exactly this, so the two agree by
// construction. Pure C++: this file and its dependencies (param_layout, zero_partition, core/zero3_fetch_plan)
// form the zeroplan_exec_layout library, which sim links without the executor's backends.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/zero3_fetch_plan.h"
#include "exec/exec_config.h"
#include "exec/param_layout.h"
#include "exec/zero/zero_partition.h"

namespace zeroplan::exec {

// Stage 3 of a layer list (replayed as a CUDA graph): units gathered ahead of their use at once
// (core/zero3_fetch_plan.h max_units_ahead; zero_buffer_layout.cpp says why).
inline constexpr int kGraphPrefetchUnitsAhead = 2;

// Whether a stage-3 engine keeps no 16-bit parameter partition: with the fp32 master on the device (16-bit
// training, neither optimizer nor parameters offloaded, trained parameters) each all-gather casts the rank's chunk
// of the master into its own slot of the gathered buffer and gathers in place, as FSDP2 keeps fp32 sharded
// parameters and casts them to its param_dtype for each all-gather (torch/distributed/fsdp/_fully_shard/
// _fsdp_param.py all_gather_inputs). The values gathered are the same bits: AdamW writes the 16-bit copy as the
// rounding of the master (exec/cuda/adamw.cu), and the cast rounds the same way. DeepSpeed's stage 3 keeps the
// 16-bit partition (zero/stage3.py fp16_partitioned_groups) beside its fp32 copy; this saves e*P/N bytes a GPU
// (Llama-2 7B on two GPUs: 6.3 GiB) for a cast of the chunk on the communication lane before each all-gather.
inline bool stage3_gathers_cast_master(const ZeroSettings& zero, bool sixteen_bit, bool frozen) {
  return zero.stage == 3 && sixteen_bit && !frozen && !zero.offload_optimizer && !zero.offload_param;
}

// Whether a run's stage-3 all-gathers go to NCCL's copy engines (exec/comm/nccl_communicator.h copy_engine_gathers,
// the gathered-parameter arena an NCCL window): stage 3 of a transformer on several ranks, without LoRA or offload,
// the configuration measured with them (bench/llama/results/2026-11-30-h200x2/call7, call8).
inline bool stage3_copy_engine_gathers(const ExecConfig& c, int world) {
  return world > 1 && c.zero.stage == 3 && !c.network && !c.lora.enabled && !c.zero.offload_optimizer &&
         !c.zero.offload_param;
}
// Device memory NCCL 2.28.3 takes beside a communicator created with the zero-CTA policy and one registered window,
// outside the window itself: the device used by TinyLlama's and Llama-2 7B's stage-3 runs on 2x H200 rose by
// exactly this much over their plans with the arena as a window, whatever the arena's size (0.36 and 1.38 GiB;
// bench/llama/results/2026-11-30-h200x2/call8).
inline constexpr std::int64_t kNcclCopyEngineWindowBytes = 48'300'032;

// The partition rules of a configuration (stage 3 cuts at gather units and persistence runs).
PartitionRules partition_rules(const ZeroSettings& zero);

struct ZeroBufferLayout {
  // Stages 2-3: the buffer each bucket's gradients are written to during backward: rotating buffers of the largest
  // bucket, then (stage 3) the persistent buckets' two rotating buffers of the largest persistent bucket, then one
  // per embeddings bucket, of its size.
  std::vector<int> bucket_slot;            // per bucket
  std::vector<std::int64_t> slot_elements;  // per buffer
  // Stages 2-3: the reduce-scatter's output chunk (communication precision) when it cannot land in the gradient
  // partition itself: micro-steps after the first (they add to it), or a partition in another precision.
  std::int64_t accumulation_scratch = 0;
  // fp32_communication: the bucket converted to fp32 before its reduction (stage_1_and_2.py allreduce_bucket's
  // tensor.to(communication_data_type)), one at a time on the communication lane: the largest bucket, fp32. None
  // at stages 0-1 when the gradients themselves accumulate in fp32 (they are reduced in place).
  std::int64_t communication_copy = 0;
  // Stages 0-1 with fp32_grad_accumulation: backward writes each micro-step's gradients here (model precision,
  // every element), added bucket by bucket into the fp32 gradients; at the boundary, with 16-bit communication,
  // a finished bucket's region is its communication copy. Counted as gradients.
  std::int64_t micro_step_gradients = 0;
  bool fp32_communication = false;  // the precision of accumulation_scratch (else the model's)

  // Stage 3.
  std::vector<std::pair<std::int64_t, std::int64_t>> units;  // gather units (flat ranges)
  std::vector<std::vector<int>> unit_buckets;                // each unit's partitioned buckets
  std::vector<std::int64_t> unit_gather_lo;                  // flat index at the unit's arena offset 0
  std::vector<int> bucket_unit;                              // per bucket
  std::vector<std::int64_t> persistent_offset;               // per bucket: offset among persistent tensors or -1
  std::int64_t persistent_elements = 0;
  Zero3FetchPlan train_plan, forward_plan;                   // forward + backward; forward alone (evaluation)
  std::int64_t arena_elements = 0;                           // the larger of the two plans' arenas
  // Stage 3 with offload_param: device buffers each partition chunk is copied into from host memory before
  // its all-gather (and the device AdamW writes into before the copy back): min(buffer_count, buckets)
  // buffers of the largest chunk's elements. largest_chunk: the largest chunk of any bucket (stage 3), which
  // offload_param.buffer_size must hold.
  int param_staging_buffers = 0;
  std::int64_t param_staging_elements = 0;  // per buffer
  std::int64_t largest_chunk = 0;
  // Stage 3 with offload_param nvme (zero.param_nvme_path set; exec/offload/param_swapper.h): per bucket, the
  // elements of its chunk in a swap file (0: kept in pinned host memory: a persistent tensor's chunk, whose whole
  // copy lives on the device and which the step's update gathers right after writing it, or one of the first
  // chunks in bucket order, the top of the layout first, within offload_param.max_in_cpu elements or, without it,
  // within the swap buffers' pinned budget: zero_buffer_layout.cpp), and where a chunk kept in host memory sits
  // there (-1 for one on NVMe). Swap buffers: min(buffer_count, chunks on NVMe), each of the largest chunk on NVMe.
  std::vector<std::int64_t> param_nvme_chunk;
  std::vector<std::int64_t> param_host_offset;
  std::int64_t param_host_elements = 0;
  int param_swap_buffers = 0;
  std::int64_t param_swap_buffer_elements = 0;
  // Bytes for an element size (std::overflow_error past int64). The swap files: each chunk padded to the 4096-byte
  // direct-I/O block (nvme_io.h). The pinned swap buffers: each the largest chunk so padded, one block more to align
  // them (param_swapper.cpp).
  std::int64_t param_nvme_file_bytes(std::int64_t element_bytes) const;
  std::int64_t param_swap_buffer_bytes(std::int64_t element_bytes) const;
  // The disk's traffic of a training step once steps repeat, replayed through the swapper's buffer policy
  // (exec/offload/swap_buffer_policy.h) in the order the engine drives it: per micro-step, the train plan's
  // all-gathers (every chunk on NVMe of every gather, planned, read ahead by the buffer count, each released right
  // after its copy to the device), then the update's writes of every chunk on NVMe in bucket order (update_reads,
  // fp32 training with the device AdamW: each chunk read first, ahead by one buffer fewer). A chunk still in a swap
  // buffer is not read; every chunk is written once per step; whole 4096-byte blocks both ways.
  struct ParamNvmeTraffic {
    std::int64_t read_bytes = 0;   // per step
    std::int64_t write_bytes = 0;  // per step
    // [micro-step][gather, in train_plan order]: the bytes read for it (0: every chunk of it was in a buffer)
    std::vector<std::vector<std::int64_t>> gather_read_bytes;
  };
  ParamNvmeTraffic param_nvme_traffic(std::int64_t element_bytes, std::int64_t grad_accum, bool update_reads) const;
  std::int64_t param_nvme_write_bytes_per_step(std::int64_t element_bytes) const {
    return param_nvme_file_bytes(element_bytes);
  }

  // Bytes of the bucket buffers, the accumulation scratch and the communication copy, for a model precision of
  // `element_bytes` (the planner's gradient_buckets component).
  std::int64_t gradient_buffer_bytes(std::int64_t element_bytes) const;
  std::int64_t param_staging_total() const { return param_staging_buffers * param_staging_elements; }
};

// The bytes a chunk of `elements` takes in a swap file and buffer: elements x element_bytes rounded up to the
// direct-I/O block (4096); std::overflow_error past int64.
std::int64_t padded_swap_bytes(std::int64_t elements, std::int64_t element_bytes);

ZeroBufferLayout zero_buffer_layout(const ParamLayout& layout, const ZeroPartition& partition,
                                    const ZeroSettings& zero, std::int64_t grad_accum);

}  // namespace zeroplan::exec
