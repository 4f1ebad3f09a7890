// Host memory per node (pinned and pageable) and NVMe per node for one plan choice, and the init-time peaks
// (zero-formulas.md sec. 2-3): what the offloaded model states and the staging buffers need, times the ranks
// sharing a node.
#pragma once

#include <vector>

#include "core/training_config.h"
#include "core/units.h"
#include "sim/memory_inputs.h"
#include "sim/model_states_memory.h"
#include "sim/zero_buffers_memory.h"

namespace zeroplan {

struct MemoryTerm;
struct HostMemoryBreakdown;

struct HostAndNvmeBytes {
  Bytes pinned = 0;           // per node
  Bytes pageable = 0;         // per node
  Bytes nvme = 0;             // per node
  Bytes init_peak_host = 0;   // per node, while the model is built and handed to the engine
  Bytes init_peak_gpu = 0;    // per GPU, stage 3 without zero_init (0 otherwise: no peak beyond training's)
};

HostAndNvmeBytes host_and_nvme_bytes(const MemoryInputs& in, const ZeroConfig& zero, const ModelStatesBytes& states,
                                     const ZeroBufferBytes& buffers, Bytes runtime_fixed_bytes);

// Host memory of one rank's process of zeroplan's executor beyond the offloaded states it pins: the CUDA runtime and
// libraries, cuBLASLt, and with more than one rank NCCL's host side (proxy threads, host-mapped buffers). Measured as
// the resident peak (VmHWM) less the pinned states: 0.380 GiB at world size 1 (GPT-2 1.5B, stages 1-3 with the
// optimizer offloaded, one H100 host, 2026-11-25, bench/exec/results/2026-11-25-one-gpu-h100/) and 0.723-0.746 GiB
// per rank at world size 2 (GPT-2 124M to 1.5B, two H200s, 2026-11-24, bench/exec/results/2026-11-23-two-gpu/);
// the larger of each.
Bytes executor_process_host_bytes(std::int64_t world_size);
// That term, and the kernel's page tables of each rank's `pinned_per_rank` bytes (runtime_overhead_memory.h
// pinned_page_table_bytes), which the plan's host total adds beside it.
void explain_executor_process_host(const MemoryInputs& in, Bytes pinned_per_rank, std::vector<MemoryTerm>& terms);

// The host_init and gpu_init terms (the initialization peaks) alone.
void explain_init_peaks(const MemoryInputs& in, const ZeroConfig& zero, const HostAndNvmeBytes& bytes,
                        std::vector<MemoryTerm>& terms);
void explain_host_and_nvme(const MemoryInputs& in, const ZeroConfig& zero, const ModelStatesBytes& states,
                           const ZeroBufferBytes& buffers, const HostAndNvmeBytes& bytes,
                           std::vector<MemoryTerm>& terms);

}  // namespace zeroplan
