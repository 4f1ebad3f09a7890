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

Bytes pinned_page_table_bytes(Bytes pinned_host_bytes) {
  constexpr Bytes kHostPage = 4096, kEntry = 8;
  return pinned_host_bytes <= 0 ? 0 : (pinned_host_bytes + kHostPage - 1) / kHostPage * kEntry;
}

void explain_executor_runtime(Bytes pinned_host_bytes, const RuntimeOverheadBytes& b,
                              std::vector<MemoryTerm>& terms) {
  if (b.allocation_granularity > 0)
    terms.push_back({"runtime_overhead", "the executor's allocations rounded up to 2 MiB device pages",
                     b.allocation_granularity,
                     "sum over its allocations of >= 2 MiB of the round-up, + the pages of the smaller ones less "
                     "their bytes",
                     "exec/activation_accounting.h (device_allocations, allocation_granularity_bytes); CUDA Driver "
                     "API cuMemGetAllocationGranularity"});
  if (b.nccl_window > 0)
    terms.push_back({"runtime_overhead", "NCCL's resources beside the copy-engine window of the gathered parameters",
                     b.nccl_window, "measured: the device's used bytes above the plan with the arena a window",
                     "exec/zero/zero_buffer_layout.h (kNcclCopyEngineWindowBytes)"});
  if (b.pinned_page_tables <= 0) return;
  terms.push_back({"runtime_overhead", "GPU page tables of this rank's pinned host memory", b.pinned_page_tables,
                   "ceil(" + num(pinned_host_bytes) + " pinned bytes / 4096) * 8",
                   "CUDA Programming Guide (unified virtual addressing maps page-locked host memory for the "
                   "device); 8-byte entries per 4 KiB host page"});
}

void explain_runtime_overhead(const RuntimeOverhead& runtime, std::int64_t world_size, Bytes reserve_basis_bytes,
                              const RuntimeOverheadBytes& b, std::vector<MemoryTerm>& terms, const char* nccl_source) {
  terms.push_back({"runtime_overhead", "CUDA context + cuBLAS workspace + NCCL buffers + allocator reserve",
                   b.fixed() + b.allocator_reserve,
                   num(b.cuda_context) + " + " + num(b.cublas_workspace) + " + " + num(b.nccl_buffers) +
                       (world_size > 1 ? "" : " (1 rank: no communicator)") + " + ceil(" +
                       num(runtime.allocator_reserve_fraction, 3) + " * activation and logit bytes " + num(reserve_basis_bytes) + ")",
                   std::string("cluster description runtime section; ") +
                       (nccl_source ? nccl_source
                                    : "zero-formulas.md sec. 3 (NCCL #864/#964, cuBLASLt workspace, allocator "
                                      "fragmentation)")});
}

}  // namespace zeroplan
