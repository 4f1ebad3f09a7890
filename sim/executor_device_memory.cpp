#include "sim/executor_device_memory.h"

#include "core/lora_modules.h"
#include "exec/activation_accounting.h"
#include "exec/zero/zero_buffer_layout.h"
#include "sim/executor_layout.h"

namespace zeroplan {

exec::ExecConfig executor_exec_config(const ModelDescription& model, const TrainingConfig& training, int stage) {
  exec::ExecConfig c;
  if (model.has_ops()) c.network = executor_network(model);
  else c.shape = executor_shape(model);
  c.micro_batch = training.micro_batch;
  c.seq_len = training.seq_len;
  c.grad_accum = training.grad_accum;
  c.precision = training.precision == Precision::fp32   ? exec::ExecPrecision::fp32
                : training.precision == Precision::fp16 ? exec::ExecPrecision::fp16
                                                        : exec::ExecPrecision::bf16;
  c.recompute = training.checkpointing == Checkpointing::full        ? exec::ExecRecompute::full
                : training.checkpointing == Checkpointing::selective ? exec::ExecRecompute::selective
                                                                     : exec::ExecRecompute::none;
  c.zero = executor_zero_settings(training, stage);
  c.zero.deterministic = training.deterministic;
  return c;
}

exec::LoraExecSettings executor_lora_settings(const ModelDescription& model, const TrainingConfig& training) {
  exec::LoraExecSettings lora;
  if (!training.lora.enabled || !model.transformer) return lora;
  // core/lora_modules.h resolve_lora: the adapted modules by their paths in a block, which exec/lora_layout.h maps
  // onto our fused tensors; they decide both engines' layouts and LoRA's buffers.
  lora.enabled = true;
  lora.rank = training.lora.rank;
  lora.alpha = training.lora.alpha;
  lora.targets = training.lora.targets;
  for (const BlockLinear& m : adapted_modules(model, training.lora.targets)) lora.modules.push_back(m.path);
  lora.quantize_nf4 = training.lora.quantize_base == BaseQuantization::nf4;
  return lora;
}

exec::ExecConfig executor_planned_config(const ModelDescription& model, const TrainingConfig& training, int stage) {
  exec::ExecConfig c = executor_exec_config(model, training, stage);
  c.lora = executor_lora_settings(model, training);
  return c;
}

std::optional<std::vector<exec::DeviceAllocation>> executor_lora_allocations(const ModelDescription& model,
                                                                             const TrainingConfig& training, int world,
                                                                             int stage) {
  if (!training.lora.enabled || !model.transformer || !executor_trains(model) || world < 1 ||
      training.zero.reduce_bucket_size < 1 || training.micro_batch < 1)
    return std::nullopt;
  return exec::device_allocations(executor_planned_config(model, training, stage), world);
}

std::optional<std::vector<exec::DeviceAllocation>> executor_network_allocations(const ModelDescription& model,
                                                                                const TrainingConfig& training) {
  if (model.transformer || !model.has_ops() || !executor_trains(model) || training.micro_batch < 1) return std::nullopt;
  const exec::ExecConfig c = executor_exec_config(model, training, training.zero.stage);
  return exec::network_device_layout(c, exec::plan_network(*c.network)).allocations;
}

std::optional<ExecutorDeviceBytes> executor_device_bytes(const ModelDescription& model, const TrainingConfig& training,
                                                         int world, int stage) {
  if (!executor_trains(model) || world < 1 || training.zero.reduce_bucket_size < 1)
    return std::nullopt;
  const exec::ExecConfig c = executor_planned_config(model, training, stage);
  const std::vector<exec::DeviceAllocation> allocations = exec::device_allocations(c, world);
  ExecutorDeviceBytes b;
  for (const exec::DeviceAllocation& a : allocations)
    if (a.component == "workspace") b.workspace += a.bytes;
  b.allocation_granularity = exec::allocation_granularity_bytes(allocations);
  if (exec::stage3_copy_engine_gathers(c, world)) b.nccl_window = exec::kNcclCopyEngineWindowBytes;
  return b;
}

}  // namespace zeroplan
