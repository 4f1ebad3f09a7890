// Model states (parameters, gradients, fp32 master copy, optimizer states) per GPU, per host process and on
// NVMe, for one ZeRO stage and offload choice. Sources: ZeRO paper (Rajbhandari et al., SC'20,
// arXiv 1910.02054) sec. 3 and 5; ZeRO-Offload (arXiv 2101.06840); ZeRO-Infinity (arXiv 2104.07857);
// DeepSpeed stage_1_and_2.py / stage3.py for what the engine really keeps (zero-formulas.md sec. 1-3).
#pragma once

#include <string>
#include <vector>

#include "core/units.h"
#include "sim/memory_inputs.h"

namespace zeroplan {

struct MemoryTerm;

struct ModelStatesBytes {
  // GPU, per rank
  Bytes params = 0;                  // 16-bit (fp32 when training in fp32) parameters resident on the GPU
  Bytes grads = 0;                   // 16-bit (fp32) gradients resident on the GPU
  Bytes grad_fp32_partition = 0;     // fp32 gradient partition materialized for the optimizer step
  Bytes master_params = 0;           // fp32 master parameters
  Bytes optimizer_states = 0;        // optimizer states incl. 8-bit quantization constants
  // Host, per rank (offload), and NVMe, per rank
  Bytes host_optimizer = 0;          // offloaded fp32 master + optimizer states + fp32 gradient partition
  Bytes host_params = 0;             // offload_param cpu: the 16-bit parameter partition
  Bytes nvme_optimizer = 0;          // offload_optimizer nvme: fp32 master + optimizer states
  Bytes nvme_params = 0;             // offload_param nvme: the 16-bit parameter partition
};

ModelStatesBytes model_states_bytes(const MemoryInputs& in);

// Optimizer state bytes for `params` parameters: K' * params, plus for 8-bit Adam the block-wise
// quantization constants (bitsandbytes, Dettmers et al. 2022, arXiv 2110.02861: one fp32 absmax per block of
// 2048 values, for each of the two states).
Bytes optimizer_state_bytes(const MemoryInputs& in, std::int64_t params);

// GPU terms only; the host and NVMe terms are explained per node by host_memory.h.
void explain_model_states(const MemoryInputs& in, const ModelStatesBytes& bytes, std::vector<MemoryTerm>& terms);

}  // namespace zeroplan
