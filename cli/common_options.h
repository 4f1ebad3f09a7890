// The flags every zeroplan command shares (--model, --cluster, --gpus, --micro-batch, --seq, --grad-accum,
// --precision, --optimizer, --stage, --offload-optimizer, --offload-param, --checkpointing, --ds-config,
// --format) and their resolution into the shared descriptions. Precedence: defaults < DeepSpeed config < flags.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/cluster_description.h"
#include "core/model_description.h"
#include "core/plan_inputs.h"
#include "core/training_config.h"
#include "sim/memory_margin.h"

namespace zeroplan {

enum class OutputFormat { table, json, csv, markdown };

struct CommonOptions {
  std::string model;
  std::string cluster = kDefaultClusterName;
  std::optional<int> gpus;
  std::optional<std::int64_t> micro_batch;
  std::optional<std::int64_t> seq;
  std::optional<std::int64_t> grad_accum;
  std::optional<std::string> precision;
  std::optional<std::string> optimizer;
  std::optional<std::string> stage;  // "0".."3" or "all"
  std::optional<std::string> offload_optimizer;
  std::optional<std::string> offload_param;
  std::optional<std::string> checkpointing;
  std::optional<std::string> ds_config;
  std::optional<std::string> engine;
  std::optional<std::string> model_code;
  std::optional<std::string> margin;  // percent of the predicted GPU peak kept free ("5" or "5%")
  std::optional<std::int64_t> cpu_threads_per_rank;  // CPU Adam threads per rank (default: cores / ranks per node)
  std::optional<double> host_op_seconds;  // the training host's DeepSpeed Python speed (default: the cluster's host)
  std::optional<std::string> zero_init;  // "on" / "off": stage 3 builds the model under deepspeed.zero.Init
  bool ds_empty_cache_after_init = false;  // the script calls torch.cuda.empty_cache() after deepspeed.initialize
  // LoRA / QLoRA (core/lora_modules.h): PEFT's r, lora_alpha, target_modules; bitsandbytes' base quantisation.
  std::optional<std::int64_t> lora_rank;
  std::optional<double> lora_alpha;
  std::optional<std::string> lora_targets;
  std::optional<std::string> quantize_base;
  std::string format = "table";
};

// Registers the shared flags on a subcommand. model_required: --model must be given.
void add_common_options(CLI::App& command, CommonOptions& options, bool model_required = true);

// Everything a command needs, resolved and validated.
struct ResolvedInputs {
  ModelDescription model;
  ClusterDescription cluster;     // resized to --gpus when given
  TrainingConfig training;        // defaults + DeepSpeed config + flags (stage/offload of the asked-for plan)
  PlanChoiceFilter filter;        // what --stage/--offload-* (or the DeepSpeed config) narrow the comparison to
  MemoryMargin margin;            // --margin, or the engine's measured memory-model error
  OutputFormat format = OutputFormat::table;
};

// "--margin 5" or "--margin 5%": a fraction (0.05). Throws InputError naming --margin for anything that is not a
// percentage in [0, 100).
double parse_margin_percent(const std::string& text);

// Throws InputError naming the flag or file at fault.
ResolvedInputs resolve_inputs(const CommonOptions& options);

OutputFormat parse_output_format(const std::string& text);

}  // namespace zeroplan
