#include "sim/memory_inputs.h"

#include <algorithm>

#include "sim/executor_layout.h"
#include "sim/saturating.h"
#include "sim/zero_schedule.h"

namespace zeroplan {

MemoryInputs gather_memory_inputs(const ModelDescription& model, const ClusterDescription& cluster,
                                  const TrainingConfig& training, const PlanChoice& choice) {
  MemoryInputs in;
  in.stage = choice.stage;
  in.offload_optimizer = choice.offload_optimizer;
  in.offload_param = choice.stage == 3 ? choice.offload_param : OffloadDevice::none;
  in.engine = training.engine;
  in.mixed_precision = training.precision != Precision::fp32;
  in.param_bytes = precision_bytes(training.precision);
  in.activation_bytes = in.param_bytes;
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
  if (in.engine == TrainingEngine::zeroplan) {
    // Not on the fast path: the DeepSpeed engine (the default, and what recommend searches) never gets here.
    if (const auto f = executor_layout_figures(model, training, static_cast<int>(in.world_size), in.stage)) {
      in.executor_exact = true;
      in.params = f->flat_elements;
      in.partition_params = in.world_size > 1 || in.stage > 0 ? f->partition_elements : f->flat_elements;
      in.persistent_params = in.stage == 3 ? f->persistent_elements : 0;
      in.gathered_params_total = in.params - in.persistent_params;
      in.executor_buckets = f->buckets;
      in.executor_bucket_buffers = f->bucket_buffer_elements;
      in.executor_arena = f->arena_elements;
      in.executor_gathered_per_micro = f->gathered_elements;
      in.executor_gathers_per_micro = f->gathers;
      in.executor_persistent_buckets = f->persistent_buckets;
      in.executor_param_staging = f->param_staging_elements;
      in.executor_offload_pieces = f->offload_pieces;
      in.executor_largest_piece = f->largest_offload_piece;
    }
  }
  return in;
}

}  // namespace zeroplan
