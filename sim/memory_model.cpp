// The memory model's assembly: each concern in its own file (model_states_memory, activation_memory,
// zero_buffers_memory, runtime_overhead_memory, host_memory), summed here into the per-GPU, per-node and NVMe
// figures. estimate_memory and explain_memory run the same computation; explain only adds the terms.
#include "sim/memory_model.h"

#include "sim/activation_memory.h"
#include "sim/host_memory.h"
#include "sim/memory_inputs.h"
#include "sim/model_states_memory.h"
#include "sim/runtime_overhead_memory.h"
#include "sim/saturating.h"
#include "sim/zero_buffers_memory.h"

namespace zeroplan {

std::vector<std::pair<std::string, Bytes>> GpuMemoryBreakdown::components() const {
  return {{"params", params},
          {"grads", grads},
          {"master_params", master_params},
          {"optimizer_states", optimizer_states},
          {"activations", activations},
          {"logits", logits},
          {"gradient_buckets", gradient_buckets},
          {"gathered_params", gathered_params},
          {"offload_buffers", offload_buffers},
          {"runtime_overhead", runtime_overhead}};
}

namespace {

MemoryEstimate compute(const ModelDescription& model, const ClusterDescription& cluster,
                       const TrainingConfig& training, const PlanChoice& choice, std::vector<MemoryTerm>* terms) {
  MemoryEstimate estimate;
  const MemoryInputs in = gather_memory_inputs(model, cluster, training, choice);
  const ModelStatesBytes states = model_states_bytes(in);
  const ActivationBytes activations = activation_bytes(model, training, in);
  const ZeroBufferBytes buffers = zero_buffer_bytes(in, training.zero);

  GpuMemoryBreakdown& gpu = estimate.gpu;
  gpu.params = states.params;
  gpu.grads = sat_add(states.grads, states.grad_fp32_partition);
  gpu.master_params = states.master_params;
  gpu.optimizer_states = states.optimizer_states;
  gpu.activations = activations.total;
  gpu.logits = activations.logits;
  gpu.gradient_buckets = buffers.gradient_buckets();
  gpu.gathered_params = buffers.gathered_params();
  gpu.offload_buffers = buffers.gpu_offload_staging;
  Bytes tensor_bytes = 0;
  for (Bytes component : {gpu.params, gpu.grads, gpu.master_params, gpu.optimizer_states, gpu.activations,
                          gpu.logits, gpu.gradient_buckets, gpu.gathered_params, gpu.offload_buffers})
    tensor_bytes = sat_add(tensor_bytes, component);
  // zeroplan's executor allocates exact sizes through one tagged allocator: no caching-allocator reserve.
  RuntimeOverhead runtime_description = cluster.runtime;
  if (in.engine == TrainingEngine::zeroplan) runtime_description.allocator_reserve_fraction = 0.0;
  const RuntimeOverheadBytes runtime = runtime_overhead_bytes(runtime_description, in.world_size, tensor_bytes);
  gpu.runtime_overhead = runtime.total();
  gpu.total = sat_add(tensor_bytes, gpu.runtime_overhead);

  const HostAndNvmeBytes host = host_and_nvme_bytes(in, training.zero, states, buffers, runtime.fixed());
  estimate.host.pinned = host.pinned;
  estimate.host.pageable = host.pageable;
  estimate.host.total = sat_add(host.pinned, host.pageable);
  estimate.nvme_bytes = host.nvme;
  estimate.init_peak_gpu_bytes = host.init_peak_gpu;
  estimate.init_peak_host_bytes = host.init_peak_host;

  if (terms) {
    explain_model_states(in, states, *terms);
    explain_activations(model, training, in, activations, *terms);
    explain_zero_buffers(in, training.zero, buffers, *terms);
    explain_runtime_overhead(runtime_description, in.world_size, tensor_bytes, runtime, *terms);
    explain_host_and_nvme(in, training.zero, states, buffers, host, *terms);
  }
  return estimate;
}

}  // namespace

MemoryEstimate estimate_memory(const ModelDescription& model, const ClusterDescription& cluster,
                               const TrainingConfig& training, const PlanChoice& choice) {
  return compute(model, cluster, training, choice, nullptr);
}

MemoryEstimate explain_memory(const ModelDescription& model, const ClusterDescription& cluster,
                              const TrainingConfig& training, const PlanChoice& choice) {
  std::vector<MemoryTerm> terms;
  MemoryEstimate estimate = compute(model, cluster, training, choice, &terms);
  estimate.terms = std::move(terms);
  return estimate;
}

}  // namespace zeroplan
