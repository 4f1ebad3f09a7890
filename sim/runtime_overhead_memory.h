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
  Bytes pinned_page_tables = 0;      // the GPU's page tables mapping this rank's pinned host memory
  Bytes allocation_granularity = 0;  // zeroplan's executor: its allocations rounded up to the device's pages
  Bytes nccl_window = 0;             // zeroplan's executor gathering on the copy engines: NCCL's window resources
  Bytes fixed() const { return cuda_context + cublas_workspace + nccl_buffers; }
  Bytes total() const {
    return fixed() + allocator_reserve + pinned_page_tables + allocation_granularity + nccl_window;
  }
};

// Device memory the GPU's page tables take to map `pinned_host_bytes` of page-locked host memory of one process
// into its address space: cudaHostAlloc'd memory is mapped for the device under unified virtual addressing
// (CUDA Programming Guide, "Unified Virtual Address Space" and "Page-Locked Host Memory: Mapped Memory"), in the
// host's 4 KiB pages, each an 8-byte page-table entry in device memory (NVIDIA's GPU MMU: 64-bit PTEs), i.e.
// 1/512 of the pinned bytes. The one-H200 ZeRO-Offload runs of 2026-11-23 (bench/exec/results/2026-11-23-one-gpu)
// show it: 23.21 GiB pinned, the device's used bytes 46 MiB above the run without offload once its fp32 states
// are taken out (46.4 MiB by this formula).
Bytes pinned_page_table_bytes(Bytes pinned_host_bytes);

RuntimeOverheadBytes runtime_overhead_bytes(const RuntimeOverhead& runtime, std::int64_t world_size,
                                            Bytes reserve_basis_bytes);

// `nccl_source`: where the NCCL figure comes from when it is not the cluster's nccl_buffer_bytes (DeepSpeed's
// measured multi-rank increment); null for the default text.
void explain_runtime_overhead(const RuntimeOverhead& runtime, std::int64_t world_size, Bytes reserve_basis_bytes,
                              const RuntimeOverheadBytes& bytes, std::vector<MemoryTerm>& terms,
                              const char* nccl_source = nullptr);
// The terms zeroplan's executor adds (when there are any): pinned_page_tables and allocation_granularity.
void explain_executor_runtime(Bytes pinned_host_bytes, const RuntimeOverheadBytes& bytes,
                              std::vector<MemoryTerm>& terms);

}  // namespace zeroplan
