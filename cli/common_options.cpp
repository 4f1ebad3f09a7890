#include "cli/common_options.h"

#include "core/deepspeed_config.h"
#include "core/input_error.h"

namespace zeroplan {

namespace {

constexpr const char* kCommandLine = "command line";

std::int64_t require_positive(std::int64_t value, const std::string& flag) {
  if (value < 1) {
    throw InputError(kCommandLine, flag, "must be a positive integer, got " + std::to_string(value));
  }
  return value;
}

int parse_stage(const std::string& text, const std::string& source, const std::string& field) {
  if (text.size() == 1 && text[0] >= '0' && text[0] <= '3') return text[0] - '0';
  throw InputError(source, field, "unknown ZeRO stage '" + text + "': expected 0, 1, 2, 3 or all");
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
  command.add_option("--optimizer", options.optimizer, "adamw, sgd (with momentum) or adam8bit");
  command.add_option("--stage", options.stage, "ZeRO stage 0-3, or 'all' to compare every stage");
  command.add_option("--offload-optimizer", options.offload_optimizer, "none, cpu or nvme");
  command.add_option("--offload-param", options.offload_param, "none, cpu or nvme (stage 3 only)");
  command.add_option("--checkpointing", options.checkpointing, "Activation checkpointing: none, selective or full");
  command.add_option("--ds-config", options.ds_config,
                     "A DeepSpeed config file (// comments and \"auto\" accepted); flags given beside it win");
  command.add_option("--engine", options.engine,
                     "Whose engine the memory model describes: deepspeed (default) or zeroplan (our executor)");
  command.add_option("--format,-f", options.format, "Output: table, json, csv or markdown")->capture_default_str();
}

ResolvedInputs resolve_inputs(const CommonOptions& options) {
  ResolvedInputs inputs;
  inputs.format = parse_output_format(options.format);
  if (options.model.empty()) throw InputError(kCommandLine, "--model", "is required: a bundled name or a file");
  inputs.model = load_model(options.model);

  ClusterDescription cluster = load_cluster(options.cluster);
  if (options.gpus) {
    if (*options.gpus < 1) {
      throw InputError(kCommandLine, "--gpus", "must be at least 1, got " + std::to_string(*options.gpus));
    }
    cluster = with_gpu_count(cluster, *options.gpus);
  }
  inputs.cluster = cluster;
  const int world_size = inputs.cluster.total_gpus();

  TrainingConfig& training = inputs.training;
  if (inputs.model.transformer) {
    training.seq_len = inputs.model.transformer->max_seq;
    training.notes.push_back("sequence length " + std::to_string(training.seq_len) +
                             " (the model's maximum; --seq sets another)");
  } else {
    training.seq_len = 1;  // generic layer-list models count samples, not tokens
  }

  // The DeepSpeed config fills what it sets; the flags below then override it.
  bool stage_from_config = false;
  if (options.ds_config) {
    apply_deepspeed_config(*options.ds_config, inputs.model, world_size, training);
    stage_from_config = true;
  }

  if (options.micro_batch) training.micro_batch = require_positive(*options.micro_batch, "--micro-batch");
  if (options.seq) {
    training.seq_len = require_positive(*options.seq, "--seq");
    check_sequence_length(inputs.model, training.seq_len, kCommandLine, "--seq");
  }
  if (options.grad_accum) training.grad_accum = require_positive(*options.grad_accum, "--grad-accum");
  if (options.precision) training.precision = parse_precision(*options.precision, kCommandLine, "--precision");
  if (options.optimizer) training.optimizer = parse_optimizer(*options.optimizer, kCommandLine, "--optimizer");
  if (options.engine) {
    if (*options.engine == "deepspeed") training.engine = TrainingEngine::deepspeed;
    else if (*options.engine == "zeroplan") {
      // What our executor stores: flash attention, dlogits written in place over the 16-bit logits.
      training.engine = TrainingEngine::zeroplan;
      training.fused_attention = true;
      training.fused_cross_entropy = true;
      training.fp32_loss = false;
      training.notes.push_back("engine zeroplan: 16-bit gradients only, in-place reduction, fused attention and "
                               "fused softmax cross-entropy, exact-size allocations (exec/)");
    }
    else throw InputError(kCommandLine, "--engine", "unknown engine '" + *options.engine + "': expected deepspeed or zeroplan");
  }
  if (options.checkpointing) {
    training.checkpointing = parse_checkpointing(*options.checkpointing, kCommandLine, "--checkpointing");
  }

  // What the comparison is narrowed to: a DeepSpeed config asks for its own stage and offloads (as if given
  // as flags); flags override it, and --stage all brings the full comparison back.
  PlanChoiceFilter& filter = inputs.filter;
  if (stage_from_config) {
    filter.stage = training.zero.stage;
    filter.offload_optimizer_set = true;
    filter.offload_optimizer = training.zero.offload_optimizer;
    filter.offload_param_set = true;
    filter.offload_param = training.zero.offload_param;
  }
  if (options.stage) {
    if (*options.stage == "all") {
      filter = PlanChoiceFilter{};
    } else {
      filter.stage = parse_stage(*options.stage, kCommandLine, "--stage");
      training.zero.stage = filter.stage;
      if (!options.offload_optimizer && !options.offload_param) {
        filter.offload_optimizer_set = false;
        filter.offload_param_set = false;
      }
    }
  }
  if (options.offload_optimizer) {
    filter.offload_optimizer_set = true;
    filter.offload_optimizer =
        parse_offload_device(*options.offload_optimizer, kCommandLine, "--offload-optimizer");
    training.zero.offload_optimizer = filter.offload_optimizer;
  }
  if (options.offload_param) {
    filter.offload_param_set = true;
    filter.offload_param = parse_offload_device(*options.offload_param, kCommandLine, "--offload-param");
    training.zero.offload_param = filter.offload_param;
  }
  if (filter.offload_param_set && filter.offload_param != OffloadDevice::none) {
    if (filter.stage >= 0 && filter.stage < 3) {
      throw InputError(kCommandLine, "--offload-param",
                       "parameter offload needs ZeRO stage 3 (stage " + std::to_string(filter.stage) + " asked for)");
    }
    if (filter.stage < 0) filter.stage = 3;
  }
  if (filter.offload_optimizer_set && filter.offload_optimizer == OffloadDevice::nvme && filter.stage >= 0 &&
      filter.stage < 3) {
    throw InputError(kCommandLine, "--offload-optimizer",
                     "NVMe optimizer offload (ZeRO-Infinity) needs ZeRO stage 3 (stage " +
                         std::to_string(filter.stage) + " asked for); stages 1 and 2 offload to cpu");
  }
  if (filter.offload_optimizer_set && filter.offload_optimizer != OffloadDevice::none && filter.stage == 0) {
    throw InputError(kCommandLine, "--offload-optimizer",
                     "optimizer offload needs ZeRO stage 1, 2 or 3 (stage 0 asked for)");
  }
  if (enumerate_plan_choices(filter).empty()) {
    throw InputError(kCommandLine, "--stage/--offload-*", "no plan matches the stage and offload asked for");
  }
  return inputs;
}

}  // namespace zeroplan
