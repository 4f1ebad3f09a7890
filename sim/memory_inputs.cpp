#include "sim/memory_inputs.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <cstdint>

#include "sim/deepspeed_param_coordinator.h"
#include "sim/executor_layout.h"
#include "sim/parameter_tensors.h"
#include "sim/saturating.h"
#include "sim/zero_schedule.h"

namespace zeroplan {

namespace {

// The smallest power of two at least `bytes` (0 for 0).
std::int64_t power_of_two_ceil(std::int64_t bytes) {
  if (bytes <= 1) return bytes;
  const std::uint64_t rounded = std::bit_ceil(static_cast<std::uint64_t>(bytes));
  return rounded > static_cast<std::uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<std::int64_t>(rounded);
}

// The sum of `bytes(numel)` over every parameter tensor of the model. expand_transformer's layers are the embedding,
// the blocks (alike: one is counted for all), the final norm and the untied head.
template <typename TensorBytes>
std::int64_t sum_over_parameter_tensors(const ModelDescription& model, TensorBytes&& bytes) {
  const auto layer_sum = [&](const LayerDescription& layer) {
    std::int64_t sum = 0;
    for_each_parameter_tensor(model, layer, [&](std::int64_t numel) { sum = sat_add(sum, bytes(numel)); });
    return sum;
  };
  const std::vector<LayerDescription>& layers = model.layers;
  const std::int64_t blocks = model.transformer ? model.transformer->layers : 0;
  std::int64_t total = 0;
  if (model.transformer && blocks > 0 && layers.size() >= static_cast<std::size_t>(blocks) + 2) {
    total = sat_add(layer_sum(layers.front()), sat_mul(blocks, layer_sum(layers[1])));
    for (std::size_t i = static_cast<std::size_t>(blocks) + 1; i < layers.size(); ++i)
      total = sat_add(total, layer_sum(layers[i]));
  } else {
    for (const LayerDescription& layer : layers) total = sat_add(total, layer_sum(layer));
  }
  return total;
}

}  // namespace

MemoryInputs gather_memory_inputs(const ModelDescription& model, const ClusterDescription& cluster,
                                  const TrainingConfig& training, const PlanChoice& choice) {
  MemoryInputs in;
  in.stage = choice.stage;
  in.offload_optimizer = choice.offload_optimizer;
  in.offload_param = choice.stage == 3 ? choice.offload_param : OffloadDevice::none;
  in.engine = training.engine;
  in.mixed_precision = training.precision != Precision::fp32;
  in.param_bytes = precision_bytes(training.precision);
  in.executor_grad_bytes = in.mixed_precision && training.grad_accum_dtype == Precision::fp32 ? 4 : in.param_bytes;
  in.activation_bytes = in.param_bytes;
  in.convolution_workspace = model.transformer ? 0 : cluster.runtime.convolution_workspace_bytes;
  in.convolutions = !model.transformer;
  in.optimizer = training.optimizer;
  in.optimizer_state_bytes = optimizer_state_bytes_per_param(training.optimizer);
  in.world_size = std::max<std::int64_t>(1, cluster.total_gpus());
  in.ranks_per_node = std::max<std::int64_t>(1, std::min<std::int64_t>(cluster.gpus_per_node, in.world_size));

  // One pass over the layers (a 96-block model is ~100 iterations of a few adds). Persistence follows
  // DeepSpeed stage 3 (parameter_offload.py mark_persistent_parameters): a parameter whose numel is at most
  // stage3_param_persistence_threshold is never partitioned. A layer whose largest module is below the
  // threshold persists whole; otherwise its small modules (norms, biases: small_module_params) persist when
  // the threshold is on (> 0).
  const std::int64_t threshold = training.zero.param_persistence_threshold;
  std::int64_t params = 0, largest = 0, persistent = 0, gathered_modules = 0;
  for (const LayerDescription& layer : model.layers) {
    params += layer.params;
    largest = std::max(largest, layer.largest_module_params);
    if (threshold > 0 && layer.largest_module_params <= threshold) {
      persistent += layer.params;
    } else {
      if (threshold > 0) persistent += layer.small_module_params;
    }
    // One all-gather per module with partitioned parameters, as the simulator issues them.
    gathered_modules += gathered_module_count(layer, training.zero);
  }
  in.params = params;
  in.largest_module_params = largest;
  in.partition_params = ceil_div(params, in.world_size);
  in.persistent_params = std::min(persistent, params);
  in.gathered_params_total = params - in.persistent_params;
  in.gathered_modules = gathered_modules;
  if (in.engine == TrainingEngine::deepspeed && in.stage == 3 &&
      (in.world_size > 1 || in.offload_param != OffloadDevice::none)) {
    // At one rank with the parameters on the GPU a partition is the whole parameter: nothing is gathered into new
    // memory (the simulator's fetches allocate nothing there either).
    in.deepspeed_gathered_live_params =
        replay_deepspeed_param_coordinator(model, training.zero)->peak_live_elements;
  }
  if (in.engine == TrainingEngine::deepspeed && in.stage == 3 && in.offload_param == OffloadDevice::nvme)
    in.deepspeed_param_host_elements = deepspeed_param_elements_in_cpu(in.partition_params, training.zero.param_max_in_cpu,
                                                                      training.zero.sub_group_size);
  if (in.engine == TrainingEngine::deepspeed && in.stage == 3 && in.offload_param == OffloadDevice::cpu &&
      training.zero.pin_memory) {
    // zero.Init with offload_param cpu (partition_parameters.py _partition_param): each parameter above the
    // persistence threshold gets its own partition, torch.empty(partition_size) on the CPU then
    // get_accelerator().pin_memory(...), which takes page-locked memory from torch's CachingHostAllocator (sizes
    // rounded up to a power of two, PowerOf2Ceil). stage3.py _create_param_groups_fp16_flat_cpu_memory then moves
    // every partition into one pinned flat buffer (_move_to_flat_buffer); the freed per-parameter blocks go back to
    // the allocator's cache, which keeps them page-locked (nothing in stage 3 empties it).
    const std::int64_t pinned = sum_over_parameter_tensors(model, [&](std::int64_t numel) -> std::int64_t {
      if (threshold > 0 && numel <= threshold) return 0;  // ds_persist: kept on the GPU
      return power_of_two_ceil(sat_mul(in.param_bytes, ceil_div(numel, in.world_size)));
    });
    in.deepspeed_pinned_param_partitions = pinned;
  }
  if (in.engine == TrainingEngine::deepspeed && in.stage == 2 && in.offload_optimizer == OffloadDevice::cpu &&
      training.grad_accum > 1) {
    // stage_1_and_2.py async_accumulate_grad_in_cpu_via_gpu (from copy_grads_in_partition, which stage 2 runs at
    // every micro-step): each parameter of the rank's partition gets its own host buffer, torch.zeros(param.numel())
    // in the model's dtype, pinned with get_accelerator().pin_memory when pin_memory is set: one block of torch's
    // CachingHostAllocator per parameter tensor, each rounded up to a power of two. The parameters of a partition
    // are taken as a 1/N share of the model's tensors.
    const std::int64_t bytes = sum_over_parameter_tensors(model, [&](std::int64_t numel) {
      const std::int64_t buffer = sat_mul(in.param_bytes, numel);
      return training.zero.pin_memory ? power_of_two_ceil(buffer) : buffer;
    });
    in.deepspeed_grad_accumulation_host_buffers = ceil_div(bytes, in.world_size);
  }
  if (in.engine == TrainingEngine::deepspeed)
    in.deepspeed_process_device_extra =
        std::max<std::int64_t>(0, cluster.runtime.deepspeed_process_device_bytes > 0
                                      ? cluster.runtime.deepspeed_process_device_bytes - cluster.runtime.cuda_context_bytes
                                      : 0);
  if (in.engine == TrainingEngine::zeroplan) {
    // Not on the fast path: the DeepSpeed engine (the default, and what recommend searches) never gets here.
    if (const auto f = executor_layout_figures(model, training, static_cast<int>(in.world_size), in.stage)) {
      in.executor_exact = true;
      in.params = f->flat_elements;
      in.partition_params = in.world_size > 1 || in.stage > 0 ? f->partition_elements : f->flat_elements;
      in.persistent_params = in.stage == 3 ? f->persistent_elements : 0;
      in.gathered_params_total = in.params - in.persistent_params;
      in.executor_buckets = f->buckets;
      in.executor_gradient_buffer_bytes = f->gradient_buffer_bytes;
      in.executor_micro_step_gradients = f->micro_step_gradient_elements;
      in.executor_arena = f->arena_elements;
      in.executor_gathered_per_micro = f->gathered_elements;
      in.executor_gathers_per_micro = f->gathers;
      in.executor_persistent_buckets = f->persistent_buckets;
      in.executor_param_staging = f->param_staging_elements;
      in.executor_offload_pieces = f->offload_pieces;
      in.executor_largest_piece = f->largest_offload_piece;
      in.executor_grads_over_activations = f->gradient_partition_over_activations;
      in.executor_grads_beyond_activations = f->gradient_partition_beyond_bytes;
      in.executor_param_nvme_files = f->param_nvme_file_bytes;
      in.executor_param_swap_buffers = f->param_swap_buffer_bytes;
      in.executor_param_host_elements = f->param_host_elements;
      in.executor_param_nvme_read_per_step = f->param_nvme_read_bytes_per_step;
      in.executor_param_nvme_write_per_step = f->param_nvme_write_bytes_per_step;
    }
  }
  return in;
}

std::int64_t deepspeed_param_elements_in_cpu(std::int64_t partition, std::int64_t max_in_cpu,
                                             std::int64_t sub_group_size) {
  if (partition <= max_in_cpu) return std::max<std::int64_t>(0, partition);
  if (max_in_cpu <= 0) return 0;
  const std::int64_t s = std::max<std::int64_t>(1, sub_group_size);
  const std::int64_t sub_groups = (max_in_cpu - 1) / s;  // k x s < max_in_cpu
  return std::min(partition, sat_mul(sub_groups, s));
}

}  // namespace zeroplan
