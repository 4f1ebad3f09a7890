// One `zeroplan run`: resolve the inputs, check the plan, start the ranks (run/launcher.h) or be one, train
// with the executor (exec/), and print measured beside predicted: memory per component and the device view per
// rank, step time and its phases, bytes per collective kind against the planner's communication model. Below
// cli/ so that cli/run_command.cpp only reads flags.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/plan_inputs.h"
#include "exec/comm/collective_watchdog.h"

namespace zeroplan {

struct RunOptions {
  std::vector<std::string> argv;  // the whole command line, to start the ranks with
  // The model, cluster and training configuration, resolved by the front end (core/plan_inputs.h).
  ResolvedPlanInputs inputs;
  std::optional<int> gpus;  // --gpus as given (under mpirun the world size comes from MPI)
  std::optional<std::string> ds_config;  // the DeepSpeed config given, if any (its overlap_comm then decides)
  std::int64_t steps = 20;
  std::optional<std::int64_t> warmup_steps;  // default: min(2, steps - 1)
  std::string backend = "cuda";
  std::optional<std::string> data;
  std::optional<std::string> report;
  bool force = false;
  std::uint64_t seed = 1337;
  std::optional<double> learning_rate;
  bool deterministic = false;
  // Seconds a collective may wait for the other ranks before the run is stopped (exec/comm/collective_watchdog.h).
  double collective_timeout_s = exec::kDefaultCollectiveTimeoutS;
  // Checkpoints (run/checkpoint.h): every save_every steps into save_dir; resume from a checkpoint directory.
  std::optional<std::string> save_dir;
  std::int64_t save_every = 0;
  std::optional<std::string> resume;
  // A Hugging Face checkpoint to start from (run/hf_checkpoint.h): file, index or folder.
  std::optional<std::string> init_from;
  // LoRA: the adapters to start from, as PEFT saves them (run/peft_adapter_export.h resolve_peft_adapter): folder or
  // adapter_model.safetensors (else PEFT's initialisation: A kaiming-uniform from the seed, B zero).
  std::optional<std::string> init_adapter;
  // The first step's gradients (reduced, unscaled), written under the checkpoint names as fp32 safetensors: for
  // checking the executor against another framework (bench/llama/hf_reference.py compare).
  std::optional<std::string> save_grads;
  // A layer-list image classifier: its accuracy on CIFAR-10's test split (--data DIR's test_batch.bin) at the end.
  bool eval = false;
  // A layer-list image classifier trained on --data DIR with torchvision's CIFAR augmentation (RandomCrop(32,
  // padding=4) and RandomHorizontalFlip, before the normalisation) instead of DeepSpeed's example's plain
  // ToTensor + Normalize.
  bool augment = false;
  // --nvme-path: where offload_optimizer nvme swaps (else the DeepSpeed config's offload_optimizer.nvme_path).
  std::optional<std::string> nvme_path;
  // --trace FILE: the timed steps' median step as measured on the device's lanes, beside the plan's timeline, as
  // Chrome trace-event JSON (run/measured_trace.h; ranks other than 0 write FILE.rank<r>.json); --overwrite
  // lets it replace files that exist.
  std::optional<std::string> trace;
  bool overwrite_trace = false;
};

// Returns the exit status (0 trained, 1 the plan does not fit and --force was not given). Throws InputError.
int run_training(RunOptions& options);

}  // namespace zeroplan
