#include "run/training_run.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "run/launcher.h"
#include "run/process_memory.h"
#include "run/rank_guard.h"
#include "core/input_error.h"
#include "core/lora_modules.h"
#include "core/units.h"
#include "exec/activation_accounting.h"
#include "exec/exec_config.h"
#include "exec/lora_layout.h"
#include "exec/network_plan.h"
#include "exec/offload/cpu_adamw.h"
#include "exec/data_shard.h"
#include "exec/image_data.h"
#include "exec/token_data.h"
#include "exec/comm/mpi_communicator.h"
#include "exec/trainer.h"
#include "run/checkpoint.h"
#include "run/hf_checkpoint.h"
#include "run/image_training.h"
#include "run/peft_adapter_export.h"
#include "run/measured_trace.h"
#include "run/training_run_steps.h"
#include "sim/executor_device_memory.h"
#include "sim/executor_layout.h"
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
  // LoRA (core/lora_modules.h resolve_lora): the adapted modules by their paths in a block, as the plan counts them.
  if (tr.lora.enabled) c.lora = executor_lora_settings(model, tr);
  try {
    if (!c.network) exec::validate(c);  // a layer list was checked as the description was read (core/layer_ops.h)
  } catch (const std::invalid_argument& e) {
    throw InputError(model.source, "executor", e.what());
  }
  return c;
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
  if (o.overwrite_trace && !o.trace) throw InputError(kCli, "--overwrite", "is read with --trace only");
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
  if (o.trace) check_trace_paths(*o.trace, world, o.overwrite_trace);
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
  if (o.init_adapter) {
    if (!tr.lora.enabled)
      throw InputError(kCli, "--init-adapter", "sets LoRA's adapters: give --lora-rank (and --lora-alpha, "
                                               "--lora-targets) as the adapter was trained");
    if (o.resume)
      throw InputError(kCli, "--init-adapter", "cannot be combined with --resume (a LoRA checkpoint of ours holds "
                                               "its adapters and their optimizer states)");
    const std::string file = resolve_peft_adapter(*o.init_adapter, tr.lora, "--init-adapter");
    r.adapter_layout = std::make_unique<exec::ParamLayout>(exec::trained_layout(exec_config(in.model, tr, o.seed), world));
    r.init_adapter = std::make_unique<HfCheckpointSource>(file, *r.adapter_layout, "--init-adapter");
  }
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
  // What the executor stores: flash attention (no s x s), dlogits written in place over the 16-bit logits; with
  // LoRA both engines' allocations (sim/executor_device_memory.h executor_planned_config).
  use_engine(tr, TrainingEngine::zeroplan);  // the memory model of our own executor (core/training_config.h)
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
  // What the planner does not time for a layer-list model on the GPU: the host's launches where no CUDA graph
  // replays the micro-step (host work inside it: exec/network_plan.h). Said before the plan is read against the
  // measured step.
  if (o.backend == "cuda" && cfg.network && !exec::network_step_replays_cuda_graph(cfg.zero))
    tr.notes.push_back("run: the layer list is launched kernel by kernel (no CUDA graph where the micro-step does host "
                       "work: offload_param, the optimizer on the CPU at stages 1-2, fp32 gradient accumulation); the "
                       "plan times its kernels, not the host's launches");
  // Stage 3 of a layer list on several GPUs: a group of reduce-scatters per layer beside the backward's small
  // kernels, which cost it more than the plan charges (`zeroplan run --trace`,
  // bench/resnet/results/2026-11-30-h200x2/README.md).
  if (o.backend == "cuda" && cfg.network && cfg.zero.stage == 3 && world > 1)
    tr.notes.push_back("run: stage 3 of a layer list reduce-scatters each layer as its own NCCL group beside the "
                       "backward's small kernels, which the plan undercharges: ResNet-101 on 2x H200 was planned "
                       "11% short without offload, 6% with the optimizer on the CPU (bench/resnet/results/2026-11-30-h200x2/)");
  if (!tr.zero.overlap_comm_given && world > 1 && cfg.zero.stage > 0)
    tr.notes.push_back("run: gradient reductions overlap backward (overlap_comm true; a DeepSpeed config can say "
                       "false)");
  // The CPU backend is deterministic by construction (fixed-order loops and MPI reductions). On the GPU,
  // --deterministic orders the two reductions that use atomics otherwise: bias/LayerNorm gradient column sums
  // (one partial row per row block, added in order) and the token-embedding gradient (each token's positions
  // summed in order); cuBLASLt, the attention kernels, the gradient norm and NCCL's collectives are already
  // run-to-run deterministic at a fixed world size.
  cfg.zero.deterministic = o.deterministic;
  cfg.record_timeline = o.trace.has_value();
  tr.deterministic = o.deterministic;  // the plan counts what such a run allocates (no cuDNN attention workspace)
  // The CPU AdamW's threads: --cpu-threads-per-rank, else the node's cores among its ranks (all on this node).
  e.offload_threads = exec::offload::optimizer_threads(cfg.zero.cpu_optimizer_threads, world);

  // The plan first: stop before allocating when the planner says it does not fit.
  PlannerOptions popts;
  popts.search_max_micro_batch = false;
  e.choice = PlanChoice{tr.zero.stage, tr.zero.offload_optimizer, tr.zero.offload_param};
  const PlanChoice& choice = e.choice;
  e.plan = evaluate_plan(in.model, in.cluster, tr, choice, popts);
  if (tr.zero.offload_param == OffloadDevice::nvme)
    if (const auto f = executor_layout_figures(in.model, tr, world, 3)) {
      e.param_nvme_read_predicted = f->param_nvme_read_bytes_per_step;
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
      SimulationOptions options;
      options.record_events = o.trace.has_value();  // the plan's timeline beside the measured one
      return simulate_step(in.model, in.cluster, tr, choice, options);
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
    // Stage 3 of a transformer gathers on the copy engines (exec/zero/zero_buffer_layout.h): the configuration
    // measured with them; LoRA's engines, offload and layer lists (replayed as CUDA graphs) were not.
    const bool copy_engine_gathers = exec::stage3_copy_engine_gathers(cfg, world);
    if (world > 1) comm = exec::make_nccl_communicator(env.rank, world, env.local_rank, env.nccl_id_hex, mpi.get(),
                                                         guard.comm_watch(), copy_engine_gathers);
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
    // initialisation (A kaiming-uniform from the seed, B zero) unless --init-adapter gives them.
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
  if (r.init_adapter) {
    // LoRA's trainable parameters, each rank its share (its partition at stage 3), AdamW from step 0.
    trainer->restore_state(r.init_adapter->state_source(), 0, trainer->loss_scaler_state());
    std::cout << "initialized the adapters from " << r.init_adapter->description() << '\n';
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
         param_nvme_write_bytes, comm_s, exposed_s, comm_per_step, traced] = t;
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
    const exec::CommCounters counters_before = trainer->comm_counters();
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
      comm_per_step.add(counters_before, trainer->comm_counters(), r.skipped);
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
      if (o.trace) traced.emplace_back(r.times, s + 1);
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
