// The memory model's assembly: each concern in its own file (model_states_memory, activation_memory,
// zero_buffers_memory, runtime_overhead_memory, host_memory), summed here into the per-GPU, per-node and NVMe
// figures. estimate_memory and explain_memory run the same computation; explain only adds the terms.
#include "sim/memory_model.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "sim/activation_memory.h"
#include "core/input_error.h"
#include "sim/executor_device_memory.h"
#include "sim/host_memory.h"
#include "sim/lora_model.h"
#include "sim/memory_inputs.h"
#include "sim/model_states_memory.h"
#include "sim/runtime_overhead_memory.h"
#include "sim/saturating.h"
#include "sim/term_format.h"
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

// DeepSpeed's engine, term by term as it allocates (sim/deepspeed_memory.h). Activations, logits and stage 3's
// gathered and persistent parameters as for every engine; host and NVMe per rank times the ranks of a node.
MemoryEstimate compute_deepspeed(const ModelDescription& model, const ClusterDescription& cluster,
                                 const TrainingConfig& given, const PlanChoice& choice, const MemoryInputs& in,
                                 const LoraFigures& lora, std::vector<MemoryTerm>* terms) {
  MemoryEstimate estimate;
  // The plan's stage and offloads (and their overlap_comm default), whatever the caller applied.
  const TrainingConfig training = apply_choice(given, choice);
  const DeepSpeedEnginePath path = deepspeed_engine_path(training);
  const DeepSpeedGpuBytes ds = deepspeed_gpu_bytes(in, training, path);
  const ActivationBytes activations = activation_bytes(model, training, in);
  const ZeroBufferBytes buffers = zero_buffer_bytes(in, training.zero);
  const TransientGpuBytes& t = ds.transient;

  GpuMemoryBreakdown& gpu = estimate.gpu;
  gpu.params = ds.params;
  gpu.grads = sat_add(ds.held_grads, t.grads());
  gpu.master_params = ds.master_params;
  gpu.optimizer_states = sat_add(ds.optimizer_states, t.step_temporaries);
  gpu.activations = activations.total;
  gpu.logits = activations.logits;
  gpu.gradient_buckets = sat_add(ds.held_buckets, t.buckets());
  gpu.gathered_params = in.stage == 3 ? buffers.gathered_params() : 0;
  // A quantised LoRA base gathers its codes: the in-flight gathered bytes at the model's gathered bytes per element
  // (sim/lora_model.h) instead of the precision's; the persistent (norms) stay 16-bit.
  Bytes lora_gathered_in_flight = buffers.gathered_in_flight;
  if (in.stage == 3 && training.lora.enabled && training.lora.quantize_base != BaseQuantization::none) {
    lora_gathered_in_flight = static_cast<Bytes>(
        std::llround(static_cast<double>(in.deepspeed_gathered_live_params) *
                     lora_model_gather_bytes_per_element(model, training)));
    gpu.gathered_params = sat_add(lora_gathered_in_flight, buffers.persistent_params);
  }
  gpu.offload_buffers = ds.offload_staging;
  // LoRA: `in` describes the adapters (the trainable parameters, sim/lora_model.h); the frozen base, the quantisation
  // constants, the dequantised weight and the adapters' saved activations are added here.
  const LoraBaseBytes lora_base =
      lora_base_bytes(lora, training, in.stage, in.world_size, in.offload_param != OffloadDevice::none, activations.tokens);
  gpu.params = sat_add(gpu.params, sat_add(sat_add(lora_base.unquantized, lora_base.codes),
                                           sat_add(lora_base.constants, lora_base.dequantized_weight)));
  gpu.activations = sat_add(gpu.activations, lora_base.adapter_activations);
  estimate.transient = t;
  Bytes tensor_bytes = 0;
  for (Bytes component : {gpu.params, gpu.grads, gpu.master_params, gpu.optimizer_states, gpu.activations,
                          gpu.logits, gpu.gradient_buckets, gpu.gathered_params, gpu.offload_buffers})
    tensor_bytes = sat_add(tensor_bytes, component);
  // The caching allocator's reserve: the fragmentation of the activations' blocks (cluster description:
  // runtime.allocator_fragmentation_of_activations) and the segments DeepSpeed's flat buffers leave cached.
  const Bytes churn = sat_add(gpu.activations, gpu.logits);
  // At more than one rank a DeepSpeed rank connects its communicators to its peers: the cluster's measured
  // increment over the one-rank process where it gives one (deepspeed_process_device_bytes holds a communicator
  // already), else a whole communicator's buffers.
  RuntimeOverhead deepspeed_runtime = cluster.runtime;
  if (cluster.runtime.deepspeed_multi_rank_device_bytes > 0)
    deepspeed_runtime.nccl_buffer_bytes = cluster.runtime.deepspeed_multi_rank_device_bytes;
  const RuntimeOverheadBytes runtime = runtime_overhead_bytes(deepspeed_runtime, in.world_size, churn);
  LossTensorBytes loss = loss_tensor_bytes(model, training, activations, cluster.runtime.cublas_workspace_bytes);
  // LoRA: the output head is frozen, so its backward makes no weight gradient (only the input gradient).
  if (training.lora.enabled) loss.embedding_grad = 0;
  const DeepSpeedCachedReserve reserve = deepspeed_flat_buffer_segments(
      model, in, training, path, ds, largest_activation_block(model, training, activations), loss,
      cluster.gpu_memory_bytes - cluster.runtime.cuda_context_bytes);
  const Bytes flat_segments = reserve.total;
  estimate.reserve_idle_at_loss = reserve.idle_at_loss;
  const Bytes overflow_test = deepspeed_overflow_test_segments(in, training, path);
  const Bytes second_communicator =
      !deepspeed_uses_second_communicator(in, training) ? 0
      : in.world_size > 1                               ? cluster.runtime.nccl_second_communicator_multi_rank_device_bytes
                                                        : cluster.runtime.nccl_second_communicator_device_bytes;
  gpu.runtime_overhead =
      sat_add(sat_add(runtime.total(), flat_segments), sat_add(overflow_test, second_communicator));
  gpu.total = sat_add(tensor_bytes, gpu.runtime_overhead);

  // Host and NVMe: DeepSpeed's offload buffers per rank, the NVMe swap buffers, and the initialization peaks.
  const DeepSpeedHostBytes host = deepspeed_host_bytes(in, training, path);
  const Bytes stage12_staging =
      in.stage <= 2 && in.offload_optimizer != OffloadDevice::none ? sat_mul(in.param_bytes, in.largest_module_params) : 0;
  const Bytes swap_buffers = buffers.host_pinned_staging - stage12_staging;
  estimate.host.pinned = sat_mul(sat_add(host.pinned, swap_buffers), in.ranks_per_node);
  estimate.host.pageable = sat_mul(host.pageable, in.ranks_per_node);
  // A rank's process at its peak: torch and the CUDA libraries, and the model built on the host in fp32 or what
  // DeepSpeed keeps there, whichever is larger (sim/deepspeed_memory.h deepspeed_host_peak_per_rank).
  const DeepSpeedHostBytes steady{sat_add(host.pinned, swap_buffers), host.pageable, host.nvme};
  // cuDNN's libraries where the model has convolutions (a layer list: the planner times those as convolutions too,
  // sim/compute_time.h); a transformer runs GEMMs only.
  DeepSpeedProcessHostBytes process;
  process.process = cluster.runtime.host_process_bytes;
  process.nccl = cluster.runtime.nccl_host_bytes;
  process.convolution = model.transformer ? 0 : cluster.runtime.host_convolution_process_bytes;
  estimate.host.total = sat_mul(deepspeed_host_peak_per_rank(in, training, steady, process), in.ranks_per_node);
  estimate.nvme_bytes = sat_mul(host.nvme, in.ranks_per_node);
  // LoRA at stage 3 with offload_param: the frozen base's partition lives where the adapters' does (DeepSpeed's
  // engine terms above hold the adapters'), pinned on the host (stage3.py _create_param_groups_fp16_flat_cpu_memory)
  // or on NVMe (the parameter swapper's files).
  Bytes lora_offloaded_base = 0;
  if (training.lora.enabled && in.stage == 3 && in.offload_param != OffloadDevice::none) {
    const LoraBaseBytes partition = lora_base_bytes(lora, training, 3, in.world_size, false, activations.tokens);
    lora_offloaded_base = sat_mul(sat_add(partition.unquantized, partition.codes), in.ranks_per_node);
    if (in.offload_param == OffloadDevice::cpu) {
      estimate.host.pinned = sat_add(estimate.host.pinned, lora_offloaded_base);
      estimate.host.total = sat_add(estimate.host.total, lora_offloaded_base);
    } else {
      estimate.nvme_bytes = sat_add(estimate.nvme_bytes, lora_offloaded_base);
    }
  }
  // The initialization peaks are the whole model's as it is built, the frozen base of a LoRA plan included; a
  // quantised base is built on the GPU (sim/deepspeed_memory.cpp deepspeed_host_init_bytes), in its own bytes.
  MemoryInputs built = in;
  if (training.lora.enabled && training.lora.quantize_base == BaseQuantization::none)
    built.params = sat_add(in.params, in.lora_frozen_params);
  const HostAndNvmeBytes init =
      host_and_nvme_bytes(built, training.zero, model_states_bytes(built), buffers, runtime.fixed());
  estimate.init_peak_gpu_bytes = init.init_peak_gpu;
  estimate.init_peak_host_bytes = init.init_peak_host;

  if (terms) {
    explain_deepspeed_memory(in, training, path, ds, host, *terms);
    explain_activations(model, training, in, activations, *terms);
    if (training.lora.enabled) {
      explain_lora_memory(lora, lora_base, training, in.stage, in.world_size, activations.tokens, *terms);
      if (in.stage == 3 && lora_gathered_in_flight != buffers.gathered_in_flight)
        terms->push_back({"gathered_params",
                          "LoRA: the quantised base's gathered codes in flight (in place of the 16-bit figure of the "
                          "gathered parameters above)",
                          lora_gathered_in_flight,
                          num(in.deepspeed_gathered_live_params) + " elements * " +
                              num(lora_model_gather_bytes_per_element(model, training), 3) +
                              " B (the model's gathered bytes per element: codes of the quantised linears, 16-bit "
                              "for the rest)",
                          "bitsandbytes Params4bit / Int8Params as ZeRO-3 partitions them (bnb_4bit_quant_storage); "
                          "DeepSpeed 0.19.8 zero/partitioned_param_coordinator.py"});
      if (lora_offloaded_base > 0)
        terms->push_back({in.offload_param == OffloadDevice::cpu ? "host" : "nvme",
                          "LoRA: the frozen base's partition (offload_param) x ranks per node", lora_offloaded_base,
                          "(bytes * unquantised + codes) / " + num(in.world_size) + " * " + num(in.ranks_per_node),
                          "DeepSpeed 0.19.8 zero/partition_parameters.py (every parameter partitioned), zero/stage3.py "
                          "offload_param"});
    }
    if (in.stage == 3) explain_zero_buffers(in, training.zero, buffers, *terms);
    explain_runtime_overhead(deepspeed_runtime, in.world_size, churn, runtime, *terms,
                             cluster.runtime.deepspeed_multi_rank_device_bytes > 0 && in.world_size > 1
                                 ? "NCCL: runtime.deepspeed_multi_rank_device_bytes, what a DeepSpeed rank holds "
                                   "outside the caching allocator at more than one rank beyond "
                                   "runtime.deepspeed_process_device_bytes (measured; bench/deepspeed/"
                                   "footprint-2026-11-26/); zero-formulas.md sec. 3 (cuBLASLt workspace, allocator "
                                   "fragmentation)"
                                 : nullptr);
    explain_deepspeed_reserve_and_host(in, training, flat_segments, steady, process, *terms);
    if (overflow_test > 0)
      terms->push_back({"runtime_overhead",
                        "fp16 overflow test's segments on reduce_and_partition_stream (|g| and a bool mask of the "
                        "gradient partition; idle at the default stream's peak)",
                        overflow_test,
                        num(path.accumulation_bytes) + " * " + num(in.partition_params) + " + " +
                            num(in.partition_params) + " bytes, each rounded to a 2 MiB segment",
                        "DeepSpeed zero/stage3.py has_overflow (torch.isinf, torch.isnan of grad_partitions_flat_buffer); "
                        "ATen native/TensorCompare.cpp isinf (self.abs() == inf); c10/cuda/CUDACachingAllocator.cpp "
                        "(per-stream pools)"});
    if (second_communicator > 0)
      terms->push_back({"runtime_overhead",
                        "NCCL's second group's buffers (the world group beside DeepSpeed's clone of it)",
                        second_communicator,
                        in.world_size > 1 ? "runtime.nccl_second_communicator_multi_rank_device_bytes"
                                          : "runtime.nccl_second_communicator_device_bytes",
                        "DeepSpeed utils/groups.py _clone_world_group; zero/partition_parameters.py Init (the world "
                        "group), zero/stage3.py has_overflow (the clone); bench/deepspeed/footprint-2026-11-26/"});
    if (swap_buffers > 0)
      terms->push_back({"host", "NVMe swap buffers (pinned) x ranks per node", sat_mul(swap_buffers, in.ranks_per_node),
                        "offload_param / offload_optimizer buffer_count x buffer size, x " + std::to_string(in.ranks_per_node),
                        "DeepSpeed swap_tensor/ (pinned swap buffers); zero-formulas.md sec. 3"});
    explain_init_peaks(built, training.zero, init, *terms);
  }
  return estimate;
}

