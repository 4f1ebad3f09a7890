// What DeepSpeed 0.19.8's engine runs for a plan: which optimizer wrapper it builds, in which dtypes it
// accumulates and communicates gradients, which collective reduces them and when, and which Adam steps the
// parameters. The memory model (deepspeed_memory.h) and the step schedule (zero_schedule.h) follow these paths;
// each decision cites the DeepSpeed function it follows (deepspeed/runtime/engine.py, zero/stage_1_and_2.py,
// zero/stage3.py, bf16_optimizer.py, fp16/fused_optimizer.py, fp16/unfused_optimizer.py).
#pragma once

#include <cstdint>
#include <string>

#include "core/cluster_description.h"
#include "core/training_config.h"
#include "sim/plan_choice.h"

namespace zeroplan {

// engine.py _configure_optimizer, after _do_optimizer_sanity_check.
enum class DeepSpeedOptimizerWrapper {
  plain,           // fp32 without ZeRO: the basic optimizer, no wrapper
  fp16_fused,      // FP16_Optimizer (fp16/fused_optimizer.py): fp16 or bf16 (DDP_BFLOAT16) at stage 0 with FusedAdam
  fp16_unfused,    // FP16_UnfusedOptimizer (fp16/unfused_optimizer.py): the same with any other Adam (torch_adam)
  bf16_optimizer,  // BF16_Optimizer (bf16_optimizer.py): bf16 at stage 1 with fp32 gradient accumulation
  zero_1_2,        // DeepSpeedZeroOptimizer (zero/stage_1_and_2.py)
  zero_3,          // DeepSpeedZeroOptimizer_Stage3 (zero/stage3.py)
};
std::string to_string(DeepSpeedOptimizerWrapper wrapper);

struct DeepSpeedEnginePath {
  DeepSpeedOptimizerWrapper wrapper = DeepSpeedOptimizerWrapper::plain;
  int model_bytes = 2;        // bytes of a parameter and of the gradient autograd produces
  int accumulation_bytes = 2; // data_types.grad_accum_dtype (engine.py get_data_types: the model's by default)
  int communication_bytes = 2;  // engine.py communication_data_type: the given one, else fp16/bf16/fp32 as the model
  // The gradient reduction: an all-reduce (stage 0; stages 1-2 with use_multi_rank_bucket_allreduce, the
  // default, stage_1_and_2.py average_tensor -> allreduce_and_scatter; any stage with reduce_scatter false) or a
  // reduce-scatter (stage 3: stage3.py __avg_scatter_grads -> reduce_scatter_coalesced; stages 1-2 per rank with
  // use_multi_rank_bucket_allreduce false, as "reduce" calls to each owner, counted as one reduce-scatter).
  CollectiveKind gradient_collective = CollectiveKind::all_reduce;
  // Elements per reduction call: stage 0 and BF16_Optimizer go through engine.py allreduce_gradients ->
  // buffered_allreduce_fallback with MEMORY_OPT_ALLREDUCE_SIZE (5e8, whatever the config's bucket); ZeRO uses
  // reduce_bucket_size.
  std::int64_t reduction_bucket_elements = 500'000'000;
  // Reduced after the whole backward pass, on the compute stream (not overlapped): stage 0 and BF16_Optimizer
  // (engine.py allreduce_gradients at the boundary), stage 1 without overlap_comm (stage_1_and_2.py
  // process_gradients reduces only with partition_grads or overlap_comm; reduce_gradients runs after backward).
  bool reduces_after_backward = false;
  // The optimizer step's Adam: torch's foreach AdamW allocates a temporary the size of its states' second moment
  // (torch/optim/adamw.py _multi_tensor_adamw: exp_avg_sq_sqrt = torch._foreach_sqrt(...)).
  AdamImplementation adam = AdamImplementation::deepspeed_fused;
};

// The path for a plan (training with the choice applied). Throws InputError for what DeepSpeed refuses to run.
DeepSpeedEnginePath deepspeed_engine_path(const TrainingConfig& training);

// Whether DeepSpeed runs the plan at all; when not, `why` says which of its checks refuses it (a comparison leaves
// such plans out).
bool deepspeed_runs(const TrainingConfig& training, const PlanChoice& choice, std::string* why = nullptr);

}  // namespace zeroplan
