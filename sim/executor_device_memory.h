// What zeroplan's CUDA executor holds on the device beyond its tensors' bytes, for `--engine zeroplan`: its
// workspace exactly (the cuBLASLt workspace and its small scratch buffers) and the round-up of its allocations to
// the device's allocation granularity, both from the executor's own list of allocations
// (exec/activation_accounting.h device_allocations), so that the plan's runtime_overhead is what `zeroplan run`
// measures there (cudaMemGetInfo used at its peak less the allocator's tensors and the context).
#pragma once

#include <optional>
#include <vector>

#include "core/model_description.h"
#include "core/training_config.h"
#include "core/units.h"
#include "exec/activation_accounting.h"
#include "exec/exec_config.h"

namespace zeroplan {

struct ExecutorDeviceBytes {
  Bytes workspace = 0;               // the allocations tagged workspace (cuBLASLt workspace included)
  Bytes allocation_granularity = 0;  // device memory the allocations occupy beyond their bytes
  Bytes nccl_window = 0;             // NCCL's resources beside a copy-engine window (exec::kNcclCopyEngineWindowBytes)
};

// The executor's configuration for a plan: what decides its allocations (shape, batch, precision, recompute, ZeRO
// settings); `zeroplan run` adds the optimizer's, the loss scaler's and the seed. Throws InputError naming the
// model's field the executor cannot train.
exec::ExecConfig executor_exec_config(const ModelDescription& model, const TrainingConfig& training, int stage);
// LoRA's settings of the executor for a LoRA plan (disabled without LoRA): the adapted modules by their paths,
// rank, alpha and the NF4 base, as `zeroplan run` gives them to its trainer.
exec::LoraExecSettings executor_lora_settings(const ModelDescription& model, const TrainingConfig& training);
// executor_exec_config with executor_lora_settings: the configuration whose allocations a plan counts.
exec::ExecConfig executor_planned_config(const ModelDescription& model, const TrainingConfig& training, int stage);

// A layer-list network's own device buffers in the CUDA executor (exec/activation_accounting.h
// network_device_layout: activations, logits and workspace, each named), for a model the executor trains; nullopt
// for a transformer or a model it does not train.
std::optional<std::vector<exec::DeviceAllocation>> executor_network_allocations(const ModelDescription& model,
                                                                                const TrainingConfig& training);

// A LoRA plan of a transformer the executor trains: every allocation of its CUDA trainer at `world` ranks and
// `stage` (rank 0's, exec/activation_accounting.h device_allocations: the frozen base's engine, the adapters'
// engine, the trainer's buffers and LoRA's own), each tagged with its component and named; nullopt otherwise.
std::optional<std::vector<exec::DeviceAllocation>> executor_lora_allocations(const ModelDescription& model,
                                                                             const TrainingConfig& training, int world,
                                                                             int stage);

// For a model the executor trains, at `world` ranks and `stage` (training with the plan's choice applied);
// nullopt otherwise.
std::optional<ExecutorDeviceBytes> executor_device_bytes(const ModelDescription& model, const TrainingConfig& training,
                                                         int world, int stage);

}  // namespace zeroplan
