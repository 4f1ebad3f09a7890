// The ZeRO engine's communication and offload buffers per GPU (zero-formulas.md sec. 3, DeepSpeed
// stage_1_and_2.py and stage3.py): gradient reduce buckets, the stage 1/2 parameter all-gather bucket, stage 3's
// gathered (in flight and prefetched) and persistent parameters, and the offload staging buffers on the GPU
// and in pinned host memory.
#pragma once

#include <vector>

#include "core/training_config.h"
#include "core/units.h"
#include "sim/memory_inputs.h"

namespace zeroplan {

struct MemoryTerm;

struct ZeroBufferBytes {
  Bytes reduce_buckets = 0;        // gradient reduce (stage 0: all-reduce) buckets
  Bytes allgather_bucket = 0;      // stage 1/2 parameter all-gather bucket
  Bytes gathered_in_flight = 0;    // stage 3: gathered + prefetched parameters
  Bytes persistent_params = 0;     // stage 3: params below the persistence threshold, whole on every GPU
  Bytes gpu_offload_staging = 0;   // stage 1/2 optimizer offload: temp_grad_buffer_for_gpu_offload
  Bytes host_pinned_staging = 0;   // per rank: pinned host staging buffers (offload, NVMe swap buffers)
  Bytes gradient_buckets() const { return reduce_buckets + allgather_bucket; }
  Bytes gathered_params() const { return gathered_in_flight + persistent_params; }
};

ZeroBufferBytes zero_buffer_bytes(const MemoryInputs& in, const ZeroConfig& zero);

// GPU terms (gradient_buckets, gathered_params, offload_buffers); the host staging term is explained with the
// host memory.
void explain_zero_buffers(const MemoryInputs& in, const ZeroConfig& zero, const ZeroBufferBytes& bytes,
                          std::vector<MemoryTerm>& terms);

}  // namespace zeroplan
