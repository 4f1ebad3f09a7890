// What every GPU process carries beyond its tensors, from the cluster description's RuntimeOverhead
// (zero-formulas.md sec. 3): CUDA context, cuBLAS(Lt) workspace, NCCL communicator buffers (only with more
// than one rank), and the caching allocator's reserve as a fraction of the activation and logit bytes (the
// zeroplan engine allocates exactly: no reserve).
#pragma once

#include <vector>

#include "core/cluster_description.h"
#include "core/units.h"

namespace zeroplan {

struct MemoryTerm;

struct RuntimeOverheadBytes {
  Bytes cuda_context = 0;
  Bytes cublas_workspace = 0;
  Bytes nccl_buffers = 0;
  Bytes allocator_reserve = 0;
  Bytes fixed() const { return cuda_context + cublas_workspace + nccl_buffers; }
  Bytes total() const { return fixed() + allocator_reserve; }
};

RuntimeOverheadBytes runtime_overhead_bytes(const RuntimeOverhead& runtime, std::int64_t world_size,
                                            Bytes reserve_basis_bytes);

void explain_runtime_overhead(const RuntimeOverhead& runtime, std::int64_t world_size, Bytes reserve_basis_bytes,
                              const RuntimeOverheadBytes& bytes, std::vector<MemoryTerm>& terms);

}  // namespace zeroplan
