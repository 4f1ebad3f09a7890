#include "sim/runtime_overhead_memory.h"

#include <cmath>

#include "sim/memory_model.h"
#include "sim/saturating.h"
#include "sim/term_format.h"

namespace zeroplan {

RuntimeOverheadBytes runtime_overhead_bytes(const RuntimeOverhead& runtime, std::int64_t world_size,
                                            Bytes reserve_basis_bytes) {
  RuntimeOverheadBytes b;
  b.cuda_context = runtime.cuda_context_bytes;
  b.cublas_workspace = runtime.cublas_workspace_bytes;
  // One data-parallel communicator; a single rank creates none.
  b.nccl_buffers = world_size > 1 ? runtime.nccl_buffer_bytes : 0;
  const double reserve = std::ceil(runtime.allocator_reserve_fraction * static_cast<double>(reserve_basis_bytes));
  b.allocator_reserve = reserve >= static_cast<double>(kSaturatedBytes) ? kSaturatedBytes
                                                                         : static_cast<Bytes>(reserve);
  return b;
}

void explain_runtime_overhead(const RuntimeOverhead& runtime, std::int64_t world_size, Bytes reserve_basis_bytes,
                              const RuntimeOverheadBytes& b, std::vector<MemoryTerm>& terms) {
  terms.push_back({"runtime_overhead", "CUDA context + cuBLAS workspace + NCCL buffers + allocator reserve",
                   b.total(),
                   num(b.cuda_context) + " + " + num(b.cublas_workspace) + " + " + num(b.nccl_buffers) +
                       (world_size > 1 ? "" : " (1 rank: no communicator)") + " + ceil(" +
                       num(runtime.allocator_reserve_fraction, 3) + " * activation and logit bytes " + num(reserve_basis_bytes) + ")",
                   "cluster description runtime section; zero-formulas.md sec. 3 (NCCL #864/#964, cuBLASLt "
                   "workspace, allocator fragmentation)"});
}

}  // namespace zeroplan