MemoryEstimate compute(const ModelDescription& model, const ClusterDescription& cluster,
                       const TrainingConfig& given, const PlanChoice& choice, std::vector<MemoryTerm>* terms) {
  MemoryEstimate estimate;
  // The plan's stage and offloads, and the engine's overlap_comm default (it sizes the executor's buckets).
  const TrainingConfig training = apply_choice(given, choice);
  MemoryInputs in = gather_memory_inputs(model, cluster, training, choice);
  LoraFigures lora;
  // LoRA on zeroplan's own engine: what its CUDA trainer allocates, from its own list (below).
  std::optional<std::vector<exec::DeviceAllocation>> lora_allocations;
  if (training.lora.enabled) {
    if (in.engine == TrainingEngine::zeroplan) {
      lora_allocations = executor_lora_allocations(model, training, static_cast<int>(in.world_size), in.stage);
      if (!lora_allocations)
        throw InputError(model.source, "lora", "LoRA on zeroplan's engine needs a transformer the executor trains");
    } else if (in.engine != TrainingEngine::deepspeed) {
      throw InputError("training", "lora", "LoRA is planned for the DeepSpeed and zeroplan engines (engine " +
                                               to_string(in.engine) + " has no LoRA model)");
    } else {
      lora = lora_figures(model, training);
      apply_lora_to_memory_inputs(lora, in);
    }
  }
  if (in.engine == TrainingEngine::deepspeed) return compute_deepspeed(model, cluster, training, choice, in, lora, terms);
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
  if (lora_allocations) {
    // LoRA: every component is the sum of the CUDA trainer's allocations tagged with it (exec/activation_accounting.h
    // device_allocations: the frozen base's engine, parameters only and at stage 3 its partition and gathered
    // units; the adapters' engine with their gradients, fp32 master, AdamW moments and buckets; the trainer's
    // activations with LoRA's x A^T; NF4's codes, constants and dequantised scratch under params). Its workspace
    // is the runtime's below (executor_device_bytes), as without LoRA.
    gpu = GpuMemoryBreakdown{};
    for (const exec::DeviceAllocation& a : *lora_allocations) {
      Bytes* into = a.component == "params"             ? &gpu.params
                    : a.component == "grads"            ? &gpu.grads
                    : a.component == "master_params"    ? &gpu.master_params
                    : a.component == "optimizer_states" ? &gpu.optimizer_states
                    : a.component == "activations"      ? &gpu.activations
                    : a.component == "logits"           ? &gpu.logits
                    : a.component == "gradient_buckets" ? &gpu.gradient_buckets
                    : a.component == "gathered_params"  ? &gpu.gathered_params
                    : a.component == "offload_buffers"  ? &gpu.offload_buffers
                                                        : nullptr;  // workspace: the runtime's
      if (into) *into = sat_add(*into, a.bytes);
    }
  }
  Bytes tensor_bytes = 0;
  for (Bytes component : {gpu.params, gpu.grads, gpu.master_params, gpu.optimizer_states, gpu.activations,
                          gpu.logits, gpu.gradient_buckets, gpu.gathered_params, gpu.offload_buffers})
    tensor_bytes = sat_add(tensor_bytes, component);
  // zeroplan's executor allocates exact sizes through one tagged allocator: no caching-allocator reserve.
  RuntimeOverhead runtime_description = cluster.runtime;
  if (in.engine == TrainingEngine::zeroplan) runtime_description.allocator_reserve_fraction = 0.0;
  // The caching allocator's reserve: a fraction of the activation and logit bytes (cluster description).
  const Bytes reserve_basis = sat_add(gpu.activations, gpu.logits);
  RuntimeOverheadBytes runtime = runtime_overhead_bytes(runtime_description, in.world_size, reserve_basis);
  const HostAndNvmeBytes host = host_and_nvme_bytes(in, training.zero, states, buffers, runtime.fixed());
  // zeroplan's executor pins its offloaded states with cudaHostAlloc (exec/cuda/cuda_zero_device.cu): the GPU
  // maps them, and its page tables are device memory the run measures beside the context.
  const Bytes pinned_per_rank = host.pinned / std::max<std::int64_t>(1, in.ranks_per_node);
  if (in.engine == TrainingEngine::zeroplan) runtime.pinned_page_tables = pinned_page_table_bytes(pinned_per_rank);
  // Its workspace exactly (cuBLASLt's and its scratch) and its allocations' round-up to the device's pages.
  if (in.executor_exact || lora_allocations)
    if (const auto executor = executor_device_bytes(model, training, static_cast<int>(in.world_size), in.stage)) {
      runtime.cublas_workspace = executor->workspace;
      runtime.allocation_granularity = executor->allocation_granularity;
      runtime.nccl_window = executor->nccl_window;
    }
  gpu.runtime_overhead = runtime.total();
  gpu.total = sat_add(tensor_bytes, gpu.runtime_overhead);

  estimate.host.pinned = host.pinned;
  estimate.host.pageable = host.pageable;
  // Our executor's ranks also hold their own processes (sim/host_memory.h executor_process_host_bytes); without it
  // the plan filled a 2x H200 host to 247.7 of 251.8 GiB and the kernel's OOM killer ended the run in start-up.
  // The kernel's page tables of each rank's pinned mapping are host memory outside VmHWM: one 8-byte entry per
  // 4 KiB page (x86-64 4-level paging, Intel SDM vol. 3A sec. 4.5), the same count as the GPU's mapping of them.
  // Beyond both, what the kernel and the GPU driver hold for the pinned pages (sim/host_memory.h
  // pinned_kernel_share_bytes, measured on the node).
  const Bytes processes =
      in.engine == TrainingEngine::zeroplan
          ? sat_mul(sat_add(sat_add(executor_process_host_bytes(in.world_size, in.convolutions), pinned_page_table_bytes(pinned_per_rank)),
                            pinned_kernel_share_bytes(pinned_per_rank)),
                    in.ranks_per_node)
          : 0;
  estimate.host.total = sat_add(sat_add(host.pinned, host.pageable), processes);
  estimate.nvme_bytes = host.nvme;
  estimate.init_peak_gpu_bytes = host.init_peak_gpu;
  estimate.init_peak_host_bytes = host.init_peak_host;

  if (terms && lora_allocations) {
    // Each allocation by its name: which engine holds it, and LoRA's own buffers.
    const std::string where = "rank 0 of " + num(in.world_size) + " at stage " + std::to_string(in.stage);
    for (const exec::DeviceAllocation& a : *lora_allocations)
      if (a.component != "workspace")
        terms->push_back({a.component, a.what, a.bytes, where,
                          "zeroplan's executor with LoRA (exec/activation_accounting.h device_allocations; "
                          "exec/cuda/cuda_trainer.cu; exec/zero/zero_engine.h Trainability::frozen as DeepSpeed "
                          "0.19.8 zero/stage_1_and_2.py and partition_parameters.py treat frozen parameters)"});
  } else if (terms) {
    explain_model_states(in, states, *terms);
    explain_activations(model, training, in, activations, *terms);
    explain_zero_buffers(in, training.zero, buffers, *terms);
  }
  if (terms) {
    explain_runtime_overhead(runtime_description, in.world_size, reserve_basis, runtime, *terms);
    explain_executor_runtime(pinned_per_rank, runtime, *terms);
    explain_host_and_nvme(in, training.zero, states, buffers, host, *terms);
    if (in.engine == TrainingEngine::zeroplan) explain_executor_process_host(in, pinned_per_rank, *terms);
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
