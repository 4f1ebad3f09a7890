#include "cli/run_command.h"

#include <iostream>
#include <memory>

#include "cli/common_options.h"
#include "core/input_error.h"
#include "run/training_run.h"

namespace zeroplan {

void add_run_command(CLI::App& app, int* status) {
  auto options = std::make_shared<RunOptions>();
  auto common = std::make_shared<CommonOptions>();
  CLI::App* cmd = app.add_subcommand(
      "run", "Train the model on this machine's GPUs (--gpus N: one rank per GPU, ZeRO stages 0-3 over NCCL; "
             "--backend cpu: the fp32 reference over MPI) and measure it against the plan");
  add_common_options(*cmd, *common);
  cmd->add_option("--steps", options->steps, "Optimizer steps to run")->capture_default_str();
  cmd->add_option("--warmup-steps", options->warmup_steps, "Steps left out of the timing medians (default 2)");
  cmd->add_option("--backend", options->backend, "cuda (the GPU executor) or cpu (the Eigen fp32 reference)")
      ->capture_default_str();
  cmd->add_option("--data", options->data,
                  "Token file (llm.c .bin with its header: uint16 tokens, or uint32 for vocabularies above 65,536; "
                  "nanoGPT's headerless uint16 .bin) or any text file (byte-level tokens); for an image classifier "
                  "(resnet101), CIFAR-10's binary folder (data_batch_1..5.bin, test_batch.bin); synthetic data when "
                  "absent");
  cmd->add_option("--report", options->report, "Write the plan JSON plus the measurements (\"measured\") here");
  cmd->add_flag("--force", options->force, "Run even when the planner says it does not fit");
  cmd->add_option("--seed", options->seed, "Seed of the parameter initialization and synthetic data")
      ->capture_default_str();
  cmd->add_flag("--deterministic", options->deterministic,
               "Fixed-order reductions and cuBLASLt's first-ranked GEMM algorithm (not the fastest timed): repeated "
               "runs give bit-identical losses and parameters");
  cmd->add_option("--lr", options->learning_rate, "AdamW learning rate (default: the training configuration's)");
  cmd->add_option("--save-dir", options->save_dir,
                  "Write checkpoints here (SAVE_DIR/step-N: each rank's partition and a manifest; see --save-every)");
  cmd->add_option("--save-every", options->save_every,
                  "Save a checkpoint every K steps and after the last (with --save-dir; default: after the last only)");
  cmd->add_option("--resume", options->resume,
                  "Continue from a checkpoint: a step directory, or a save directory (its latest complete step); "
                  "any world size and stage (the partitions are resharded)");
  cmd->add_option("--init-from", options->init_from,
                  "Start from a Hugging Face checkpoint by its transformers names: a model.safetensors file, a sharded "
                  "model.safetensors.index.json, or the folder holding either; each rank reads its own partition");
  cmd->add_option("--init-adapter", options->init_adapter,
                  "LoRA: start from an adapter as PEFT saves it (its folder, or adapter_model.safetensors), e.g. one "
                  "`zeroplan export --adapter` wrote; its adapter_config.json must give the run's rank, alpha and "
                  "targets");
  cmd->add_flag("--augment", options->augment,
               "An image classifier's training images (--data DIR) with torchvision's CIFAR augmentation: "
               "RandomCrop(32, padding=4) and RandomHorizontalFlip before the normalisation (DeepSpeed's CIFAR example "
               "has none, the default)");
  cmd->add_flag("--eval", options->eval,
               "After training an image classifier (a layer-list model such as resnet101 with --data DIR): its "
               "accuracy on CIFAR-10's test split");
  cmd->add_option("--save-grads", options->save_grads,
                  "Write the first step's gradients (reduced, unscaled, fp32) under the transformers / GPT-2 "
                  "checkpoint names to this safetensors file (one rank, or stage 0)");
  cmd->add_option("--trace", options->trace,
                  "Write the timed steps' median step as measured on the GPU's lanes (NCCL calls, the compute lane's "
                  "waits, offload copies, stage 3's units) beside the plan's timeline, as Chrome trace-event JSON "
                  "(ui.perfetto.dev); ranks other than 0 write FILE.rank<r>.json");
  cmd->add_flag("--overwrite", options->overwrite_trace, "Let --trace replace files that exist");
  cmd->add_option("--nvme-path", options->nvme_path,
                  "With --offload-optimizer nvme or --offload-param nvme: the directory on a local disk (NVMe) the "
                  "optimizer states and the parameters swap to (DeepSpeed's offload_optimizer / offload_param "
                  "nvme_path)");
  cmd->add_option("--collective-timeout", options->collective_timeout_s,
                  "Seconds a collective may wait for the other ranks; past it the run stops, naming the rank that "
                  "never arrived")
      ->capture_default_str();
  cmd->callback([options, common, status]() {
    try {
      // The executor builds each rank's partition only, whatever the flag says (zero.Init's behaviour at every
      // stage): --zero-init describes a DeepSpeed training script to plan and simulate.
      if (common->zero_init)
        throw InputError("command line", "--zero-init",
                         "describes how a DeepSpeed script builds its model (plan, simulate, recommend); zeroplan run "
                         "always builds each rank's partition only");
      ResolvedInputs resolved = resolve_inputs(*common);
      options->inputs = ResolvedPlanInputs{std::move(resolved.model), std::move(resolved.cluster),
                                           std::move(resolved.training), resolved.filter};
      options->gpus = common->gpus;
      options->ds_config = common->ds_config;
      *status = run_training(*options);
    } catch (const InputError&) {
      throw;
    } catch (const std::exception& e) {
      // out of device memory, CUDA errors: one line, status 2 (main prints InputErrors the same way)
      std::cerr << "zeroplan run: error: " << e.what() << '\n';
      *status = 2;
    }
  });
}

}  // namespace zeroplan
