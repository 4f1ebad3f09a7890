// DeepSpeed 0.19.8's optimizer step as its wrappers run it: the bytes and kernels of the step on the GPU, and the
// small per-tensor operations its Python loops issue one call at a time (the schedule, sim/zero_schedule.cpp, puts
// both on the timeline).
#pragma once

#include <cstdint>

#include "core/training_config.h"
#include "sim/deepspeed_engine.h"

namespace zeroplan {

// The optimizer step of DeepSpeed's wrapper over `params` parameters in `tensors` tensors: bytes through its
// kernels at the streaming bandwidth plus a launch per kernel (fp16/unfused_optimizer.py step: per tensor
// casts, norm, clip and copies; the ZeRO optimizers step one flat partition; torch foreach AdamW: 80 B/param
// through its eight _foreach ops, fused AdamW and DeepSpeed's FusedAdam: 28 B/param). With
// `per_tensor_ops_on_host` the per-tensor kernels' launches are left out: the host issues them one Python call
// at a time (deepspeed_tensor_ops), slower than the GPU runs them, and the schedule times that on the host.
double deepspeed_step_seconds(const DeepSpeedEnginePath& path, const TrainingConfig& training, std::int64_t params,
                              std::int64_t tensors, double streaming_bandwidth, double kernel_overhead_seconds,
                              bool per_tensor_ops_on_host = false);

// The small eager operations DeepSpeed 0.19.8's Python issues one parameter tensor at a time at the accumulation
// boundary of stages 0-2, each a call the host makes (StepScheduleInputs::tensor_op_seconds): its loops over the
// tensors, not the GPU, pace this work. Per tensor:
// - reduction: of a gradient reduction issued after the backward pass (engine.py allreduce_and_copy: each
//   gradient copied back from the reduced flat buffer; stage_1_and_2.py reduce_ipg_grads: the copy back
//   (allreduce_and_copy_with_multiple_ranks) and into the partition (copy_grads_in_partition), and the copy into
//   the bucket when reduce_gradients runs after the backward pass rather than in the hooks);
// - step: fp16/unfused_optimizer.py step (CheckOverflow.has_overflow_serial: runtime/utils.py has_inf_or_nan's
//   amax, amin, two isfinite, logical_and and logical_not, and the `if` that reads each result back;
//   get_weight_norm's float(), norm(), square and sum; the fp32 copy of the gradient; unscale_and_clip_grads'
//   mul_; the copy back to 16 bits); stage_1_and_2.py step (has_overflow_partitioned_grads_serial: has_inf_or_nan
//   and the add into the count; get_grad_norm_direct: the cast and vector_norm), or with the optimizer on the CPU
//   complete_grad_norm_calculation_for_cpu_offload's read of each tensor's norm (param_norm.item()).
// - after_step: issued after the wrapped optimizer's step (fp16/unfused_optimizer.py step: the copy of each updated
//   fp32 parameter back into its 16-bit one, fp16_param.data.copy_(fp32_param.data)); everything in `step` comes
//   before the wrapped optimizer can run (its inputs, the unscaled fp32 gradients, are made tensor by tensor), but
//   this loop is issued while the GPU runs the optimizer's kernels and overlaps them.
// Zero where the loops are not followed here (FP16_Optimizer's and BF16_Optimizer's steps; stage 3 has its own
// per-call host costs).
struct DeepSpeedTensorOps {
  double reduction = 0.0;
  double step = 0.0;
  double after_step = 0.0;
};
DeepSpeedTensorOps deepspeed_tensor_ops(const DeepSpeedEnginePath& path, const TrainingConfig& training);

}  // namespace zeroplan
