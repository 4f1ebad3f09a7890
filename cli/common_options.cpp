#include "cli/common_options.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <stdexcept>

#include "core/input_error.h"
#include "core/lora_modules.h"
#include "core/plan_inputs.h"
#include "sim/executor_layout.h"
#include "sim/lora_model.h"

namespace zeroplan {

namespace {

constexpr const char* kCommandLine = "command line";

int parse_stage(const std::string& text) {
  if (text.size() == 1 && text[0] >= '0' && text[0] <= '3') return text[0] - '0';
  throw InputError(kCommandLine, "--stage", "unknown ZeRO stage '" + text + "': expected 0, 1, 2, 3 or all");
}

}  // namespace

OutputFormat parse_output_format(const std::string& text) {
  if (text == "table") return OutputFormat::table;
  if (text == "json") return OutputFormat::json;
  if (text == "csv") return OutputFormat::csv;
  if (text == "markdown") return OutputFormat::markdown;
  throw InputError(kCommandLine, "--format", "unknown format '" + text + "': expected table, json, csv or markdown");
}

void add_common_options(CLI::App& command, CommonOptions& options, bool model_required) {
  auto* model = command.add_option("--model,-m", options.model,
                                   "Bundled model name, a zeroplan model description (.json) or a Hugging Face "
                                   "config.json");
  if (model_required) model->required();
  command.add_option("--cluster,-c", options.cluster, "Bundled cluster name or a cluster description file")
      ->capture_default_str();
  command.add_option("--gpus,-n", options.gpus, "Number of GPUs of the cluster's kind (data-parallel degree)");
  command.add_option("--micro-batch,-b", options.micro_batch, "Samples per GPU per micro-step");
  command.add_option("--seq,-s", options.seq, "Sequence length in tokens (default: the model's maximum)");
  command.add_option("--grad-accum", options.grad_accum, "Gradient accumulation micro-steps per optimizer step");
  command.add_option("--precision", options.precision, "fp32, fp16 (with loss scaling) or bf16");
  command.add_option("--optimizer", options.optimizer,
                     "adamw, sgd_momentum or adam_8bit (also adam8bit, or paged_adamw_8bit: bitsandbytes' paged 8-bit "
                     "AdamW, QLoRA's choice)");
  command.add_option("--stage", options.stage, "ZeRO stage 0-3, or 'all' to compare every stage");
  command.add_option("--offload-optimizer", options.offload_optimizer, "none, cpu or nvme");
  command.add_option("--offload-param", options.offload_param, "none, cpu or nvme (stage 3 only)");
  command.add_option("--checkpointing", options.checkpointing, "Activation checkpointing: none, selective or full");
  command.add_option("--ds-config", options.ds_config,
                     "A DeepSpeed config file (// comments and \"auto\" accepted); flags given beside it win");
  command.add_option("--model-code", options.model_code,
                     "DeepSpeed engine: whose modules the script builds the model from: transformers "
                     "(AutoModelForCausalLM, whose eager Llama/Mistral/Qwen2 modules keep more for backward; the "
                     "default for a Hugging Face config.json) or harness (bench/exec/pytorch_peer.py's GPT-2; the "
                     "default for a zeroplan model description)");
  command.add_option("--engine", options.engine,
                     "Whose engine the model describes: deepspeed (default), zeroplan (our executor) or ideal (the ZeRO "
                     "paper's schedule without a framework's overheads)");
  command.add_option("--margin", options.margin,
                     "GPU memory kept free above each plan's predicted peak, in percent of it (e.g. 5 or 5%); "
                     "default: the measured error of the engine's memory model")
      ->type_name("PERCENT");
  command.add_option("--cpu-threads-per-rank", options.cpu_threads_per_rank,
                     "OpenMP threads each rank's CPU optimizer runs on (offload; default: the node's cores divided "
                     "among its ranks; torchrun's own default is 1)");
  command.add_option("--host-op-seconds", options.host_op_seconds,
                     "DeepSpeed engine: the training host's seconds per small eager CUDA operation, as "
                     "bench/deepspeed/host_probe.py measures it; stage 3's per-call host costs are scaled from the "
                     "host the cluster's costs hold on (host.eager_op_seconds on one GPU, "
                     "multi_rank_eager_op_seconds on more; default: the cluster's own host)")
      ->type_name("SECONDS");
  command.add_option("--zero-init", options.zero_init,
                     "Stage 3: on (default) if the training script builds the model under deepspeed.zero.Init, as "
                     "Hugging Face from_pretrained does; off if it builds it whole first")
      ->type_name("on|off");
  command.add_flag("--ds-empty-cache-after-init", options.ds_empty_cache_after_init,
                   "DeepSpeed engine: the training script calls torch.cuda.empty_cache() after deepspeed.initialize "
                   "(default: it does not, and the caching allocator keeps what initialize freed: stages 1-2's "
                   "per-parameter 16-bit copies)");
  command.add_option("--lora-rank", options.lora_rank,
                     "LoRA: adapters of rank R on the targeted linear modules, the base frozen (PEFT LoraConfig r; "
                     "default 8 when another LoRA flag is given)")
      ->type_name("R");
  command.add_option("--lora-alpha", options.lora_alpha, "LoRA: lora_alpha (PEFT's default 8)")->type_name("A");
  command.add_option("--lora-targets", options.lora_targets,
                     "LoRA: the modules to adapt, by PEFT's names (q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,"
                     "down_proj for Llama/Mistral/Qwen2; c_attn,c_proj,c_fc for GPT-2), or all-linear; default: "
                     "PEFT's for the model type (q_proj,v_proj; c_attn)")
      ->type_name("NAMES");
  command.add_option("--quantize-base", options.quantize_base,
                     "LoRA: the frozen base's linear weights as bitsandbytes holds them: nf4 (QLoRA, double-quantised "
                     "absmax), int8 (LLM.int8) or none (default)")
      ->type_name("nf4|int8|none");
  command.add_option("--format,-f", options.format, "Output: table, json, csv or markdown")->capture_default_str();
}

ResolvedInputs resolve_inputs(const CommonOptions& options) {
  ResolvedInputs inputs;
  inputs.format = parse_output_format(options.format);
  PlanInputs given;
  given.model = options.model;
  given.cluster = options.cluster;
  given.gpus = options.gpus;
  given.ds_config = options.ds_config;
  given.micro_batch = options.micro_batch;
  given.seq = options.seq;
  given.grad_accum = options.grad_accum;
  given.host_op_seconds = options.host_op_seconds;
  if (options.precision) given.precision = parse_precision(*options.precision, kCommandLine, "--precision");
  if (options.optimizer) given.optimizer = parse_optimizer(*options.optimizer, kCommandLine, "--optimizer");
  if (options.checkpointing) {
    given.checkpointing = parse_checkpointing(*options.checkpointing, kCommandLine, "--checkpointing");
  }
  if (options.engine) given.engine = parse_engine(*options.engine, kCommandLine, "--engine");
  if (options.model_code) given.model_code = parse_model_code(*options.model_code, kCommandLine, "--model-code");
  if (options.stage) given.stage = *options.stage == "all" ? kAllStages : parse_stage(*options.stage);
  if (options.offload_optimizer) {
    given.offload_optimizer = parse_offload_device(*options.offload_optimizer, kCommandLine, "--offload-optimizer");
  }
  if (options.offload_param) {
    given.offload_param = parse_offload_device(*options.offload_param, kCommandLine, "--offload-param");
  }
  std::optional<bool> zero_init;
  if (options.zero_init) {
    if (*options.zero_init != "on" && *options.zero_init != "off")
      throw InputError(kCommandLine, "--zero-init", "unknown value '" + *options.zero_init + "': expected on or off");
    zero_init = *options.zero_init == "on";
  }
  // The margin first: a bad one is refused before any file is read.
  std::optional<double> margin;
  if (options.margin) margin = parse_margin_percent(*options.margin);
  ResolvedPlanInputs resolved = resolve_plan_inputs(given);
  inputs.model = std::move(resolved.model);
  inputs.cluster = std::move(resolved.cluster);
  inputs.training = std::move(resolved.training);
  inputs.filter = resolved.filter;
  inputs.margin = resolve_memory_margin(margin, inputs.training.engine);
  if (options.cpu_threads_per_rank) {
    // A rank cannot use more threads than the node has cores (nor fewer than one).
    const std::int64_t cores = std::max(1, inputs.cluster.host_cores);
    if (*options.cpu_threads_per_rank < 1 || *options.cpu_threads_per_rank > cores) {
      throw InputError(kCommandLine, "--cpu-threads-per-rank",
                       "is " + std::to_string(*options.cpu_threads_per_rank) + "; expected 1.." +
                           std::to_string(cores) + " (the cores of a node of " + inputs.cluster.name + ")");
    }
    inputs.training.cpu_threads_per_rank = *options.cpu_threads_per_rank;
    inputs.training.notes.push_back("CPU optimizer threads per rank: " + std::to_string(*options.cpu_threads_per_rank) +
                                    " (--cpu-threads-per-rank)");
  }
  if (options.ds_empty_cache_after_init) {
    inputs.training.deepspeed_empty_cache_after_init = true;
    inputs.training.notes.push_back("the training script empties the caching allocator after deepspeed.initialize "
                                    "(--ds-empty-cache-after-init): what initialize freed is not held");
  }
  LoraInputs lora;
  lora.rank = options.lora_rank;
  lora.alpha = options.lora_alpha;
  lora.targets = options.lora_targets;
  lora.quantize_base = options.quantize_base;
  resolve_lora(lora, inputs.model, inputs.training);
  if (inputs.training.lora.enabled && inputs.training.engine == TrainingEngine::zeroplan) {
    // LoRA on zeroplan's own engine is planned from the executor's allocations (sim/executor_device_memory.h
    // executor_lora_allocations): what it does not build is refused here by name, as `zeroplan run` refuses it.
    const char* flag = options.lora_rank ? "--lora-rank" : options.lora_alpha ? "--lora-alpha" : "--lora-targets";
    if (!executor_trains(inputs.model))
      throw InputError(kCommandLine, flag, "--engine zeroplan: the executor does not train " + inputs.model.name);
    if (inputs.training.lora.quantize_base == BaseQuantization::int8)
      throw InputError(kCommandLine, "--quantize-base", "int8 with --engine zeroplan: the executor holds the base as "
                                                        "nf4 or unquantised");
    // The frozen base's engine offloads nothing (exec/zero/zero_engine.cpp), so a LoRA run offloads nothing: the
    // plans are those without offload.
    const PlanChoiceFilter& f = inputs.filter;
    if ((f.offload_optimizer_set && f.offload_optimizer != OffloadDevice::none) ||
        (f.offload_param_set && f.offload_param != OffloadDevice::none)) {
      const bool optimizer = f.offload_optimizer_set && f.offload_optimizer != OffloadDevice::none;
      const char* given = optimizer ? (options.offload_optimizer ? "--offload-optimizer" : "--ds-config")
                                    : (options.offload_param ? "--offload-param" : "--ds-config");
      throw InputError(kCommandLine, given, "with LoRA and --engine zeroplan: the executor's frozen base engine "
                                            "offloads nothing; plan without offload");
    }
    inputs.filter.offload_optimizer_set = inputs.filter.offload_param_set = true;
    inputs.filter.offload_optimizer = inputs.filter.offload_param = OffloadDevice::none;
  } else if (inputs.training.lora.enabled && inputs.training.engine != TrainingEngine::deepspeed) {
    const char* flag = options.lora_rank ? "--lora-rank" : options.lora_alpha ? "--lora-alpha" : "--lora-targets";
    throw InputError(kCommandLine, flag,
                     "LoRA is planned for the DeepSpeed engine (PEFT under deepspeed.initialize) and zeroplan's; "
                     "--engine " + to_string(inputs.training.engine) + " has no LoRA model");
  }
  // Every LoRA plan says what it trains as PEFT prints it (peft_model.py print_trainable_parameters).
  if (inputs.training.lora.enabled)
    inputs.training.notes.push_back(peft_trainable_parameters_line(lora_figures(inputs.model, inputs.training)));
  if (options.optimizer && *options.optimizer == "paged_adamw_8bit")
    inputs.training.notes.push_back("optimizer paged_adamw_8bit: bitsandbytes' 8-bit AdamW with its states in CUDA "
                                    "unified memory (paged to the host only under memory pressure), planned on the "
                                    "device");
  if (zero_init) {
    inputs.training.zero.zero_init = *zero_init;
    if (!*zero_init)
      inputs.training.notes.push_back("stage 3 without deepspeed.zero.Init (--zero-init off): the model is built whole "
                                      "first, in fp32 on the host");
  }
  return inputs;
}

double parse_margin_percent(const std::string& text) {
  std::string number = text;
  if (!number.empty() && number.back() == '%') number.pop_back();
  double percent = 0.0;
  std::size_t used = 0;
  try {
    percent = std::stod(number, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (number.empty() || used != number.size()) {
    throw InputError(kCommandLine, "--margin",
                     "'" + text + "' is not a percentage; expected a number of percent such as 5 or 5%");
  }
  const double fraction = percent / 100.0;
  require_valid_margin(fraction, kCommandLine, "--margin");
  return fraction;
}

}  // namespace zeroplan
