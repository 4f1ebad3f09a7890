// Communication volume per GPU per optimizer step, by collective, with gradient accumulation: what the engine
// really sends (DeepSpeed 0.19.8's collectives for the DeepSpeed engine, sim/deepspeed_engine.h) beside the ZeRO
// paper's multiple (sec. 7: 2P for stages 0-2, 3P for stage 3), and the PCIe/NVMe traffic of offload
// (ZeRO-Offload paper: 4P bytes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/cluster_description.h"
#include "core/model_description.h"
#include "core/training_config.h"
#include "core/units.h"
#include "sim/plan_choice.h"

namespace zeroplan {

// One collective's traffic for one GPU in one optimizer step.
struct CollectiveVolume {
  CollectiveKind kind = CollectiveKind::all_reduce;
  std::int64_t calls = 0;          // collective calls per step (buckets, layers, micro-steps)
  std::int64_t elements = 0;       // elements of the full buffer S summed over calls (nccl-tests' count * n)
  Bytes bytes = 0;                 // elements * dtype bytes
  Bytes wire_bytes = 0;            // bytes each GPU sends under a ring: bytes * factor(n) (2(n-1)/n or (n-1)/n)
  std::string when;                // "backward, per bucket", "before each layer's forward", ...
};

struct CommVolume {
  std::vector<CollectiveVolume> collectives;  // all_reduce, reduce_scatter, all_gather (those that occur)
  Bytes total_bytes = 0;
  Bytes total_wire_bytes = 0;
  Bytes pcie_host_to_device_bytes = 0;  // per GPU per step (offload)
  Bytes pcie_device_to_host_bytes = 0;
  Bytes nvme_read_bytes = 0;            // per GPU per step
  Bytes nvme_write_bytes = 0;
  // This engine's traffic as a multiple of P: elements per rank in one micro-step's collectives / P, an all-reduce
  // counting twice (the ZeRO paper's accounting). DeepSpeed's stages 1-2 all-reduce whole buckets by default, so
  // theirs is 3 where the paper's is 2; its stage 3 skips the backward gathers of layers kept gathered.
  double multiple_of_params = 0.0;
  // The ZeRO paper's multiple for the stage (sec. 7): 2 for stages 0-2, 3 for stage 3, shown beside it.
  double paper_multiple_of_params = 0.0;
};

// Ring factor on the full buffer (nccl-tests PERFORMANCE.md): all-reduce 2(n-1)/n, all-gather and
// reduce-scatter (n-1)/n.
double ring_factor(CollectiveKind kind, int ranks);

// Bytes per element of the gradients and parameters on the wire: the training precision's, or 4 under autocast
// over fp32 parameters (fp32 .grad all-reduced, fp32 parameters broadcast). The simulator's schedule uses the
// same figure.
int communication_element_bytes(const TrainingConfig& training);
// The gradient reductions' element bytes: DeepSpeed's communication_data_type when the DeepSpeed engine is given
// one, else communication_element_bytes (parameters are always gathered in the model's dtype).
int gradient_communication_bytes(const TrainingConfig& training);

CommVolume estimate_comm(const ModelDescription& model, const ClusterDescription& cluster,
                         const TrainingConfig& training, const PlanChoice& choice);

}  // namespace zeroplan
