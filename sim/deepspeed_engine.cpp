#include "sim/deepspeed_engine.h"

#include "core/input_error.h"

namespace zeroplan {

std::string to_string(DeepSpeedOptimizerWrapper wrapper) {
  switch (wrapper) {
    case DeepSpeedOptimizerWrapper::plain: return "basic optimizer (fp32, no wrapper)";
    case DeepSpeedOptimizerWrapper::fp16_fused: return "FP16_Optimizer";
    case DeepSpeedOptimizerWrapper::fp16_unfused: return "FP16_UnfusedOptimizer";
    case DeepSpeedOptimizerWrapper::bf16_optimizer: return "BF16_Optimizer";
    case DeepSpeedOptimizerWrapper::zero_1_2: return "DeepSpeedZeroOptimizer (stage 1/2)";
    case DeepSpeedOptimizerWrapper::zero_3: return "DeepSpeedZeroOptimizer_Stage3";
  }
  return "unknown";
}

namespace {

// engine.py _do_optimizer_sanity_check: without ZeRO the gradients must accumulate in the model's dtype.
std::string refusal(const TrainingConfig& training) {
  const Precision accumulation = training.grad_accum_dtype.value_or(training.precision);
  if (training.zero.stage == 0 && accumulation != training.precision) {
    return "DeepSpeed 0.19.8 raises NotImplementedError for " + to_string(accumulation) +
           " gradient accumulation with a " + to_string(training.precision) +
           " model without ZeRO (engine.py _do_optimizer_sanity_check)";
  }
  return "";
}

}  // namespace

bool deepspeed_runs(const TrainingConfig& training, const PlanChoice& choice, std::string* why) {
  const std::string reason = refusal(apply_choice(training, choice));
  if (reason.empty()) return true;
  if (why != nullptr) *why = reason;
  return false;
}

DeepSpeedEnginePath deepspeed_engine_path(const TrainingConfig& training) {
  const std::string reason = refusal(training);
  if (!reason.empty()) throw InputError("training configuration", "data_types.grad_accum_dtype", reason);
  const ZeroConfig& zero = training.zero;
  DeepSpeedEnginePath path;
  path.model_bytes = precision_bytes(training.precision);
  const Precision accumulation = training.grad_accum_dtype.value_or(training.precision);
  path.accumulation_bytes = precision_bytes(accumulation);
  path.communication_bytes = precision_bytes(training.communication_dtype.value_or(training.precision));
  path.adam = training.adam_implementation;
  const bool mixed = training.precision != Precision::fp32;
  const bool offload = zero.offload_optimizer != OffloadDevice::none;

  if (zero.stage == 0) {
    // Same dtypes (checked above): FP16 for fp16, DDP_BFLOAT16 for bf16 -> _configure_fp16_optimizer, which builds
    // FP16_Optimizer only around FusedAdam and FP16_UnfusedOptimizer around anything else; fp32: no wrapper.
    path.wrapper = !mixed ? DeepSpeedOptimizerWrapper::plain
                   : training.adam_implementation == AdamImplementation::deepspeed_fused
                       ? DeepSpeedOptimizerWrapper::fp16_fused
                       : DeepSpeedOptimizerWrapper::fp16_unfused;
    path.gradient_collective = CollectiveKind::all_reduce;
    path.reduction_bucket_elements = 500'000'000;  // engine.py MEMORY_OPT_ALLREDUCE_SIZE
    path.reduces_after_backward = true;
    return path;
  }
  if (zero.stage == 1 && training.precision == Precision::bf16 && accumulation == Precision::fp32 && !offload) {
    // engine.py _do_optimizer_sanity_check returns BFLOAT16 -> _configure_bf16_optimizer; its gradients are
    // all-reduced by engine.py buffered_allreduce_fallback over get_grads_for_reduction (the fp32 buffer).
    path.wrapper = DeepSpeedOptimizerWrapper::bf16_optimizer;
    path.gradient_collective = CollectiveKind::all_reduce;
    path.reduction_bucket_elements = 500'000'000;
    path.reduces_after_backward = true;
    return path;
  }
  path.reduction_bucket_elements = zero.reduce_bucket_size;
  if (zero.stage <= 2) {
    path.wrapper = DeepSpeedOptimizerWrapper::zero_1_2;
    // stage_1_and_2.py average_tensor: without reduce_scatter the whole bucket is all-reduced
    // (gradient_reduction_w_predivide); with it, multi-rank buckets are all-reduced (allreduce_and_scatter) and
    // otherwise each owner's slices are reduced to it (allreduce_no_retain with rank=dst).
    path.gradient_collective = !zero.reduce_scatter || zero.use_multi_rank_bucket_allreduce
                                   ? CollectiveKind::all_reduce
                                   : CollectiveKind::reduce_scatter;
    path.reduces_after_backward = zero.stage == 1 && !zero.overlap_comm;
    return path;
  }
  path.wrapper = DeepSpeedOptimizerWrapper::zero_3;
  // stage3.py __reduce_and_partition_ipg_grads: reduce_scatter -> __avg_scatter_grads (reduce_scatter_coalesced);
  // otherwise __avg_scatter_contiguous_grads all-reduces the bucket.
  path.gradient_collective = zero.reduce_scatter ? CollectiveKind::reduce_scatter : CollectiveKind::all_reduce;
  return path;
}

}  // namespace zeroplan
