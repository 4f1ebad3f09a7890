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
// the larger of each. A layer list (`convolutions`) adds what cuDNN's convolution and batch-norm engines bring into
// the process: 0.442 GiB, ResNet-101's VmHWM on one H200 at stage 0 (0.822 GiB, micro-batch 128, fp16,
// bench/resnet/results/2026-11-29-h200x2/call15 probe_1gpu.json) less the 0.380 above. The pages are the library
// files' (VmHWM counts them in each rank; a node's ranks share them).
Bytes executor_process_host_bytes(std::int64_t world_size, bool convolutions);
// What the kernel and the GPU driver hold for one rank's `pinned_per_rank` bytes of cudaHostAlloc'd memory beyond
// the process's resident set and the page tables (the driver's records of the pages it pinned and mapped for the
// GPUs): measured on a node, not derived, as the node's host memory at its peak (MemAvailable at launch less its
// lowest, run/process_memory.h HostMemoryWatch) less the plan's states, processes and page tables. 2x H200,
// 2026-11-26 (bench/exec/results/2026-11-26-offload-h200/): 4.30 GiB at 234.24 GiB pinned (gpt2-h6144-l34, stage 3,
// optimizer and parameters on the CPU): 1.84% of the pinned bytes; at 23.21 GiB pinned (GPT-2 1.5B) it measured
// -0.1 to 0.16 GiB, which the same 1.84% over-counts by 0.3 GiB (1.1% of that node's total). Without it a plan
// filled that host to 249.7 of 251.1 GiB and the OOM killer ended the run in start-up.
Bytes pinned_kernel_share_bytes(Bytes pinned_per_rank);
// That term, the kernel's share above, and the kernel's page tables of each rank's `pinned_per_rank` bytes (runtime_overhead_memory.h
// pinned_page_table_bytes), which the plan's host total adds beside it.
void explain_executor_process_host(const MemoryInputs& in, Bytes pinned_per_rank, std::vector<MemoryTerm>& terms);

// The host_init and gpu_init terms (the initialization peaks) alone.
void explain_init_peaks(const MemoryInputs& in, const ZeroConfig& zero, const HostAndNvmeBytes& bytes,
                        std::vector<MemoryTerm>& terms);
void explain_host_and_nvme(const MemoryInputs& in, const ZeroConfig& zero, const ModelStatesBytes& states,
                           const ZeroBufferBytes& buffers, const HostAndNvmeBytes& bytes,
                           std::vector<MemoryTerm>& terms);

}  // namespace zeroplan
