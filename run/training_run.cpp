#include "run/training_run.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run/launcher.h"
#include "run/process_memory.h"
#include "run/rank_guard.h"
#include "core/input_error.h"
#include "core/lora_modules.h"
#include "core/units.h"
#include "exec/activation_accounting.h"
#include "exec/exec_config.h"
#include "exec/offload/cpu_adamw.h"
#include "exec/data_shard.h"
#include "exec/image_data.h"
#include "exec/token_data.h"
#include "exec/comm/mpi_communicator.h"
#include "exec/trainer.h"
#include "run/checkpoint.h"
#include "run/hf_checkpoint.h"
#include "run/image_training.h"
#include "sim/executor_device_memory.h"
#include "sim/executor_layout.h"
#include "sim/plan_json.h"
#include "sim/planner.h"
#include "sim/compute_time.h"
#include "sim/simulator.h"
#ifdef ZEROPLAN_HAVE_CUDA
#include "exec/comm/nccl_communicator.h"
#include "exec/cuda/cuda_trainer.h"
#endif

namespace zeroplan {

namespace {

constexpr const char* kCli = "command line";



exec::ExecConfig exec_config(const ModelDescription& model, const TrainingConfig& tr, std::uint64_t seed) {
  // What decides its allocations, as the planner models them (sim/executor_device_memory.h).
  exec::ExecConfig c = executor_exec_config(model, tr, tr.zero.stage);
  c.optimizer.learning_rate = tr.learning_rate;
  c.optimizer.beta1 = tr.adam_beta1;
  c.optimizer.beta2 = tr.adam_beta2;
  c.optimizer.epsilon = tr.adam_epsilon;
  c.optimizer.weight_decay = tr.weight_decay;
  c.optimizer.grad_clip = tr.gradient_clipping;
  c.loss_scale.static_scale = tr.loss_scale.static_loss_scale;
  c.loss_scale.initial_scale_power = tr.loss_scale.initial_scale_power;
  c.loss_scale.scale_window = tr.loss_scale.loss_scale_window;
  c.loss_scale.hysteresis = tr.loss_scale.hysteresis;
  c.loss_scale.consecutive_hysteresis = tr.loss_scale.consecutive_hysteresis;
  c.loss_scale.min_scale = tr.loss_scale.min_loss_scale;
  c.seed = seed;
  if (tr.lora.enabled) {
    // LoRA (core/lora_modules.h resolve_lora): the adapted modules by their paths in a block (exec/lora_layout.h
    // maps them onto our fused tensors).
    c.lora.enabled = true;
    c.lora.rank = tr.lora.rank;
    c.lora.alpha = tr.lora.alpha;
    c.lora.targets = tr.lora.targets;
    for (const BlockLinear& m : adapted_modules(model, tr.lora.targets)) c.lora.modules.push_back(m.path);
    c.lora.quantize_nf4 = tr.lora.quantize_base == BaseQuantization::nf4;
  }
  try {
    if (!c.network) exec::validate(c);  // a layer list was checked as the description was read (core/layer_ops.h)
  } catch (const std::invalid_argument& e) {
    throw InputError(model.source, "executor", e.what());
  }
  return c;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}
std::string gib(Bytes b) { return fmt("%.3f", to_gib(b)); }
std::string err_pct(double predicted, double measured) {
  if (measured == 0) return predicted == 0 ? "0.0%" : "n/a";
  return fmt("%+.1f%%", 100.0 * (predicted - measured) / measured);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

// The launcher (starts the ranks and watches them) or one rank (trains); `guard` is set once this process is a
// rank, so that run_training can end the run cleanly when this rank fails.
// --save-grads: the step's gradients as every rank holds them at stage 0 (whole, reduced), written by rank 0.
void save_first_step_gradients(const std::string& path, exec::Trainer& trainer, const exec::StepResult& step) {
  const std::vector<float> grads = trainer.grads();
  if (trainer.rank() != 0) return;
  write_hf_safetensors(path, trainer.layout(),
                       [&](const exec::ParamTensor& t, std::int64_t first, std::int64_t count, float* out) {
                         std::copy_n(grads.begin() + t.offset + first, count, out);
                       },
                       "F32", {{"format", "pt"}, {"loss", fmt("%.9g", step.loss)}, {"what", "zeroplan run gradients of step 1"}});
}

// The run's inputs resolved and checked before any rank starts: every problem is an InputError naming the flag
// or the file, raised by the launcher (or the only rank) before anything is allocated or written.
struct ResolvedRun {
  RankEnvironment env;
  int world = 1;
  std::unique_ptr<CheckpointReader> resume;
  std::int64_t first_step = 0;  // the checkpoint's step when resuming
  std::int64_t run_steps = 0;   // steps this run makes
  // Where the NVMe path came from, for its errors.
  std::string nvme_source = "--ds-config", nvme_field = "zero_optimization.offload_optimizer.nvme_path";
  // --init-from, checked against the layout every rank builds.
  std::unique_ptr<exec::ParamLayout> init_layout;
  std::unique_ptr<HfCheckpointSource> init_from;
};

// Step 1, resolve: the flags, the checkpoint to resume, the ranks, the offload and dtype choices.
ResolvedRun resolve_run(RunOptions& o) {
  ResolvedRun r;
  ResolvedPlanInputs& in = o.inputs;
  TrainingConfig& tr = in.training;
  if (o.steps < 1) throw InputError(kCli, "--steps", "must be at least 1");
  if (o.save_every < 0) throw InputError(kCli, "--save-every", "must be >= 0, got " + std::to_string(o.save_every));
  if (o.save_every > 0 && !o.save_dir) throw InputError(kCli, "--save-every", "needs --save-dir");
  // Resuming: --steps counts from the start of training, so only the steps after the checkpoint run.
  auto& resume = r.resume;
  if (o.resume) {
    resume = std::make_unique<CheckpointReader>(*o.resume, "--resume");
    if (resume->state().step >= o.steps)
      throw InputError(kCli, "--steps", "the checkpoint in " + resume->directory() + " is at step " +
                                            std::to_string(resume->state().step) +
                                            "; --steps is the total number of steps, expected more than that");
  }
  r.first_step = resume ? resume->state().step : 0;
  r.run_steps = o.steps - r.first_step;
  const std::int64_t first_step = r.first_step, run_steps = r.run_steps;
  if (o.save_dir) {
    std::vector<std::int64_t> saves;
    for (std::int64_t s = first_step + 1; s <= o.steps; ++s)
      if (s == o.steps || (o.save_every > 0 && s % o.save_every == 0)) saves.push_back(s);
    check_save_dir(*o.save_dir, saves);
  }
  if (!o.warmup_steps) o.warmup_steps = std::min<std::int64_t>(2, run_steps - 1);
  if (*o.warmup_steps < 0 || *o.warmup_steps >= run_steps)
    throw InputError(kCli, "--warmup-steps", "must be in [0, the steps this run makes: " + std::to_string(run_steps) +
                                                 "), got " + std::to_string(*o.warmup_steps));
  if (o.backend != "cuda" && o.backend != "cpu") throw InputError(kCli, "--backend", "expected cuda or cpu");
  if (!(o.collective_timeout_s >= exec::kMinCollectiveTimeoutS && o.collective_timeout_s <= exec::kMaxCollectiveTimeoutS))
    throw InputError(kCli, "--collective-timeout",
                     "expected seconds in [" + fmt("%g", exec::kMinCollectiveTimeoutS) + ", " +
                         fmt("%g", exec::kMaxCollectiveTimeoutS) + "], got " + fmt("%g", o.collective_timeout_s));
  if (o.learning_rate) {
    if (!std::isfinite(*o.learning_rate) || *o.learning_rate <= 0)
      throw InputError(kCli, "--lr", "expected a finite learning rate > 0, got " + fmt("%g", *o.learning_rate));
    tr.learning_rate = *o.learning_rate;
  }
  // The ranks: --gpus N on this machine (started below), or the world mpirun made.
  r.env = rank_environment();
  const RankEnvironment& env = r.env;
  r.world = o.gpus ? *o.gpus : (env.launched ? env.world : 1);
  const int world = r.world;
  if (env.launched && env.world != world)
    throw InputError(kCli, "--gpus", "the launcher started " + std::to_string(env.world) + " ranks but --gpus says " +
                                         std::to_string(world) + " (leave --gpus out under mpirun)");
  if (in.cluster.total_gpus() != world) in.cluster = with_gpu_count(in.cluster, world);
  if (tr.optimizer != OptimizerKind::adamw) throw InputError(kCli, "--optimizer", "the executor implements adamw");
  // DeepSpeed's dtype fields (runtime/engine.py get_data_types): the executor accumulates and reduces gradients
  // in the model precision or in fp32 (exec/zero/zero_engine.h); another dtype would be accepted and not
  // honoured: refused, naming the field.
  const auto model_or_fp32 = [&](const std::optional<Precision>& dtype, const char* field, const char* what) {
    if (dtype && *dtype != tr.precision && *dtype != Precision::fp32)
      throw InputError(o.ds_config ? *o.ds_config : std::string(kCli), field,
                       to_string(*dtype) + " is not implemented by the executor: it " + what + " gradients in the "
                       "model precision (" + to_string(tr.precision) + ") or in fp32; expected " +
                       to_string(tr.precision) + ", fp32 or the field left out (zeroplan plan --engine deepspeed "
                       "models DeepSpeed with it)");
  };
  model_or_fp32(tr.communication_dtype, "communication_data_type", "reduces");
  model_or_fp32(tr.grad_accum_dtype, "data_types.grad_accum_dtype", "accumulates");
  if (in.filter.stage < 0) tr.zero.stage = 0;  // no stage asked for: plain data parallelism
  // ZeRO-Offload: the optimizer to the CPU at stages 1-3, the parameters to the CPU at stage 3
  // (exec/zero/zero_engine.h).
  if (tr.zero.offload_param != OffloadDevice::none && tr.zero.stage != 3)
    throw InputError(kCli, "--offload-param", to_string(tr.zero.offload_param) +
                                                  " needs --stage 3 (the partitioned parameters); got stage " +
                                                  std::to_string(tr.zero.stage));
  if (tr.zero.offload_param != OffloadDevice::none) {
    // Every chunk is staged whole on the GPU before its all-gather: offload_param.buffer_size must hold the
    // largest (DeepSpeed's NVMe swapper likewise refuses a parameter larger than its buffers).
    const auto f = executor_layout_figures(in.model, tr, world, 3);
    if (f && f->largest_chunk > tr.zero.param_buffer_size)
      throw InputError(o.ds_config ? *o.ds_config : std::string(kCli), "zero_optimization.offload_param.buffer_size",
                       std::to_string(tr.zero.param_buffer_size) + " elements is smaller than the largest partition "
                       "chunk, " + std::to_string(f->largest_chunk) + " elements; expected at least that");
  }
  if (tr.zero.offload_optimizer != OffloadDevice::none && tr.zero.stage == 0)
    throw InputError(kCli, "--offload-optimizer", to_string(tr.zero.offload_optimizer) +
                                                      " needs --stage 1, 2 or 3 (the partitioned optimizer states)");
  // ZeRO-Infinity's optimizer offload swaps the states to files under nvme_path (exec/offload/optimizer_swapper.h):
  // --nvme-path, else the DeepSpeed config's (which must name one with device nvme: core/deepspeed_config.cpp).
  std::string& nvme_source = r.nvme_source;
  std::string& nvme_field = r.nvme_field;
  // ZeRO-Infinity's parameter offload likewise keeps the 16-bit partition's chunks there (exec/offload/param_swapper.h);
  // one directory serves both (each swapper names its own files).
  const bool optimizer_nvme = tr.zero.offload_optimizer == OffloadDevice::nvme;
  const bool param_nvme = tr.zero.offload_param == OffloadDevice::nvme;
  if (optimizer_nvme || param_nvme) {
    if (!optimizer_nvme) nvme_field = "zero_optimization.offload_param.nvme_path";
    if (o.nvme_path) {
      tr.zero.nvme_path = *o.nvme_path;
      nvme_source = kCli;
      nvme_field = "--nvme-path";
    } else if (!o.ds_config) {
      throw InputError(kCli, "--nvme-path", std::string("missing: ") +
                                                (optimizer_nvme ? "--offload-optimizer nvme swaps the optimizer states"
                                                                : "--offload-param nvme keeps the parameters") +
                                                " in files in a directory on a local disk (NVMe); expected --nvme-path DIR");
    }
  } else if (o.nvme_path) {
    throw InputError(kCli, "--nvme-path", "is read with --offload-optimizer nvme or --offload-param nvme only (the "
                                          "offload here is " + to_string(tr.zero.offload_optimizer) + " / " +
                                          to_string(tr.zero.offload_param) + ")");
  }
  check_executor_sequence_length(in.model, tr.seq_len, kCli, "--seq");
  // --init-from: the checkpoint checked against the model before any rank starts (one line naming the file and
  // the tensor); each rank opens it itself to read its share.
  if (o.save_grads && tr.zero.stage != 0 && world > 1)
    throw InputError(kCli, "--save-grads", "needs every rank to hold the whole reduced gradients: stage 0, or one rank");
  // A LoRA checkpoint holds the adapters and their optimizer states only: the base comes again from --init-from.
  if (o.init_from && o.resume && !tr.lora.enabled)
    throw InputError(kCli, "--init-from", "cannot be combined with --resume (a checkpoint of ours holds the states "
                                          "to continue from)");
  // Layer-list models (ResNet-101 on CIFAR-10) train on CIFAR-10's images, on either backend.
  const bool network = in.model.has_ops() && !in.model.transformer;
  if (network) {
    if (in.model.input_shape->channels != exec::kCifarChannels || in.model.input_shape->height != exec::kCifarSide ||
        in.model.input_shape->width != exec::kCifarSide)
      throw InputError(in.model.source, "input_shape", "the executor feeds CIFAR-10's 3 x 32 x 32 images; this model "
                                                       "takes another shape");
    if (in.model.classes != exec::kCifarClasses)
      throw InputError(in.model.source, "layers", "the last op gives " + std::to_string(in.model.classes) +
                                                      " logits; CIFAR-10 has 10 classes");
  } else if (o.eval) {
    throw InputError(kCli, "--eval", "reports an image classifier's test accuracy (a layer-list model with --data "
                                     "DIR); this model is a transformer");
  }
  if (o.eval && !o.data)
    throw InputError(kCli, "--eval", "needs --data DIR (CIFAR-10's folder: test_batch.bin is evaluated)");
  if (o.augment && (!network || !o.data))
    throw InputError(kCli, "--augment", !network ? "augments an image classifier's training images (a layer-list "
                                                   "model); this model is a transformer"
                                                 : "needs --data DIR (CIFAR-10's folder: its training images are "
                                                   "augmented; synthetic images are not)");
  if (tr.lora.enabled) {
    // LoRA runs on both backends' transformer pipeline (exec/cpu/cpu_trainer.cpp, exec/cuda/cuda_trainer.cu); what
    // is not built for it yet is refused by name before anything starts.
    if (tr.lora.quantize_base == BaseQuantization::int8)
      throw InputError(kCli, "--quantize-base", "int8 is planned, not run: the executor holds the base as nf4 or "
                                                "unquantised");
    if (tr.lora.quantize_base == BaseQuantization::nf4 && tr.zero.stage == 3)
      throw InputError(kCli, "--quantize-base", "nf4 at --stage 3: the executor keeps the NF4 codes whole on every "
                                                "rank and does not partition them yet; use --stage 0, 1 or 2");
    if (tr.zero.offload_optimizer != OffloadDevice::none || tr.zero.offload_param != OffloadDevice::none)
      throw InputError(kCli, tr.zero.offload_optimizer != OffloadDevice::none ? "--offload-optimizer" : "--offload-param",
                       "with LoRA is not built in the executor yet (the frozen base's engine offloads nothing)");
  }
  r.init_layout = std::make_unique<exec::ParamLayout>(executor_param_layout(in.model, world));
  if (o.init_from) r.init_from = std::make_unique<HfCheckpointSource>(*o.init_from, *r.init_layout, "--init-from");
  return r;
}

// Step 2, launch: this process is the launcher when the ranks are not started yet (--gpus N > 1): it starts them
// (local processes, or mpirun for the CPU backend) and returns their exit status; a rank returns nullopt.
std::optional<int> launch_ranks(RunOptions& o, ResolvedRun& r) {
  const RankEnvironment& env = r.env;
  const int world = r.world;
  auto& resume = r.resume;
  if (!env.launched && world > 1) {
    // A damaged checkpoint is one line here, before any rank starts.
    if (resume) resume->verify();
    // This process is the launcher: start the ranks, which print the plan and the run themselves.
    if (o.argv.empty()) o.argv = this_process_command_line();
    if (o.backend == "cpu") {
      if (!exec::mpi_available())
        throw InputError(kCli, "--gpus", "this zeroplan was built without MPI: the CPU backend runs one rank");
      read_test_fault(world, o.steps);  // a malformed test switch fails here, before any rank starts
      return launch_under_mpirun(o.argv, world, o.collective_timeout_s);
    }
#ifdef ZEROPLAN_HAVE_CUDA
    int devices = 0;
    std::string why;
    if (!exec::cuda_device_available(&why)) throw InputError(kCli, "--backend", "cuda: " + why + " (try --backend cpu)");
    devices = exec::cuda_device_count();
    if (devices < world)
      throw InputError(kCli, "--gpus", std::to_string(world) + " ranks need " + std::to_string(world) +
                                           " GPUs; this machine has " + std::to_string(devices));
    read_test_fault(world, o.steps);
    return launch_local_ranks(o.argv, world, exec::make_nccl_unique_id_hex(), o.collective_timeout_s);
#else
    throw InputError(kCli, "--backend", "this zeroplan was built without the CUDA executor (try --backend cpu)");
#endif
  }
  return std::nullopt;
}

// One rank's engine: its plan, communicators, trainer and data. The communicators are declared before the
// trainer so that they outlive it: the trainer's destructor waits on the communicator's stream (a destroyed NCCL
// stream crashed every 2-GPU run at its end, and every rank that failed by an exception, on the first 2xH200 run).
struct RankEngine {
  // The node's available host memory from here to the report (start-up included: a plan's host peak may come
  // while the offloaded states are allocated). The baseline is the launcher's reading before it started the ranks.
  std::unique_ptr<HostMemoryWatch> host_watch;
  std::int64_t host_available_at_start = 0;
  exec::ExecConfig cfg;
  int offload_threads = 0;
  // offload_param nvme: rank 0's NVMe bytes per step as the planner counts them (sim/executor_layout.h).
  Bytes param_nvme_read_predicted = 0, param_nvme_write_predicted = 0;
  PlanChoice choice;
  PlanResult plan;
  std::optional<StepSimulation> sim;
  std::unique_ptr<exec::Communicator> mpi, comm;
  std::unique_ptr<exec::Trainer> trainer;
  exec::TokenSource data;                   // transformers
  std::optional<exec::CifarDataset> images; // layer lists with --data (else synthetic images)
  std::string data_description;
  double flops_per_token = 0, peak = 0, job_peak = 0;
  std::int64_t tokens_per_step = 0;  // the global batch
  exec::Communicator* ranks_comm = nullptr;
};

// Step 3, build the engine: the plan first (false when it does not fit and --force was not given: nothing is
// allocated), then the communicators, the trainer, the data, and the states from --init-from or --resume.
bool build_engine(RunOptions& o, ResolvedRun& r, RankGuard& guard, RankEngine& e) {
  ResolvedPlanInputs& in = o.inputs;
  TrainingConfig& tr = in.training;
  const RankEnvironment& env = r.env;
  const int world = r.world;
  // The node's available host memory from here to the report (start-up included: a plan's host peak may come
  // while the offloaded states are allocated). The baseline is the launcher's reading before it started the ranks.
  e.host_watch = std::make_unique<HostMemoryWatch>();
  std::int64_t& host_available_at_start = e.host_available_at_start;
  host_available_at_start = e.host_watch->first_bytes();
  if (const char* at_launch = std::getenv(kHostAvailableAtLaunchVariable)) {
    char* end = nullptr;
    const long long v = std::strtoll(at_launch, &end, 10);
    if (end != at_launch && *end == '\0' && v > 0) host_available_at_start = v;
  }
  if (env.rank != 0 && !std::freopen("/dev/null", "w", stdout))
    throw std::runtime_error("cannot silence the standard output of rank " + std::to_string(env.rank));
  if (in.model.transformer && in.model.transformer->dropout > 0) {
    tr.notes.push_back("run: the model's dropout " + fmt("%.2f", in.model.transformer->dropout) +
                       " is not implemented by the executor; the run and its plan use dropout 0");
    in.model.transformer->dropout = 0;
  }
  // What the executor stores: flash attention (no s x s), dlogits written in place over the 16-bit logits.
  if (!tr.lora.enabled) {
    use_engine(tr, TrainingEngine::zeroplan);  // the memory model of our own executor (core/training_config.h)
  } else {
    // The planner models LoRA under DeepSpeed's engine only (sim/lora_model.h); a LoRA run prints that plan (on the
    // GPU its rows beside the measured ones: DeepSpeed's engine against ours, not a check of our executor's plan).
    tr.notes.push_back("run: LoRA's plan is DeepSpeed's engine (PEFT under deepspeed.initialize); the planner has "
                       "no LoRA model of zeroplan's own engine yet");
  }
  exec::ExecConfig& cfg = e.cfg;
  cfg = exec_config(in.model, tr, o.seed);
  // DeepSpeed's overlap_comm when a DeepSpeed config gives it; otherwise our executor's default (it overlaps),
  // resolved by the planner's own rule (sim/plan_choice.h apply_choice), so that the plan below and
  // `zeroplan plan --engine zeroplan` count the same gradient bucket buffers as the executor allocates.
  tr = apply_choice(tr, PlanChoice{tr.zero.stage, tr.zero.offload_optimizer, tr.zero.offload_param});
  cfg.zero = executor_zero_settings(tr, tr.zero.stage);
  if (tr.zero.offload_optimizer == OffloadDevice::nvme) {
    cfg.zero.nvme_path = tr.zero.nvme_path;
    cfg.zero.nvme_path_source = r.nvme_source;
    cfg.zero.nvme_path_field = r.nvme_field;
    cfg.zero.optimizer_buffer_count = tr.zero.optimizer_buffer_count;
  }
  if (tr.zero.offload_param == OffloadDevice::nvme) {  // executor_zero_settings set the path and max_in_cpu
    cfg.zero.param_nvme_path = tr.zero.nvme_path;
    cfg.zero.param_nvme_path_source = r.nvme_source;
    cfg.zero.param_nvme_path_field = r.nvme_field == "--nvme-path" ? r.nvme_field
                                                                   : "zero_optimization.offload_param.nvme_path";
  }
  if (!tr.zero.overlap_comm_given && world > 1 && cfg.zero.stage > 0)
    tr.notes.push_back("run: gradient reductions overlap backward (overlap_comm true; a DeepSpeed config can say "
                       "false)");
  // The CPU backend is deterministic by construction (fixed-order loops and MPI reductions). On the GPU,
  // --deterministic orders the two reductions that use atomics otherwise: bias/LayerNorm gradient column sums
  // (one partial row per row block, added in order) and the token-embedding gradient (each token's positions
  // summed in order); cuBLASLt, the attention kernels, the gradient norm and NCCL's collectives are already
  // run-to-run deterministic at a fixed world size.
  cfg.zero.deterministic = o.deterministic;
  // The CPU AdamW's threads: --cpu-threads-per-rank, else the node's cores among its ranks (all on this node).
  e.offload_threads = cfg.zero.cpu_optimizer_threads > 0 ? cfg.zero.cpu_optimizer_threads
                                                                 : exec::offload::default_optimizer_threads(world);

  // The plan first: stop before allocating when the planner says it does not fit.
  PlannerOptions popts;
  popts.search_max_micro_batch = false;
  e.choice = PlanChoice{tr.zero.stage, tr.zero.offload_optimizer, tr.zero.offload_param};
  const PlanChoice& choice = e.choice;
  e.plan = evaluate_plan(in.model, in.cluster, tr, choice, popts);
  if (tr.zero.offload_param == OffloadDevice::nvme)
    if (const auto f = executor_layout_figures(in.model, tr, world, 3)) {
      e.param_nvme_read_predicted = f->param_nvme_read_bytes_per_micro_step * tr.grad_accum + f->param_nvme_update_read_bytes;
      e.param_nvme_write_predicted = f->param_nvme_write_bytes_per_step;
    }
  const PlanResult& plan = e.plan;
  const GpuMemoryBreakdown& pred = plan.memory.gpu;
  std::cout << "plan: " << in.model.name << " on " << world << "x " << in.cluster.gpu_model << ", "
            << choice.label() << ", micro-batch " << tr.micro_batch
            << " x seq " << tr.seq_len << " x grad-accum " << tr.grad_accum << ", " << to_string(tr.precision)
            << ", checkpointing " << to_string(tr.checkpointing) << ": predicted " << gib(pred.total) << " GiB of "
            << gib(in.cluster.gpu_memory_bytes) << " GiB\n";
  for (const auto& n : tr.notes) std::cout << "  note: " << n << '\n';
  if (!plan.gpu_fits && o.backend == "cuda") {
    std::cout << "the planner says this does not fit:\n";
    for (const auto& [name, bytes] : pred.components()) std::cout << "  " << name << ": " << gib(bytes) << " GiB\n";
    std::cout << "  total: " << gib(pred.total) << " GiB > capacity " << gib(in.cluster.gpu_memory_bytes) << " GiB\n";
    if (!o.force) {
      std::cout << "stopped before allocating (--force runs it anyway)\n";
      return false;
    }
  }
  e.sim = [&]() -> std::optional<StepSimulation> {
    try {
      return simulate_step(in.model, in.cluster, tr, choice);
    } catch (const InputError& e) {
      std::cout << "  note: no step-time prediction: " << e.what() << '\n';
      return std::nullopt;
    }
  }();

  // The communicators before the trainer (RankEngine's order), so that they outlive it.
  auto& mpi = e.mpi;
  auto& comm = e.comm;
  auto& trainer = e.trainer;
  if (env.by_mpi || (o.backend == "cpu" && world > 1)) mpi = exec::make_mpi_communicator(guard.comm_watch());
  if (o.backend == "cpu") {
    trainer = exec::make_cpu_trainer(cfg, mpi.get());
  } else {
#ifdef ZEROPLAN_HAVE_CUDA
    std::string why;
    if (!exec::cuda_device_available(&why)) throw InputError(kCli, "--backend", "cuda: " + why + " (try --backend cpu)");
    if (world > 1) comm = exec::make_nccl_communicator(env.rank, world, env.local_rank, env.nccl_id_hex, mpi.get(),
                                                         guard.comm_watch());
    trainer = exec::make_cuda_trainer(cfg, comm.get());
#else
    throw InputError(kCli, "--backend", "this zeroplan was built without the CUDA executor (try --backend cpu)");
#endif
  }
  exec::TokenSource& data = e.data;
  if (cfg.network) {
    // CIFAR-10 with DeepSpeed's example transforms (exec/image_data.h), or images drawn from the seed.
    if (o.data) {
      try {
        e.images = exec::CifarDataset::open(*o.data, exec::CifarSplit::train,
                                            o.augment ? exec::ImageTransforms::augmented()
                                                      : exec::ImageTransforms::deepspeed_cifar(),
                                            o.seed + 1);
      } catch (const std::invalid_argument& ex) {
        throw InputError(*o.data, "--data", ex.what());
      }
    }
    e.data_description = e.images ? e.images->description()
                                  : "synthetic uniform images and labels (seed " + std::to_string(o.seed + 1) + ")";
  } else {
  data = exec::TokenSource::synthetic(cfg.shape.vocab, o.seed + 1);
  if (o.data) {
    try {
      data = exec::TokenSource::from_file(*o.data, cfg.shape.vocab);
    } catch (const std::invalid_argument& e) {
      throw InputError(*o.data, "--data", e.what());
    }
  }
  e.data_description = data.description();
  }
  // PaLM appendix B (zero-formulas.md sec. 6): 6N + 12 L h s per token, recompute not counted.
  e.flops_per_token = model_flops_per_token(in.model, tr);
  e.peak = in.cluster.peak_flops(to_string(tr.precision));  // per GPU
  // MFU of the job: the global batch's FLOPs over every rank's peak (PaLM appendix B); the first 2-GPU run
  // divided by one GPU's peak and printed twice the true figure.
  e.job_peak = e.peak * world;
  // the global batch: tokens, or a layer list's samples (its MFU counts FLOPs per sample: model_flops_per_token)
  e.tokens_per_step = (cfg.network ? cfg.micro_batch * cfg.grad_accum : cfg.tokens_per_step()) * world;
  if (r.init_from && cfg.lora.enabled) {
    // LoRA: the checkpoint is the frozen base (each rank its share, as below); the adapters keep PEFT's
    // initialisation (A kaiming-uniform from the seed, B zero).
    trainer->set_frozen(*r.init_layout, r.init_from->state_source());
    std::cout << "initialized the frozen base from " << r.init_from->description() << '\n';
  } else if (r.init_from) {
    // Each rank reads its share of the model states from the checkpoint (exec/zero/zero_engine.h restore_state:
    // its partition at stage 3, the whole 16-bit parameters at stages 0-2), AdamW from step 0.
    trainer->restore_state(r.init_from->state_source(), 0, trainer->loss_scaler_state());
    // A layer list's BatchNorm running statistics: buffers every rank keeps whole.
    for (const exec::BufferTensor& b : r.init_layout->buffers()) trainer->set_buffer(b.name, r.init_from->buffer(b));
    std::cout << "initialized from " << r.init_from->description() << '\n';
  }
  if (const auto& resume = r.resume) {
    // A LoRA checkpoint's adapters were trained on a base that is not in it: the one --init-from gives again.
    if (cfg.lora.enabled && resume->state().lora && resume->state().lora->base_model && !o.init_from)
      throw InputError(kCli, "--init-from", "missing: the checkpoint's LoRA adapters were trained on the base " +
                                                *resume->state().lora->base_model + "; give it again with --init-from");
    // The checkpoint's states (resharded to this world and stage), optimizer step, loss scaler and data position.
    resume->restore(*trainer);
    const std::string reads = e.cfg.network ? e.data_description : data.description();
    if (resume->state().data != reads)
      tr.notes.push_back("resume: the checkpoint was trained on " + resume->state().data + ", this run reads " + reads);
    // A layer list's images: the CIFAR stream's position (synthetic images follow the step, nothing to seek).
    if (!e.cfg.network) data.seek(resume->state().data_position);
    else if (e.images) e.images->seek(resume->state().data_position);
    std::cout << "resumed from " << resume->directory() << " at step " << r.first_step << " (saved with "
              << resume->state().world << " rank(s), stage " << resume->state().stage << ")\n";
  }
  e.ranks_comm = comm ? comm.get() : mpi.get();
  return true;
}

// What the timed steps measured, per step after the warm-up.
struct TrainingRecord {
  std::vector<double> losses, step_s, fwd_s, bwd_s, opt_s, to_host_s, cpu_adamw_s, to_device_s;
  std::vector<double> param_h2d_s, param_d2h_s, nvme_wait_s, nvme_read_bytes, nvme_write_bytes;
  std::vector<double> param_nvme_wait_s, param_nvme_read_bytes, param_nvme_write_bytes;
  std::vector<double> comm_s[exec::kCommKinds], exposed_s;
  exec::CommCounters counters_before;
};

// Step 4, train: the steps, each printed; checkpoints saved as asked.
TrainingRecord train(RunOptions& o, ResolvedRun& r, RankEngine& e, RankGuard& guard) {
  ResolvedPlanInputs& in = o.inputs;
  TrainingConfig& tr = in.training;
  const RankEnvironment& env = r.env;
  const int world = r.world;
  const std::int64_t first_step = r.first_step;
  exec::ExecConfig& cfg = e.cfg;
  exec::Trainer* trainer = e.trainer.get();
  exec::TokenSource& data = e.data;
  exec::Communicator* ranks_comm = e.ranks_comm;
  const double flops_per_token = e.flops_per_token, job_peak = e.job_peak;
  const std::int64_t tokens_per_step = e.tokens_per_step;
  RankGuard* guard_ptr = &guard;
  TrainingRecord t;
  auto& [losses, step_s, fwd_s, bwd_s, opt_s, to_host_s, cpu_adamw_s, to_device_s, param_h2d_s, param_d2h_s,
         nvme_wait_s, nvme_read_bytes, nvme_write_bytes, param_nvme_wait_s, param_nvme_read_bytes,
         param_nvme_write_bytes, comm_s, exposed_s, counters_before] = t;
  auto save = [&](std::int64_t step) {
    CheckpointState st;
    st.step = step;
    st.optimizer_step = trainer->optimizer_step();
    st.scaler = trainer->loss_scaler_state();
    st.data_position = cfg.network ? (e.images ? e.images->position() : 0) : data.position();
    st.seed = o.seed;
    st.data = cfg.network ? e.data_description : data.description();
    st.world = world;
    st.stage = cfg.zero.stage;
    st.precision = to_string(tr.precision);
    st.shape = cfg.shape;
    if (cfg.lora.enabled) st.lora = CheckpointLora{cfg.lora, o.init_from};
    const auto t0 = std::chrono::steady_clock::now();
    save_checkpoint(*o.save_dir, *trainer, world > 1 ? ranks_comm : nullptr, st);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string dir = checkpoint_step_dir(*o.save_dir, step);
    std::int64_t bytes = 0;
    for (const auto& f : std::filesystem::directory_iterator(dir)) bytes += static_cast<std::int64_t>(f.file_size());
    std::cout << "checkpoint: " << dir << " (" << fmt("%.3f", bytes / 1e9) << " GB, saved in " << fmt("%.2f", seconds)
              << " s)\n";
  };
  std::cout << "run: " << o.steps << " steps on " << trainer->device_name() << " (" << trainer->backend() << "), data "
            << e.data_description;
  if (!cfg.network) std::cout << ", vocab padded " << cfg.shape.vocab << " -> " << cfg.shape.padded_vocab;
  std::cout << '\n';

  for (std::int64_t s = first_step; s < o.steps; ++s) {
    const std::int64_t k = s - first_step;  // steps made by this run
    guard_ptr->before_step(s + 1);
    if (k == *o.warmup_steps) counters_before = trainer->comm_counters();
    exec::StepResult r;
    if (cfg.network) {
      const exec::ImageBatch b = e.images ? exec::next_rank_share(*e.images, cfg.micro_batch, cfg.grad_accum, world,
                                                                  env.rank)
                                          : synthetic_images(*cfg.network, cfg.micro_batch * cfg.grad_accum,
                                                             o.seed + 1, s * world + env.rank);
      r = trainer->step_images(b.images, b.labels);
    } else {
      const exec::TokenBatch b =
          exec::next_rank_share(data, cfg.micro_batch, cfg.seq_len, cfg.grad_accum, world, env.rank);
      r = trainer->step(b.inputs, b.targets);
    }
    losses.push_back(r.loss);
    if (k == 0 && o.save_grads) save_first_step_gradients(*o.save_grads, *trainer, r);
    if (k >= *o.warmup_steps) {
      step_s.push_back(r.times.step_s);
      fwd_s.push_back(r.times.forward_s);
      bwd_s.push_back(r.times.backward_s);
      opt_s.push_back(r.times.optimizer_s);
      for (int k = 0; k < exec::kCommKinds; ++k) comm_s[k].push_back(r.times.comm_s[k]);
      exposed_s.push_back(r.times.exposed_comm_s);
      to_host_s.push_back(r.times.offload.to_host_s);
      cpu_adamw_s.push_back(r.times.offload.cpu_adamw_s);
      to_device_s.push_back(r.times.offload.to_device_s);
      nvme_wait_s.push_back(r.times.offload.nvme_wait_s);
      nvme_read_bytes.push_back(static_cast<double>(r.times.offload.nvme_read_bytes));
      nvme_write_bytes.push_back(static_cast<double>(r.times.offload.nvme_write_bytes));
      param_nvme_wait_s.push_back(r.times.offload.param_nvme_wait_s);
      param_nvme_read_bytes.push_back(static_cast<double>(r.times.offload.param_nvme_read_bytes));
      param_nvme_write_bytes.push_back(static_cast<double>(r.times.offload.param_nvme_write_bytes));
      param_h2d_s.push_back(r.times.offload.param_to_device_s);
      param_d2h_s.push_back(r.times.offload.param_to_host_s);
    }
    const double tps = tokens_per_step / r.times.step_s;
    const exec::MemoryReport mem = trainer->memory();
    // A layer list's step also says how many of the global batch's samples it classified right.
    const std::string accuracy = r.correct >= 0 ? " | acc " + fmt("%5.1f", 100.0 * static_cast<double>(r.correct) /
                                                                          static_cast<double>(tokens_per_step)) + "%"
                                                : std::string();
    std::printf("step %4lld/%lld | loss %.4f%s | %8.1f ms | %10.0f %s/s | MFU %5.1f%% | mem %.2f GiB%s%s\n",
                static_cast<long long>(s + 1), static_cast<long long>(o.steps), r.loss, accuracy.c_str(),
                r.times.step_s * 1e3, tps, cfg.network ? "samples" : "tok",
                job_peak > 0 ? 100.0 * tps * flops_per_token / job_peak : 0.0, to_gib(mem.peak_total),
                r.skipped ? " | overflow: step skipped" : "",
                cfg.precision == exec::ExecPrecision::fp16 ? (" | scale " + fmt("%.0f", r.loss_scale)).c_str() : "");
    std::fflush(stdout);
    if (o.save_dir && (s + 1 == o.steps || (o.save_every > 0 && (s + 1) % o.save_every == 0))) save(s + 1);
  }

  if (o.eval) {
    const TestAccuracy acc = evaluate_test_split(*o.data, *e.trainer, e.cfg.micro_batch, r.world, r.env.rank,
                                                 r.world > 1 ? e.ranks_comm : nullptr);
    std::printf("\ntest accuracy %.2f%% (%lld of %lld images of %s; loss %.4f; %lld left out: not a whole global "
                "batch)\n",
                acc.images > 0 ? 100.0 * static_cast<double>(acc.correct) / static_cast<double>(acc.images) : 0.0,
                static_cast<long long>(acc.correct), static_cast<long long>(acc.images), acc.description.c_str(),
                acc.loss, static_cast<long long>(acc.left_out));
  }
  return t;
}

// Step 5, report: measured beside predicted (memory per component and per rank, step time and its phases,
// communication per collective kind), and the --report document.
void report(RunOptions& o, ResolvedRun& r, RankEngine& e, const TrainingRecord& t, RankGuard& guard) {
  ResolvedPlanInputs& in = o.inputs;
  TrainingConfig& tr = in.training;
  const RankEnvironment& env = r.env;
  const int world = r.world;
  const std::int64_t run_steps = r.run_steps;
  const exec::ExecConfig& cfg = e.cfg;
  exec::Trainer* trainer = e.trainer.get();
  const exec::TokenSource& data = e.data;
  exec::Communicator* ranks_comm = e.ranks_comm;
  const PlanResult& plan = e.plan;
  const GpuMemoryBreakdown& pred = plan.memory.gpu;
  const std::optional<StepSimulation>& sim = e.sim;
  const double flops_per_token = e.flops_per_token, peak = e.peak, job_peak = e.job_peak;
  const std::int64_t tokens_per_step = e.tokens_per_step;
  const int offload_threads = e.offload_threads;
  const HostMemoryWatch& host_watch = *e.host_watch;
  const std::int64_t host_available_at_start = e.host_available_at_start;
  const auto& [losses, step_s, fwd_s, bwd_s, opt_s, to_host_s, cpu_adamw_s, to_device_s, param_h2d_s, param_d2h_s,
               nvme_wait_s, nvme_read_bytes, nvme_write_bytes, param_nvme_wait_s, param_nvme_read_bytes,
               param_nvme_write_bytes, comm_s, exposed_s, counters_before] = t;
  RankGuard* guard_ptr = &guard;
  guard_ptr->set_phase("report");
  const exec::MemoryReport mem = trainer->memory();
  const double step_med = median(step_s);
  const double tps = tokens_per_step / step_med;
  const double mfu = job_peak > 0 ? tps * flops_per_token / job_peak : 0.0;
  // Measured runtime overhead: the executor's workspace (backward scratch, cuBLASLt workspace) plus what the
  // device reports beyond our allocations (CUDA context, libraries), i.e. the planner's runtime_overhead.
  const Bytes device_extra = mem.device_total > 0 ? std::max<Bytes>(0, mem.device_used_peak - mem.peak_total) : 0;
  const Bytes measured_runtime = mem.component("workspace") + device_extra;
  const Bytes measured_total = mem.device_total > 0 ? mem.device_used_peak : mem.peak_total;
  // Communication per step after warm-up (model-state bytes per collective kind, counted where issued).
  const exec::CommCounters counters_after = trainer->comm_counters();
  const std::int64_t timed_steps = std::max<std::int64_t>(1, run_steps - *o.warmup_steps);
  std::int64_t measured_comm[exec::kCommKinds];
  for (int k = 0; k < exec::kCommKinds; ++k)
    measured_comm[k] = (counters_after.bytes[k] - counters_before.bytes[k]) / timed_steps;
  // Every rank's figures, gathered on every rank (a sum of one-hot rows: each rank fills its own).
  const std::vector<std::string> rank_fields = {"params", "grads", "master_params", "optimizer_states", "gathered_params", "activations",
                                                "logits", "gradient_buckets", "workspace"};
  const int F = static_cast<int>(rank_fields.size()) + 6 + exec::kCommKinds;
  std::vector<double> per_rank(static_cast<std::size_t>(world) * F, 0.0);
  {
    double* mine = per_rank.data() + static_cast<std::size_t>(env.rank) * F;
    for (std::size_t i = 0; i < rank_fields.size(); ++i) mine[i] = static_cast<double>(mem.component(rank_fields[i]));
    const int base = static_cast<int>(rank_fields.size());
    mine[base + 0] = static_cast<double>(mem.device_used_peak);
    mine[base + 1] = static_cast<double>(mem.peak_total);
    mine[base + 2] = step_med;
    for (int k = 0; k < exec::kCommKinds; ++k) mine[base + 3 + k] = static_cast<double>(measured_comm[k]);
    mine[base + 3 + exec::kCommKinds] = static_cast<double>(read_process_memory().resident_peak_bytes);
    mine[base + 4 + exec::kCommKinds] = static_cast<double>(host_available_at_start);
    mine[base + 5 + exec::kCommKinds] = static_cast<double>(host_watch.lowest_bytes());
    if (ranks_comm && world > 1)
      for (std::size_t at = 0; at < per_rank.size(); at += 64)
        ranks_comm->all_reduce_host(per_rank.data() + at, static_cast<int>(std::min<std::size_t>(64, per_rank.size() - at)));
  }
  // What the node used at its peak: the baseline (the launcher's reading) less the lowest reading of any rank's
  // watch. All ranks share this node when our launcher started them (or there is one); under mpirun they may span
  // nodes, and the figure is not formed.
  Bytes node_host_used = -1;
  if (!env.by_mpi || world == 1) {
    std::int64_t baseline = 0, lowest = 0;
    for (int r = 0; r < world; ++r) {
      const double* row = per_rank.data() + static_cast<std::size_t>(r) * F + rank_fields.size() + 4 + exec::kCommKinds;
      baseline = std::max(baseline, static_cast<std::int64_t>(row[0]));
      if (row[1] > 0) lowest = lowest == 0 ? static_cast<std::int64_t>(row[1]) : std::min(lowest, static_cast<std::int64_t>(row[1]));
    }
    if (baseline > 0 && lowest > 0) node_host_used = std::max<std::int64_t>(0, baseline - lowest);
  }
  struct Row {
    std::string name;
    Bytes predicted, measured;
  };
  const std::vector<Row> rows = {
      {"params", pred.params, mem.component("params")},
      {"grads", pred.grads, mem.component("grads")},
      {"master_params", pred.master_params, mem.component("master_params")},
      {"optimizer_states", pred.optimizer_states, mem.component("optimizer_states")},
      {"activations", pred.activations, mem.component("activations")},
      {"logits", pred.logits, mem.component("logits")},
      // The engine tags its bucket buffers gradient_buckets, stage 3's arena and persistent tensors
      // gathered_params, and offload_param's staging buffers offload_buffers (exec/zero/zero_engine.cpp).
      {"buffers (buckets, gathered, offload)", pred.gradient_buckets + pred.gathered_params + pred.offload_buffers,
       mem.component("gradient_buckets") + mem.component("gathered_params") + mem.component("offload_buffers")},
      {"runtime_overhead (workspace + context)", pred.runtime_overhead, measured_runtime},
      {"total (device view)", pred.total, measured_total}};
  if (trainer->backend() == "cpu") {
    // The CPU reference keeps every tensor in fp32 on the host: a different program from the GPU plan, so its
    // memory is listed, not compared.
    std::cout << "\nhost memory of the CPU reference backend (fp32 tensors; not compared with the GPU plan)\n";
    for (const auto& [name, bytes] : mem.peak_by_component)
      std::printf("  %-38s %12s bytes (%s)\n", name.c_str(), format_integer(bytes).c_str(), format_bytes(bytes).c_str());
    std::printf("  %-38s %12s bytes (%s)\n", "total", format_integer(mem.peak_total).c_str(),
                format_bytes(mem.peak_total).c_str());
  } else {
    std::cout << "\nmemory per GPU (GiB = 2^30 bytes)      predicted   measured   error\n";
    for (const auto& r : rows)
      std::printf("  %-38s %9s %10s %7s\n", r.name.c_str(), gib(r.predicted).c_str(), gib(r.measured).c_str(),
                  err_pct(static_cast<double>(r.predicted), static_cast<double>(r.measured)).c_str());
    std::printf("  (allocator peak %s GiB; device baseline before allocating %s GiB; measured = allocator peaks per "
                "component, total = cudaMemGetInfo used at its peak)\n",
                gib(mem.peak_total).c_str(), gib(mem.device_used_baseline).c_str());
  }
  if (cfg.zero.offload_optimizer || cfg.zero.offload_param) {
    // Offloaded states: every rank's host bytes (the plan counts the node: ranks per node x per rank).
    double host_all = static_cast<double>(mem.host_total());
    if (ranks_comm && world > 1) ranks_comm->all_reduce_host(&host_all, 1);
    const HostMemoryBreakdown& ph = plan.memory.host;
    const Bytes states_predicted = ph.pinned + ph.pageable;
    std::printf("\nhost memory of the offloaded states, all %d rank(s)     predicted   measured   error\n", world);
    if (trainer->backend() == "cpu" && cfg.precision != exec::ExecPrecision::fp32)
      std::printf("  %-38s %9s %10s  (the CPU backend keeps fp32 gradients; not compared)\n",
                  cfg.zero.offload_pin_memory ? "pinned" : "pageable", gib(states_predicted).c_str(),
                  gib(static_cast<Bytes>(host_all)).c_str());
    else
      std::printf("  %-38s %9s %10s %7s\n", cfg.zero.offload_pin_memory ? "pinned" : "pageable",
                  gib(states_predicted).c_str(), gib(static_cast<Bytes>(host_all)).c_str(),
                  err_pct(static_cast<double>(states_predicted), host_all).c_str());
    for (const auto& [name, bytes] : mem.host_by_component)
      std::printf("    rank %d %-30s %s bytes\n", env.rank, name.c_str(), format_integer(bytes).c_str());
    // What the kernel charges the ranks: the states above plus each process's own (runtime, libraries, batch).
    double resident_all = 0;
    for (int r = 0; r < world; ++r)
      resident_all += per_rank[static_cast<std::size_t>(r) * F + rank_fields.size() + 3 + exec::kCommKinds];
    // The plan's host total is the states plus each rank's process (sim/host_memory.h executor_process_host_bytes)
    // and the page tables of its pinned states (1/512 of them), which VmHWM leaves out; on the CPU backend the
    // process is not the CUDA executor's, so it is printed without a prediction.
    if (trainer->backend() == "cpu")
      std::printf("  %-38s %9s %10s  (the states and each rank's process)\n", "resident peak (VmHWM), all ranks", "",
                  gib(static_cast<Bytes>(resident_all)).c_str());
    else
      std::printf("  %-38s %9s %10s %7s  (the states and each rank's process)\n", "resident peak (VmHWM), all ranks",
                  gib(ph.total).c_str(), gib(static_cast<Bytes>(resident_all)).c_str(),
                  err_pct(static_cast<double>(ph.total), resident_all).c_str());
    if (node_host_used >= 0 && trainer->backend() != "cpu")
      std::printf("  %-38s %9s %10s %7s  (MemAvailable at launch less its lowest: the kernel's and the GPU "
                  "driver's share too)\n", "node host memory used at its peak", gib(ph.total).c_str(),
                  gib(node_host_used).c_str(), err_pct(static_cast<double>(ph.total), static_cast<double>(node_host_used)).c_str());
    if (!cfg.zero.nvme_path.empty() || !cfg.zero.param_nvme_path.empty()) {
      // The swap files of every rank (the plan counts the node's ranks, like the host memory).
      double nvme_all = static_cast<double>(mem.nvme_bytes);
      if (ranks_comm && world > 1) ranks_comm->all_reduce_host(&nvme_all, 1);
      std::printf("  %-38s %9s %10s %7s\n", "NVMe (swap files under nvme_path)", gib(plan.memory.nvme_bytes).c_str(),
                  gib(static_cast<Bytes>(nvme_all)).c_str(),
                  err_pct(static_cast<double>(plan.memory.nvme_bytes), nvme_all).c_str());
      std::printf("    rank %d %-30s %s bytes\n", env.rank, "nvme swap files", format_integer(mem.nvme_bytes).c_str());
    }
  }
  std::cout << "\nstep time (median of " << step_s.size() << " steps after " << *o.warmup_steps << " warm-up)\n";
  if (sim && trainer->backend() == "cpu")
    std::printf("  (the plan predicts %.1f ms on the cluster's GPU; the CPU backend is not compared with it)\n",
                sim->step_seconds * 1e3);
  else if (sim)
    std::printf("  step %.1f ms predicted, %.1f ms measured (%s); tokens/s %.0f predicted, %.0f measured\n",
                sim->step_seconds * 1e3, step_med * 1e3, err_pct(sim->step_seconds, step_med).c_str(),
                sim->tokens_per_second, tps);
  std::printf("  forward %.1f ms, backward %.1f ms, optimizer %.1f ms\n", median(fwd_s) * 1e3, median(bwd_s) * 1e3,
              median(opt_s) * 1e3);
  if (cfg.zero.offload_optimizer)
    std::printf("  offload (busy time, summed over the partition's pieces): gradients to host %.1f ms, CPU AdamW "
                "%.1f ms (%d threads), parameters to device %.1f ms\n",
                median(to_host_s) * 1e3, median(cpu_adamw_s) * 1e3, offload_threads, median(to_device_s) * 1e3);
  if (!cfg.zero.nvme_path.empty())
    std::printf("  NVMe swapping (rank %d): %s bytes read, %s bytes written per step, the CPU waiting for it %.1f ms "
                "(offload_optimizer.buffer_count %lld)\n",
                env.rank, format_integer(static_cast<Bytes>(median(nvme_read_bytes))).c_str(),
                format_integer(static_cast<Bytes>(median(nvme_write_bytes))).c_str(), median(nvme_wait_s) * 1e3,
                static_cast<long long>(cfg.zero.optimizer_buffer_count));
  if (cfg.zero.offload_param)
    std::printf("  parameter offload (busy time): host to device before the all-gathers %.1f ms, updated parameters "
                "device to host %.1f ms\n",
                median(param_h2d_s) * 1e3, median(param_d2h_s) * 1e3);
  if (!cfg.zero.param_nvme_path.empty())
    // The planner's figure is the executor's own (exec/zero/zero_buffer_layout.h): both count whole 4096-byte
    // blocks of every chunk read for the fetch plan's all-gathers and written after the update.
    std::printf("  parameter NVMe swapping (rank %d): %s bytes read, %s bytes written per step (predicted %s and %s), "
                "the host waiting for it %.1f ms (offload_param.buffer_count %lld)\n",
                env.rank, format_integer(static_cast<Bytes>(median(param_nvme_read_bytes))).c_str(),
                format_integer(static_cast<Bytes>(median(param_nvme_write_bytes))).c_str(),
                format_integer(e.param_nvme_read_predicted).c_str(), format_integer(e.param_nvme_write_predicted).c_str(),
                median(param_nvme_wait_s) * 1e3, static_cast<long long>(cfg.zero.param_buffer_count));
  std::printf("  %.0f %s/s, %.1f TFLOP/s, MFU %.1f%% (%s; peak = datasheet dense %s %.0f TFLOP/s of %s x %d)\n",
              tps, cfg.network ? "samples" : "tokens", tps * flops_per_token / 1e12, 100 * mfu,
              cfg.network ? "3 x the description's forward FLOPs per sample"
                          : "6N + 12*L*h*s per token, PaLM appendix B",
              to_string(tr.precision).c_str(), peak / 1e12, in.cluster.gpu_model.c_str(), world);
  std::printf("  loss %.4f -> %.4f\n", losses.front(), losses.back());
  if (world > 1) {
    std::printf("\ncommunication per step and GPU (bytes of the full buffer per collective, nccl-tests' convention)\n");
    std::printf("  %-16s %16s %16s  %s\n", "collective", "predicted", "measured", "measured time (median)");
    const char* names[exec::kCommKinds] = {"all_reduce", "reduce_scatter", "all_gather"};
    const CollectiveKind kinds[exec::kCommKinds] = {CollectiveKind::all_reduce, CollectiveKind::reduce_scatter,
                                                    CollectiveKind::all_gather};
    for (int k = 0; k < exec::kCommKinds; ++k) {
      Bytes predicted = 0;
      for (const auto& c : plan.comm.collectives)
        if (c.kind == kinds[k]) predicted += c.bytes;
      if (predicted == 0 && measured_comm[k] == 0) continue;
      std::printf("  %-16s %16s %16s  %.2f ms\n", names[k], format_integer(predicted).c_str(),
                  format_integer(measured_comm[k]).c_str(), median(comm_s[k]) * 1e3);
    }
    std::printf("  exposed communication (compute waiting): %.2f ms per step (median)\n", median(exposed_s) * 1e3);
    if (trainer->backend() == "cpu" && cfg.precision != exec::ExecPrecision::fp32)
      std::printf("  (the CPU backend moves fp32 elements; the plan counts %s, so the two columns differ by design)\n",
                  to_string(tr.precision).c_str());
    std::printf("\nper rank                device used peak   allocator peak   step ms   host resident peak (VmHWM)\n");
    const int base = static_cast<int>(rank_fields.size());
    for (int r = 0; r < world; ++r) {
      const double* row = per_rank.data() + static_cast<std::size_t>(r) * F;
      std::printf("  rank %-3d %22s GiB %12s GiB %9.1f %18s GiB\n", r, gib(static_cast<Bytes>(row[base])).c_str(),
                  gib(static_cast<Bytes>(row[base + 1])).c_str(), row[base + 2] * 1e3,
                  gib(static_cast<Bytes>(row[base + 3 + exec::kCommKinds])).c_str());
    }
  }

  if (o.report && env.rank == 0) {
    nlohmann::json doc = plans_document(in.model, in.cluster, tr, {plan});
    nlohmann::json m;
    m["backend"] = trainer->backend();
    m["device"] = trainer->device_name();
    m["steps"] = o.steps;
    m["warmup_steps"] = *o.warmup_steps;
    m["data"] = e.data_description;
    if (!cfg.network) m["padded_vocab"] = cfg.shape.padded_vocab;
    nlohmann::json comp;
    for (const auto& [name, bytes] : mem.peak_by_component) comp[name] = bytes;
    comp["runtime_overhead"] = measured_runtime;
    m["gpu_bytes"] = comp;
    m["allocator_peak_bytes"] = mem.peak_total;
    m["device_total_bytes"] = mem.device_total;
    m["device_used_baseline_bytes"] = mem.device_used_baseline;
    m["device_used_peak_bytes"] = mem.device_used_peak;
    nlohmann::json expected;
    for (const auto& [name, bytes] : exec::expected_device_memory(cfg).components()) expected[name] = bytes;
    m["executor_formula_bytes"] = expected;
    m["step_seconds"] = step_med;
    m["step_seconds_all"] = step_s;
    m["forward_seconds"] = median(fwd_s);
    m["backward_seconds"] = median(bwd_s);
    m["optimizer_seconds"] = median(opt_s);
    m["tokens_per_second"] = tps;
    m["model_flops_per_token"] = flops_per_token;
    m["flop_convention"] = "6N + 12*L*h*s per token (PaLM appendix B)";
    m["peak_flops"] = peak;
    m["peak_name"] = "datasheet dense " + to_string(tr.precision);
    m["mfu"] = mfu;
    m["loss"] = losses;
    m["world_size"] = world;
    m["stage"] = cfg.zero.stage;
    nlohmann::json cb;
    for (int k = 0; k < exec::kCommKinds; ++k) cb[exec::to_string(static_cast<exec::CommKind>(k))] = measured_comm[k];
    m["comm_bytes_per_step"] = cb;
    nlohmann::json cs;
    for (int k = 0; k < exec::kCommKinds; ++k) cs[exec::to_string(static_cast<exec::CommKind>(k))] = median(comm_s[k]);
    m["comm_seconds_per_step"] = cs;
    m["exposed_comm_seconds"] = median(exposed_s);
    if (cfg.zero.offload_optimizer || cfg.zero.offload_param) {
      nlohmann::json host;
      for (const auto& [name, bytes] : mem.host_by_component) host[name] = bytes;
      m["host_bytes"] = host;  // rank 0's
      if (!cfg.zero.nvme_path.empty() || !cfg.zero.param_nvme_path.empty())
        m["nvme_bytes"] = mem.nvme_bytes;  // rank 0's swap files
      nlohmann::json os;
      if (cfg.zero.offload_optimizer)
        os = {{"to_host", median(to_host_s)},
              {"cpu_adamw", median(cpu_adamw_s)},
              {"to_device", median(to_device_s)},
              {"cpu_threads", offload_threads}};
      if (!cfg.zero.nvme_path.empty()) {
        os["nvme_wait"] = median(nvme_wait_s);
        os["nvme_read_bytes"] = median(nvme_read_bytes);
        os["nvme_write_bytes"] = median(nvme_write_bytes);
      }
      if (!cfg.zero.param_nvme_path.empty()) {
        os["param_nvme_wait"] = median(param_nvme_wait_s);
        os["param_nvme_read_bytes"] = median(param_nvme_read_bytes);
        os["param_nvme_write_bytes"] = median(param_nvme_write_bytes);
        os["param_nvme_read_bytes_predicted"] = e.param_nvme_read_predicted;
        os["param_nvme_write_bytes_predicted"] = e.param_nvme_write_predicted;
      }
      if (cfg.zero.offload_param) {
        os["param_to_device"] = median(param_h2d_s);
        os["param_to_host"] = median(param_d2h_s);
      }
      m["offload_seconds"] = os;
    }
    nlohmann::json ranks = nlohmann::json::array();
    for (int r = 0; r < world; ++r) {
      const double* row = per_rank.data() + static_cast<std::size_t>(r) * F;
      const int base = static_cast<int>(rank_fields.size());
      nlohmann::json rj, gb, rc;
      for (std::size_t i = 0; i < rank_fields.size(); ++i) gb[rank_fields[i]] = static_cast<Bytes>(row[i]);
      for (int k = 0; k < exec::kCommKinds; ++k)
        rc[exec::to_string(static_cast<exec::CommKind>(k))] = static_cast<Bytes>(row[base + 3 + k]);
      rj["rank"] = r;
      rj["gpu_bytes"] = gb;
      rj["device_used_peak_bytes"] = static_cast<Bytes>(row[base]);
      rj["allocator_peak_bytes"] = static_cast<Bytes>(row[base + 1]);
      rj["step_seconds"] = row[base + 2];
      rj["comm_bytes_per_step"] = rc;
      rj["host_resident_peak_bytes"] = static_cast<Bytes>(row[base + 3 + exec::kCommKinds]);
      rj["host_available_at_start_bytes"] = static_cast<Bytes>(row[base + 4 + exec::kCommKinds]);
      rj["host_available_lowest_bytes"] = static_cast<Bytes>(row[base + 5 + exec::kCommKinds]);
      ranks.push_back(rj);
    }
    m["ranks"] = ranks;
    // The node's host memory at its peak (MemAvailable at launch less its lowest during the run); absent under
    // mpirun, whose ranks may span nodes.
    if (node_host_used >= 0) m["host_node_used_peak_bytes"] = node_host_used;
    if (sim) {
      m["predicted_step_seconds"] = sim->step_seconds;
      m["predicted_tokens_per_second"] = sim->tokens_per_second;
    }
    doc["measured"] = m;
    std::ofstream f(*o.report);
    if (!f) throw InputError(*o.report, "--report", "cannot open for writing");
    f << doc.dump(2) << '\n';
    std::cout << "report written to " << *o.report << '\n';
  }
}

static int run_launcher_or_rank(RunOptions& o, std::optional<RankGuard>& guard) {
  ResolvedRun r = resolve_run(o);
  if (const std::optional<int> status = launch_ranks(o, r)) return *status;
  // A rank: only rank 0 prints the run; the others speak on stderr when something goes wrong.
  guard.emplace(r.env.rank, r.world, o.steps, o.collective_timeout_s, o.backend);
  RankEngine e;
  if (!build_engine(o, r, *guard, e)) return 1;
  const TrainingRecord t = train(o, r, e, *guard);
  report(o, r, e, t, *guard);
  return 0;
}


int run_training(RunOptions& o) {
  std::optional<RankGuard> guard;
  int status = 0;
  try {
    status = run_launcher_or_rank(o, guard);
  } catch (const std::bad_alloc&) {
    if (!guard || guard->world() == 1) throw;  // the launcher, or one rank alone: as any error (cli/main.cpp)
    return guard->fail("out of host memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    if (!guard || guard->world() == 1) throw;
    // A rank of several: its peers wait for it; the guard says which rank failed and ends the run.
    return guard->fail(e.what());
  }
  if (guard) guard->done(status);
  return status;
}

}  // namespace zeroplan
