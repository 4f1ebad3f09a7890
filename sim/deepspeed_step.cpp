#include "sim/deepspeed_step.h"

#include <cmath>

namespace zeroplan {

double deepspeed_step_seconds(const DeepSpeedEnginePath& path, const TrainingConfig& training, std::int64_t params,
                              std::int64_t tensors, double streaming_bandwidth, double kernel_overhead_seconds,
                              bool per_tensor_ops_on_host) {
  const double e = path.model_bytes;
  const double a = path.accumulation_bytes;
  // Adam: torch's foreach AdamW runs eight _foreach ops over fp32 tensors (weight decay mul, lerp of the first
  // moment, mul and addcmul of the second, sqrt into a temporary, div, add eps, addcdiv into the parameter: 80 B
  // per parameter read and written); a fused kernel (torch fused, DeepSpeed FusedAdam) reads p, g, m, v and
  // writes p, m, v (28 B). SGD with momentum: read p, g, m, write p, m (20 B).
  double adam = path.adam == AdamImplementation::torch_foreach ? 80.0 : 28.0;
  if (training.optimizer == OptimizerKind::sgd_momentum) adam = 20.0;
  const double clip = training.gradient_clipping > 0.0 ? 8.0 : 0.0;  // scale the fp32 gradient in place
  double bytes = 0.0;   // per parameter stepped
  double per_tensor_kernels = 0.0;
  double flat_kernels = 0.0;
  switch (path.wrapper) {
    case DeepSpeedOptimizerWrapper::plain:
      // The basic optimizer on the fp32 parameters; the engine's norm for clipping (read 4): per tensor a norm and
      // the clip's scale.
      bytes = 4.0 + clip + adam;
      per_tensor_kernels = 2.0;
      break;
    case DeepSpeedOptimizerWrapper::fp16_unfused:
      // unfused_optimizer.py step: per tensor: overflow check and norm over the 16-bit .grad (read e twice),
      // .grad.to(fp32) (e + 4), unscale/clip (8), the optimizer, copy fp32 -> 16-bit (4 + e).
      // Per tensor: CheckOverflow.has_overflow_serial's inf/nan test (utils.py has_inf_or_nan: amax, amin, two
      // isfinite, and, not: 6 ops) read back on the host for each tensor (`if` on a device tensor: a sync, about
      // 4 launches' worth), get_weight_norm's float().norm() and its square added up (4), the cast to fp32, the
      // scale and the copy back (3): 17 per tensor.
      bytes = 2.0 * e + (e + 4.0) + clip + adam + (4.0 + e);
      per_tensor_kernels = 17.0;
      break;
    case DeepSpeedOptimizerWrapper::fp16_fused:
      // fused_optimizer.py step: per tensor .to(fp32) (e + 4), flatten (8), norm (4), clip (8), FusedAdam on the
      // flat fp32 group, the 16-bit copy back (4 + e).
      // Per tensor: the inf/nan test read back per tensor (10, as above) and the cast; the rest on the flat group.
      bytes = (e + 4.0) + 8.0 + 4.0 + clip + adam + (4.0 + e);
      per_tensor_kernels = 11.0;
      flat_kernels = 6.0;
      break;
    case DeepSpeedOptimizerWrapper::bf16_optimizer:
      // bf16_optimizer.py step: norm (4) and clip (8) over the fp32 gradients, the optimizer on the partition,
      // update_lp_params (4 + e), clear_hp_grads zeroes the fp32 buffer (4).
      // Per tensor: the norm and the clip's scale over each fp32 gradient (get_grads_for_norm), in foreach groups.
      bytes = 4.0 + clip + adam + (4.0 + e) + 4.0;
      per_tensor_kernels = 2.0;
      flat_kernels = 6.0;
      break;
    case DeepSpeedOptimizerWrapper::zero_1_2:
      // stage_1_and_2.py step: norm per tensor of the partition (get_grad_norm_direct, read e), flatten (2e),
      // .to(fp32) (e + 4), unscale/clip (8), the optimizer on the flat partition, copy to the 16-bit partition.
      // Per tensor of the partition: the overflow test accumulated on the device (has_overflow_partitioned_grads_serial:
      // has_inf_or_nan's 6 ops and the add; bf16's check_grad_overflow is on by default) and the norm (cast,
      // vector_norm): 9.
      bytes = e + 2.0 * e + (e + 4.0) + clip + adam + (4.0 + e);
      per_tensor_kernels = 9.0;
      flat_kernels = 6.0;
      break;
    case DeepSpeedOptimizerWrapper::zero_3: {
      // stage3.py step (every parameter has a partition on every rank, so the per-tensor work is the model's):
      // - _get_norm_groups -> get_grad_norm_direct: each gradient partition cast to fp32 (a + 4, none when already
      //   fp32) and its norm (4): two kernels per tensor; the norms stacked and summed (flat);
      // - per sub-group, _prepare_fp32_grad_for_sub_group: flatten the partitions (torch.cat: 2a) and convert to
      //   fp32 (a + 4); unscale_and_clip_grads multiplies the fp32 gradient whatever the clip (8); the optimizer;
      //   _reassign_or_swap_out_partitioned_parameters copies the fp32 partition into the 16-bit one (4 + e);
      // - fp16 only (_overflow_check_and_loss_scale_update -> has_overflow): isinf and isnan over the flat gradient
      //   buffer (2a); bf16 and fp32 skip the check.
      const double cast = a == 4.0 ? 0.0 : a + 4.0;
      const double overflow = training.precision == Precision::fp16 ? 2.0 * a : 0.0;
      bytes = cast + 4.0 + 2.0 * a + cast + 8.0 + adam + (4.0 + e) + overflow;
      per_tensor_kernels = a == 4.0 ? 1.0 : 2.0;
      flat_kernels = 8.0;
      break;
    }
  }
  // The per-tensor kernels issued by the host's loop (deepspeed_tensor_ops) launch as fast as it issues them.
  if (per_tensor_ops_on_host) per_tensor_kernels = 0.0;
  const double kernels = per_tensor_kernels * static_cast<double>(tensors) + flat_kernels +
                         (path.adam == AdamImplementation::torch_foreach ? 8.0 : 1.0) *
                             std::ceil(static_cast<double>(tensors) / 24.0);  // multi-tensor launches
  return static_cast<double>(params) * bytes / streaming_bandwidth + kernels * kernel_overhead_seconds;
}

DeepSpeedTensorOps deepspeed_tensor_ops(const DeepSpeedEnginePath& path, const TrainingConfig& training) {
  DeepSpeedTensorOps ops;
  const bool offload = training.zero.offload_optimizer != OffloadDevice::none;
  switch (path.wrapper) {
    case DeepSpeedOptimizerWrapper::plain:
    case DeepSpeedOptimizerWrapper::fp16_fused:
    case DeepSpeedOptimizerWrapper::bf16_optimizer:
      // engine.py allreduce_and_copy: buf.copy_(synced) for each gradient of the bucket.
      ops.reduction = 1.0;
      break;
    case DeepSpeedOptimizerWrapper::fp16_unfused:
      ops.reduction = 1.0;
      // Before the wrapped optimizer: has_overflow_serial's six operations and the read back, get_weight_norm's
      // four (float(), norm, the square, the sum), the .to(fp32) of each gradient and unscale_and_clip_grads' mul_.
      // After it: the copy back to 16 bits.
      ops.step = 7.0 + 4.0 + 2.0;
      ops.after_step = 1.0;
      break;
    case DeepSpeedOptimizerWrapper::zero_1_2:
      if (offload) {
        // The reduction's per-tensor work is the offload gradient hook's (a cluster input, measured); the step
        // reads each tensor's norm back (complete_grad_norm_calculation_for_cpu_offload).
        ops.step = 1.0;
        break;
      }
      // The copy back and copy_grads_in_partition; after the backward pass (reduce_gradients) also the copy into
      // the bucket, which the hooks make otherwise.
      ops.reduction = 2.0 + (path.reduces_after_backward ? 1.0 : 0.0);
      // has_overflow_partitioned_grads_serial: has_inf_or_nan's six operations and the add; get_grad_norm_direct:
      // the cast and vector_norm.
      ops.step = 7.0 + 2.0;
      break;
    case DeepSpeedOptimizerWrapper::zero_3:
      break;
  }
  return ops;
}

}  // namespace zeroplan
