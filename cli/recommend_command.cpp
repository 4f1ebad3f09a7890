#include "cli/recommend_command.h"

#include <algorithm>

#include <cstdio>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/common_options.h"
#include "cli/text_table.h"
#include "core/input_error.h"
#include "core/number_checks.h"
#include "core/units.h"
#include "sim/host_bound_note.h"
#include "sim/lora_model.h"
#include "sim/plan_json.h"
#include "sim/recommender.h"
#include "sim/simulation_json.h"

namespace zeroplan {

namespace {

struct RecommendCommandOptions {
  CommonOptions common;
  std::int64_t global_batch = 0;  // 0: micro-batch x grad-accum x GPUs from the other flags
  std::size_t top = 5;
  bool only_given_gpus = false;
  bool keep_checkpointing = false;
  bool finetune = false;  // rank full fine-tuning, LoRA and QLoRA plans together
};

std::string fixed(double value, const char* format) {
  char buffer[48];
  std::snprintf(buffer, sizeof buffer, format, value);
  return buffer;
}

int run_recommend(const RecommendCommandOptions& options) {
  const ResolvedInputs inputs = resolve_inputs(options.common);
  RecommendOptions search;
  search.global_batch = options.global_batch != 0
                            ? options.global_batch
                            : inputs.training.micro_batch * inputs.training.grad_accum * inputs.cluster.total_gpus();
  if (options.global_batch != 0) {
    // Every GPU count the search tries splits it into micro-batches and micro-steps within their bounds.
    require_count_at_most(options.global_batch, kMaxMicroBatch * kMaxGradAccum * inputs.cluster.total_gpus(),
                          "command line", "--global-batch",
                          "micro-batch at most " + std::to_string(kMaxMicroBatch) + " * " +
                              std::to_string(kMaxGradAccum) + " micro-steps * " +
                              std::to_string(inputs.cluster.total_gpus()) + " GPUs");
  }
  search.top = options.top;
  search.gpu_memory_margin = inputs.margin;
  search.filter = inputs.filter;
  if (options.only_given_gpus) search.gpu_counts = {inputs.cluster.total_gpus()};
  if (options.keep_checkpointing || options.common.checkpointing) {
    search.checkpointing = {inputs.training.checkpointing};
  }
  const RecommendResult result =
      options.finetune
          ? recommend_finetune(inputs.model, inputs.cluster, finetune_methods(inputs.model, inputs.training), search)
          : recommend_plans(inputs.model, inputs.cluster, inputs.training, search);
  const int status = result.plans.empty() ? 1 : 0;

  if (inputs.format == OutputFormat::json) {
    nlohmann::json document;
    document["model"] = inputs.model.name;
    document["params"] = inputs.model.params();
    document["cluster"] = inputs.cluster.name;
    document["global_batch"] = search.global_batch;
    document["candidates"] = result.candidates;
    document["simulated"] = result.simulated;
    document["fitting"] = result.fitting;
    document["gpu_margin"] = margin_json(result.margin);
    document["ranking"] = std::string(throughput_key(inputs.model)) +
                          ", highest first, among plans whose simulated GPU peak plus the margin, host and NVMe fit";
    nlohmann::json plans = nlohmann::json::array();
    for (const Recommendation& r : result.plans) {
      nlohmann::json entry = simulation_json(r.simulation);
      if (options.finetune) entry["method"] = r.method;
      entry["stage"] = r.choice.stage;
      entry["offload_optimizer"] = to_string(r.choice.offload_optimizer);
      entry["offload_param"] = to_string(r.choice.offload_param);
      entry["gpus"] = r.gpus;
      entry["micro_batch"] = r.training.micro_batch;
      entry["grad_accum"] = r.training.grad_accum;
      entry["checkpointing"] = to_string(r.training.checkpointing);
      entry["why"] = r.why;
      plans.push_back(std::move(entry));
    }
    document["plans"] = std::move(plans);
    std::cout << document.dump(2) << '\n';
    return status;
  }

  std::vector<std::string> columns = {"#", "plan", "GPUs", "micro-batch", "grad-accum", "checkpointing", "step ms",
                   inputs.model.transformer ? "tokens/s" : "samples/s", "MFU %", "exposed comm ms", "peak GiB"};
  if (options.finetune) columns.insert(columns.begin() + 1, "method");
  TextTable table(columns);
  for (std::size_t i = 0; i < result.plans.size(); ++i) {
    const Recommendation& r = result.plans[i];
    const StepSimulation& s = r.simulation;
    std::vector<std::string> row = {
        std::to_string(i + 1),          r.choice.label(),
        std::to_string(r.gpus),         std::to_string(r.training.micro_batch),
        std::to_string(r.training.grad_accum), to_string(r.training.checkpointing),
        fixed(s.step_seconds * 1e3, "%.2f"), fixed(s.tokens_per_second, "%.0f"),
        fixed(100.0 * s.mfu, "%.1f"),   fixed(s.exposed_comm_seconds * 1e3, "%.2f"),
        fixed(to_gib(s.peak_gpu_bytes), "%.2f")};
    if (options.finetune) row.insert(row.begin() + 1, r.method);
    table.add_row(row);
  }
  if (inputs.format == OutputFormat::csv) {
    table.print_csv(std::cout);
    return status;
  }
  std::cout << inputs.model.name << " on up to " << inputs.cluster.total_gpus() << " x " << inputs.cluster.gpu_model
            << " (" << inputs.cluster.name << "), global batch " << search.global_batch << " samples"
            << (inputs.model.transformer ? " of " + std::to_string(inputs.training.seq_len) + " tokens" : std::string())
            << ": " << result.candidates << " configurations, "
            << result.simulated << " simulated, " << result.fitting << " fit with "
            << margin_text(result.margin) << " of each GPU peak kept free (" << result.margin.source
            << "; --margin sets another)\n";
  if (result.plans.empty()) {
    std::cout << "No plan fits. Try more GPUs (--gpus), a smaller global batch, or a cluster with NVMe.\n";
    return status;
  }
  if (inputs.format == OutputFormat::markdown) table.print_markdown(std::cout);
  else table.print_text(std::cout);
  if (options.finetune)
    for (const FinetuneMethod& method : finetune_methods(inputs.model, inputs.training))
      if (method.training.lora.enabled)
        std::cout << method.name << ": "
                  << peft_trainable_parameters_line(lora_figures(inputs.model, method.training)) << '\n';
  std::cout << "\nWhy each beats the next:\n";
  for (std::size_t i = 0; i + 1 < result.plans.size(); ++i) {
    std::cout << "  #" << i + 1 << ": " << result.plans[i].why << "\n";
  }
  std::cout << "MFU: " << result.plans.front().simulation.flop_convention << ", against the "
            << result.plans.front().simulation.peak_name << " peak.\n";
  // The ranked stage-3 plans whose step DeepSpeed's Python sets: for which host they are timed, per GPU count (the
  // costs hold on another host at one rank than at several: ClusterDescription::cost_host_eager_op_seconds).
  std::vector<int> gpu_counts;
  for (const Recommendation& r : result.plans)
    if (std::find(gpu_counts.begin(), gpu_counts.end(), r.gpus) == gpu_counts.end()) gpu_counts.push_back(r.gpus);
  for (int gpus : gpu_counts) {
    std::vector<PlanChoice> choices;
    std::vector<const StepSimulation*> steps;
    for (const Recommendation& r : result.plans) {
      if (r.gpus != gpus) continue;
      choices.push_back(r.choice);
      steps.push_back(&r.simulation);
    }
    for (const std::string& note : host_bound_notes(with_gpu_count(inputs.cluster, gpus), inputs.training, choices,
                                                    steps, "--host-op-seconds"))
      std::cout << (gpu_counts.size() > 1 ? "on " + std::to_string(gpus) + " GPU(s), " : std::string()) << note
                << '\n';
  }
  return status;
}

}  // namespace

void add_recommend_command(CLI::App& app, int* status) {
  auto options = std::make_shared<RecommendCommandOptions>();
  CLI::App* command = app.add_subcommand(
      "recommend", "The fastest plans that fit for a fixed global batch (stage, offload, micro-batch x "
                   "accumulation, checkpointing, GPU count)");
  add_common_options(*command, options->common);
  command->add_option("--global-batch", options->global_batch,
                      "Samples per optimizer step over all GPUs (default: micro-batch x grad-accum x GPUs)");
  command->add_option("--top", options->top, "How many plans to show")->capture_default_str();
  command->add_flag("--only-given-gpus", options->only_given_gpus,
                    "Search only the cluster's (or --gpus') GPU count, not smaller ones");
  command->add_flag("--keep-checkpointing", options->keep_checkpointing,
                    "Do not search activation checkpointing (also implied by --checkpointing)");
  command->add_flag("--finetune", options->finetune,
                    "Rank full fine-tuning, LoRA and QLoRA (NF4) plans together; LoRA takes --lora-rank, --lora-alpha "
                    "and --lora-targets (PEFT's defaults otherwise), QLoRA --quantize-base int8 instead of nf4");
  command->callback([options, status] { *status = run_recommend(*options); });
}

}  // namespace zeroplan
