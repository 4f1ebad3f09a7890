// DeepSpeed stage 3's parameter coordinator replayed over one micro-step's forward and backward: which layers'
// parameters are all-gathered at each point of the passes (on demand or by the prefetcher), which are released
// after a use, and how many elements are gathered at once. The planner's DeepSpeed engine takes stage 3's fetches,
// releases and gathered-parameter memory from it (sim/zero_schedule.cpp, sim/comm_model.cpp,
// sim/zero_buffers_memory.cpp).
//
// What it follows (DeepSpeed 0.19.8, deepspeed/runtime/zero/partitioned_param_coordinator.py,
// PartitionedParameterCoordinator, once the module trace is complete):
// - Every module call is one step of the trace (fetch_sub_module increments __step_id, for modules that own no
//   parameters too); the parameter queue holds each call's parameters in trace order, forward then backward.
// - fetch_sub_module: the module's own parameters that are NOT_AVAILABLE are all-gathered at once; its own queue
//   entries are popped; then the prefetcher pops the queue until it has min(stage3_max_live_parameters - available,
//   stage3_prefetch_bucket_size) elements of NOT_AVAILABLE parameters to all-gather, popping available ones for
//   free, and marks every popped parameter as fetched for that later use (__most_recent_step_id_param_fetched_for).
//   It runs at every module call, so it tops the gathered parameters up towards stage3_max_live_parameters, not
//   to one bucket ahead.
// - release_sub_module (__params_to_release): after a call its parameters are released unless persistent, marked
//   as fetched for a later step, or used again within stage3_max_reuse_distance elements of the trace (the walk
//   counts every parameter of every module call after this one, persistent ones included).
// So a layer whose backward use the prefetcher reached near the end of the forward stays gathered into the
// backward: with GPT-2 1.5B this keeps the last ~30 of 48 blocks (DeepSpeed's allocator trace,
// bench/deepspeed/results-pending/README.md, "what a one-rank stage-3 process holds outside the allocator").
//
// The model's modules: a transformer block's weight tensors above stage3_param_persistence_threshold, each its
// own module call (its bias and the norms persist); a layer list's gathered parameters split evenly over its
// modules (sim/zero_schedule.h gathered_module_count). Each layer makes `module_calls` calls per pass. A tied
// output head uses the embedding table once more after the last layer's forward and before its backward.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/model_description.h"
#include "core/training_config.h"

namespace zeroplan {

struct CoordinatorGather {
  std::int32_t layer = 0;
  std::int64_t elements = 0;  // gathered (full, not partitioned) elements of the layer's modules
  std::int64_t modules = 0;   // module parameter groups among them (one all-gather each in the planner's timing)
  bool prefetch = false;      // issued by the prefetcher (beside this position's compute), else before it
};

struct CoordinatorRelease {
  std::int32_t layer = 0;
  std::int64_t elements = 0;
};

// What the coordinator does at one position of a pass (a layer's module calls).
struct CoordinatorPosition {
  std::vector<CoordinatorGather> gathers;
  std::vector<CoordinatorRelease> releases;  // after the position's compute
};

struct CoordinatorReplay {
  // By position: forward[p] is layer p; backward[p] is layer (layers - 1 - p).
  std::vector<CoordinatorPosition> forward, backward;
  std::int64_t gathered_elements = 0;   // all-gathered in one micro-step (forward and backward)
  std::int64_t gathered_modules = 0;    // module parameter groups all-gathered in one micro-step
  std::int64_t peak_live_elements = 0;  // most gathered elements at once (DeepSpeed's __n_available_params)
};

// A model without partitioned parameters gives empty positions. Kept per thread for the last inputs (the
// planner's searches ask for the same one thousands of times).
std::shared_ptr<const CoordinatorReplay> replay_deepspeed_param_coordinator(const ModelDescription& model,
                                                                            const ZeroConfig& zero);

}  // namespace zeroplan
