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

// The host_init and gpu_init terms (the initialization peaks) alone.
void explain_init_peaks(const MemoryInputs& in, const ZeroConfig& zero, const HostAndNvmeBytes& bytes,
                        std::vector<MemoryTerm>& terms);
void explain_host_and_nvme(const MemoryInputs& in, const ZeroConfig& zero, const ModelStatesBytes& states,
                           const ZeroBufferBytes& buffers, const HostAndNvmeBytes& bytes,
                           std::vector<MemoryTerm>& terms);

}  // namespace zeroplan
