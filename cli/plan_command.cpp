#include "cli/plan_command.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/common_options.h"
#include "cli/text_table.h"
#include "core/deepspeed_config.h"
#include "core/input_error.h"
#include "core/units.h"
#include "sim/host_bound_note.h"
#include "sim/plan_json.h"
#include "sim/plan_timing.h"
#include "sim/planner.h"
#include "sim/simulation_json.h"
#include "sim/simulator.h"

namespace zeroplan {

namespace {

struct PlanCommandOptions {
  CommonOptions common;
  bool explain = false;
  std::string compare;
  bool fewest_gpus = false;
  int max_gpus = 4096;
  bool largest_model = false;
  std::string emit_ds_config;
  bool overwrite = false;
};

std::string gib_cell(Bytes bytes) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2f", to_gib(bytes));
  return buffer;
}

std::string gb_cell(Bytes bytes) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2f", static_cast<double>(bytes) / kGB);
  return buffer;
}

Bytes collective_bytes(const CommVolume& comm, CollectiveKind kind) {
  Bytes bytes = 0;
  for (const CollectiveVolume& volume : comm.collectives) {
    if (volume.kind == kind) bytes += volume.bytes;
  }
  return bytes;
}

// Components grouped the way a reader thinks of them; the JSON keeps every component separate.
struct GroupedMemory {
  Bytes params, grads, optimizer, activations, logits, buffers, runtime;
};
GroupedMemory group(const GpuMemoryBreakdown& gpu) {
  return {gpu.params,
          gpu.grads,
          gpu.master_params + gpu.optimizer_states,
          gpu.activations,
          gpu.logits,
          gpu.gradient_buckets + gpu.gathered_params + gpu.offload_buffers,
          gpu.runtime_overhead};
}

std::string verdict_cell(const PlanResult& plan, const std::string& refused) {
  if (!refused.empty()) return "NO (DeepSpeed refuses it)";
  if (plan.fits) return "fits";
  std::string why;
  // Within the GPU's memory but not with the margin kept free: the model's own error could make it not fit.
  if (!plan.gpu_fits) why += plan.gpu_headroom_bytes >= 0 ? "GPU margin" : "GPU";
  if (!plan.host_fits) why += why.empty() ? "host" : "+host";
  if (!plan.nvme_fits) why += why.empty() ? "NVMe" : "+NVMe";
  return "NO (" + why + ")";
}

TextTable memory_table(const std::vector<PlanResult>& plans, const std::vector<std::optional<StepSimulation>>& times,
                       const std::vector<std::string>& refused, bool with_deepspeed) {
  std::vector<std::string> headers = {"plan",    "params",  "grads",     "optimizer",
                                      "activations", "logits", "buffers", "runtime",
                                      "total",   "sum of worst cases", "headroom", "verdict",
                                      "max micro-batch"};
  if (with_deepspeed) {
    headers.push_back("DeepSpeed est. GPU");
    headers.push_back("DeepSpeed est. host");
  }
  TextTable table(headers);
  for (std::size_t i = 0; i < plans.size(); ++i) {
    const PlanResult& plan = plans[i];
    const GroupedMemory m = group(plan.memory.gpu);
    const Bytes worst = times[i] ? times[i]->sum_of_worst_cases_gpu_bytes : plan.memory.gpu.total;
    std::vector<std::string> row = {plan.choice.label(),     gib_cell(m.params),  gib_cell(m.grads),
                                    gib_cell(m.optimizer),   gib_cell(m.activations), gib_cell(m.logits),
                                    gib_cell(m.buffers),     gib_cell(m.runtime), gib_cell(plan.memory.gpu.total),
                                    gib_cell(worst),         gib_cell(plan.gpu_headroom_bytes), verdict_cell(plan, refused[i]),
                                    std::to_string(plan.max_micro_batch)};
    if (with_deepspeed) {
      row.push_back(plan.deepspeed ? gib_cell(plan.deepspeed->gpu_bytes) : "-");
      row.push_back(plan.deepspeed ? gib_cell(plan.deepspeed->host_bytes) : "-");
    }
    table.add_row(row);
  }
  return table;
}

TextTable traffic_table(const std::vector<PlanResult>& plans) {
  TextTable table({"plan", "host", "host pinned", "NVMe", "all-reduce", "reduce-scatter", "all-gather",
                   "sent per GPU", "x P", "paper x P", "PCIe H2D", "PCIe D2H", "NVMe r+w"});
  for (const PlanResult& plan : plans) {
    char multiple[16], paper[16];
    std::snprintf(multiple, sizeof multiple, "%.2f", plan.comm.multiple_of_params);
    std::snprintf(paper, sizeof paper, "%.0f", plan.comm.paper_multiple_of_params);
    table.add_row({plan.choice.label(), gib_cell(plan.memory.host.total), gib_cell(plan.memory.host.pinned),
                   gib_cell(plan.memory.nvme_bytes), gb_cell(collective_bytes(plan.comm, CollectiveKind::all_reduce)),
                   gb_cell(collective_bytes(plan.comm, CollectiveKind::reduce_scatter)),
                   gb_cell(collective_bytes(plan.comm, CollectiveKind::all_gather)),
                   gb_cell(plan.comm.total_wire_bytes), multiple, paper, gb_cell(plan.comm.pcie_host_to_device_bytes),
                   gb_cell(plan.comm.pcie_device_to_host_bytes),
                   gb_cell(plan.comm.nvme_read_bytes + plan.comm.nvme_write_bytes)});
  }
  return table;
}

// One wide row per plan, every figure in bytes (times in seconds): the CSV a spreadsheet wants.
TextTable csv_table(const std::vector<PlanResult>& plans, const std::vector<std::optional<StepSimulation>>& times,
                    bool with_deepspeed, const char* throughput_column) {
  std::vector<std::string> headers = {"plan", "stage", "offload_optimizer", "offload_param"};
  for (const auto& [name, bytes] : GpuMemoryBreakdown{}.components()) headers.push_back("gpu_" + name + "_bytes");
  for (const char* name : {"gpu_total_bytes", "gpu_capacity_bytes", "gpu_headroom_bytes", "host_bytes",
                           "host_pinned_bytes", "nvme_bytes", "all_reduce_bytes", "reduce_scatter_bytes",
                           "all_gather_bytes", "wire_bytes", "pcie_h2d_bytes", "pcie_d2h_bytes", "fits",
                           "max_micro_batch", "step_seconds", throughput_column, "mfu", "exposed_comm_seconds",
                           "timeline_peak_gpu_bytes", "sum_of_worst_cases_gpu_bytes", "gpu_margin_bytes"}) {
    headers.emplace_back(name);
  }
  if (with_deepspeed) {
    headers.emplace_back("deepspeed_gpu_bytes");
    headers.emplace_back("deepspeed_host_bytes");
  }
  TextTable table(headers);
  for (std::size_t i = 0; i < plans.size(); ++i) {
    const PlanResult& plan = plans[i];
    std::vector<std::string> row = {plan.choice.label(), std::to_string(plan.choice.stage),
                                    to_string(plan.choice.offload_optimizer), to_string(plan.choice.offload_param)};
    for (const auto& [name, bytes] : plan.memory.gpu.components()) row.push_back(std::to_string(bytes));
    for (Bytes value : {plan.memory.gpu.total, plan.memory.gpu.total + plan.gpu_headroom_bytes,
                        plan.gpu_headroom_bytes, plan.memory.host.total, plan.memory.host.pinned,
                        plan.memory.nvme_bytes, collective_bytes(plan.comm, CollectiveKind::all_reduce),
                        collective_bytes(plan.comm, CollectiveKind::reduce_scatter),
                        collective_bytes(plan.comm, CollectiveKind::all_gather), plan.comm.total_wire_bytes,
                        plan.comm.pcie_host_to_device_bytes, plan.comm.pcie_device_to_host_bytes}) {
      row.push_back(std::to_string(value));
    }
    row.push_back(plan.fits ? "true" : "false");
    row.push_back(std::to_string(plan.max_micro_batch));
    // Not simulated (the cluster lacks a rate the plan needs): empty cells, as JSON gives null.
    const auto number = [](double value) {
      char buffer[40];
      std::snprintf(buffer, sizeof buffer, "%.9g", value);
      return std::string(buffer);
    };
    if (times[i]) {
      const StepSimulation& t = *times[i];
      for (double value : {t.step_seconds, t.tokens_per_second, t.mfu, t.exposed_comm_seconds}) {
        row.push_back(number(value));
      }
      row.push_back(std::to_string(t.peak_gpu_bytes));
      row.push_back(std::to_string(t.sum_of_worst_cases_gpu_bytes));
    } else {
      for (int k = 0; k < 5; ++k) row.emplace_back("");
      row.push_back(std::to_string(plan.memory.gpu.total));
    }
    row.push_back(std::to_string(plan.gpu_margin_bytes));
    if (with_deepspeed) {
      row.push_back(plan.deepspeed ? std::to_string(plan.deepspeed->gpu_bytes) : "");
      row.push_back(plan.deepspeed ? std::to_string(plan.deepspeed->host_bytes) : "");
    }
    table.add_row(row);
  }
  return table;
}

void print_table(const TextTable& table, OutputFormat format) {
  if (format == OutputFormat::markdown) table.print_markdown(std::cout);
  else table.print_text(std::cout);
}

void print_header(const ResolvedInputs& inputs, bool markdown) {
  const ModelDescription& model = inputs.model;
  const ClusterDescription& cluster = inputs.cluster;
  const TrainingConfig& training = inputs.training;
  const char* bold = markdown ? "**" : "";
  std::cout << bold << "model" << bold << "    " << model.name << ": " << format_integer(model.params())
            << " params (" << format_count(model.params()) << "), largest layer "
            << format_integer(model.largest_layer_params()) << '\n';
  std::cout << bold << "cluster" << bold << "  " << cluster.name << ": " << cluster.total_gpus() << " x "
            << cluster.gpu_model << ", " << format_gib(cluster.gpu_memory_bytes) << " each, " << cluster.nodes
            << (cluster.nodes == 1 ? " node" : " nodes") << " of " << cluster.gpus_per_node << ", host "
            << format_gib(cluster.host_memory_bytes) << " per node";
  if (cluster.nvme_capacity_bytes > 0) std::cout << ", NVMe " << format_gib(cluster.nvme_capacity_bytes);
  std::cout << '\n';
  // A layer list has no sequence and no attention: its header says neither.
  std::cout << bold << "training" << bold << " micro-batch " << training.micro_batch;
  if (model.transformer) std::cout << ", sequence " << training.seq_len;
  std::cout << ", gradient accumulation " << training.grad_accum << ", " << to_string(training.precision) << ", "
            << to_string(training.optimizer) << ", checkpointing " << to_string(training.checkpointing)
            << (model.transformer && training.fused_attention ? ", fused attention" : "") << ", global batch " << training.micro_batch * training.grad_accum * cluster.total_gpus()
            << " samples\n";
  for (const std::string& note : training.notes) std::cout << "  note: " << note << '\n';
  for (const std::string& warning : training.warnings) std::cout << "  warning: " << warning << '\n';
  std::cout << '\n';
}

void print_explanations(const std::vector<PlanResult>& plans) {
  for (const PlanResult& plan : plans) {
    std::cout << "\n" << plan.choice.label() << ": every term (per GPU unless it says host/nvme, which are per node)\n";
    for (const MemoryTerm& term : plan.memory.terms) {
      std::cout << "  " << term.component << ": " << term.name << " = " << format_integer(term.bytes) << " B ("
                << format_gib(term.bytes) << ")\n"
                << "      formula: " << term.formula << "\n"
                << "      source:  " << term.source << "\n";
    }
  }
}

void print_deepspeed_rows(const ModelDescription& model, const ClusterDescription& cluster, OutputFormat format) {
  std::cout << "\nDeepSpeed's own estimators (model states only; estimate_zero2/zero3_model_states_mem_needs; "
               "their \"GB\" is GiB):\n";
  TextTable table({"stage", "DeepSpeed row", "per GPU", "per node host"});
  for (const DeepSpeedEstimate& row :
       deepspeed_rows(model.params(), model.largest_layer_params(), cluster.gpus_per_node, cluster.nodes)) {
    table.add_row({std::to_string(row.stage) + (row.stage == 2 ? " (and 1)" : ""), row.row,
                   format_gib(row.gpu_bytes), format_gib(row.host_bytes)});
  }
  print_table(table, format);
}

// The plan a --emit-ds-config writes and the verdict names: the one asked for when the flags narrow to one;
// otherwise the recommended plan (sim/plan_timing.h). -1 when none.
int chosen_plan(const std::vector<TimedPlan>& timed) {
  if (timed.size() == 1) return 0;
  return recommended_plan(timed);
}

void write_ds_config(const PlanCommandOptions& options, const ResolvedInputs& inputs, const PlanResult& plan) {
  const std::filesystem::path path = options.emit_ds_config;
  if (std::filesystem::exists(path) && !options.overwrite) {
    throw InputError(path.string(), "--emit-ds-config",
                     "file exists; not overwriting it (pass --overwrite to replace it)");
  }
  const nlohmann::json config = emit_deepspeed_config(plan.training, inputs.cluster.total_gpus());
  std::ofstream out(path);
  if (!out) throw InputError(path.string(), "--emit-ds-config", "cannot open the file for writing");
  out << config.dump(2) << '\n';
  if (!out) throw InputError(path.string(), "--emit-ds-config", "writing failed");
  std::cerr << "wrote DeepSpeed config for " << plan.choice.label() << " to " << path.string() << '\n';
}

int run_plan(const PlanCommandOptions& options) {
  const ResolvedInputs inputs = resolve_inputs(options.common);
  bool compare_deepspeed = false;
  if (!options.compare.empty()) {
    if (options.compare != "deepspeed") {
      throw InputError("command line", "--compare", "unknown comparison '" + options.compare + "': expected deepspeed");
    }
    compare_deepspeed = true;
  }
  PlannerOptions planner_options;
  planner_options.gpu_memory_margin = inputs.margin.fraction;
  planner_options.explain = options.explain;
  planner_options.compare_deepspeed = compare_deepspeed;
  // Memory, step time and the GPU verdict from the simulated timeline's peak, as `simulate`, `recommend` and the
  // GUI judge it (sim/plan_timing.h); the memory model's sum of worst cases stays beside it. A choice the cluster
  // lacks the rates for (NVMe offload without NVMe) keeps the memory model's verdict.
  const std::vector<TimedPlan> timed = evaluate_timed_plans(inputs.model, inputs.cluster, inputs.training,
                                                            enumerate_plan_choices(inputs.filter), planner_options);
  std::vector<PlanResult> plans;
  std::vector<std::optional<StepSimulation>> times;
  std::vector<std::string> refused;
  for (const TimedPlan& entry : timed) {
    plans.push_back(entry.plan);
    times.push_back(entry.simulation);
    refused.push_back(entry.refused);
  }
  const int chosen = chosen_plan(timed);
  const bool tokens = inputs.model.transformer.has_value();
  const char* rate_unit = tokens ? "tokens/s" : "samples/s";

  // Optional searches, per plan.
  std::vector<std::optional<int>> fewest(plans.size());
  std::vector<std::optional<ModelDescription>> largest(plans.size());
  for (std::size_t i = 0; i < plans.size(); ++i) {
    if (options.fewest_gpus) {
      fewest[i] = fewest_gpus_that_fit(inputs.model, inputs.cluster, inputs.training, plans[i].choice,
                                       options.max_gpus, inputs.margin.fraction);
    }
    if (options.largest_model) {
      largest[i] = largest_fitting_model(inputs.model, inputs.cluster, inputs.training, plans[i].choice,
                                         inputs.margin.fraction);
    }
  }

  bool any_fits = false;
  for (const PlanResult& plan : plans) any_fits = any_fits || plan.fits;
  const int status = any_fits ? 0 : 1;

  if (!options.emit_ds_config.empty()) {
    if (chosen < 0) {
      std::cerr << "zeroplan: no plan fits; no DeepSpeed config written\n";
    } else {
      write_ds_config(options, inputs, plans[static_cast<std::size_t>(chosen)]);
    }
  }

  // The lines said beside the verdict (sim/host_bound_note.h): under the text tables, and as "verdict_notes" in the
  // JSON.
  std::vector<std::string> verdict_notes;
  {
    std::vector<PlanChoice> choices;
    std::vector<const StepSimulation*> steps;
    for (std::size_t i = 0; i < plans.size(); ++i) {
      choices.push_back(plans[i].choice);
      steps.push_back(times[i] ? &*times[i] : nullptr);
    }
    verdict_notes = host_bound_notes(inputs.cluster, inputs.training, choices, steps, "--host-op-seconds");
  }

  if (inputs.format == OutputFormat::json) {
    nlohmann::json document = plans_document(inputs.model, inputs.cluster, inputs.training, plans);
    document["gpu_margin"] = margin_json(inputs.margin);
    document["verdict_notes"] = verdict_notes;
    for (std::size_t i = 0; i < plans.size(); ++i) {
      document["plans"][i] = timed_plan_to_json(timed[i], inputs.model, inputs.cluster);
      if (options.fewest_gpus) document["plans"][i]["fewest_gpus"] = fewest[i] ? nlohmann::json(*fewest[i]) : nullptr;
      if (options.largest_model) {
        document["plans"][i]["largest_model_params"] = largest[i] ? nlohmann::json(largest[i]->params()) : nullptr;
        document["plans"][i]["largest_model"] = largest[i] ? nlohmann::json(largest[i]->name) : nullptr;
      }
    }
    if (compare_deepspeed) {
      nlohmann::json rows = nlohmann::json::array();
      for (const DeepSpeedEstimate& row : deepspeed_rows(inputs.model.params(), inputs.model.largest_layer_params(),
                                                         inputs.cluster.gpus_per_node, inputs.cluster.nodes)) {
        rows.push_back({{"stage", row.stage}, {"row", row.row}, {"gpu_bytes", row.gpu_bytes},
                        {"host_bytes", row.host_bytes}});
      }
      document["deepspeed_rows"] = rows;
    }
    std::cout << document.dump(2) << '\n';
    return status;
  }
  if (inputs.format == OutputFormat::csv) {
    csv_table(plans, times, compare_deepspeed, throughput_key(inputs.model)).print_csv(std::cout);
    return status;
  }

  const bool markdown = inputs.format == OutputFormat::markdown;
  print_header(inputs, markdown);
  std::cout << "Per-GPU memory at the simulated step's peak, GiB (capacity " << gib_cell(inputs.cluster.gpu_memory_bytes)
            << " GiB; a plan fits when its peak plus a " << margin_text(inputs.margin)
            << " margin is within it; activations, logits and gathered params as live at the timeline's peak, the rest as the "
               "memory model has it; optimizer = fp32 master params + optimizer states; buffers = gradient "
               "buckets, stage-3 gathered params, offload staging):\n";
  print_table(memory_table(plans, times, refused, compare_deepspeed), inputs.format);
  for (std::size_t i = 0; i < plans.size(); ++i)
    if (!refused[i].empty()) std::cout << "  " << plans[i].choice.label() << ": " << refused[i] << '\n';
  std::cout << "\nHost and NVMe per node (GiB); communication per GPU per optimizer step (GB = 1e9 bytes; "
               "sent per GPU = ring wire bytes; x P = what the "
            << to_string(inputs.training.engine)
            << " engine sends per micro-step in units of P, paper x P = the ZeRO paper's 2P/3P):\n";
  print_table(traffic_table(plans), inputs.format);
  std::cout << "\nStep time (simulated timeline, `zeroplan simulate` for the breakdown; MFU against the datasheet "
               "dense peak, FLOPs "
            << (tokens ? "6N + 12*L*h*s per token" : "3 x forward FLOPs per sample")
            << "; exposed comm = NCCL busy while compute idles):\n";
  TextTable time_table({"plan", "step ms", rate_unit, "MFU %", "exposed comm ms"});
  for (std::size_t i = 0; i < plans.size(); ++i) {
    char step[32] = "-", rate[32] = "-", mfu[32] = "-", exposed[32] = "-";
    if (times[i]) {
      std::snprintf(step, sizeof step, "%.2f", times[i]->step_seconds * 1e3);
      std::snprintf(rate, sizeof rate, "%.0f", times[i]->tokens_per_second);
      std::snprintf(mfu, sizeof mfu, "%.1f", 100.0 * times[i]->mfu);
      std::snprintf(exposed, sizeof exposed, "%.2f", times[i]->exposed_comm_seconds * 1e3);
    }
    time_table.add_row({plans[i].choice.label(), step, rate, mfu, exposed});
  }
  print_table(time_table, inputs.format);
  for (const std::string& note : verdict_notes) std::cout << "  " << note << '\n';

  if (options.fewest_gpus || options.largest_model) {
    std::cout << "\nSearches:\n";
    std::vector<std::string> headers = {"plan"};
    if (options.fewest_gpus) headers.push_back("fewest GPUs that fit");
    if (options.largest_model) headers.push_back("largest model of the family that fits");
    TextTable table(headers);
    for (std::size_t i = 0; i < plans.size(); ++i) {
      std::vector<std::string> row = {plans[i].choice.label()};
      if (options.fewest_gpus) {
        // The search spans several nodes only when the cluster describes a network between them.
        const bool multi_node = inputs.cluster.inter_node.bus_bandwidth > 0.0;
        row.push_back(fewest[i] ? std::to_string(*fewest[i])
                      : multi_node ? "none up to " + std::to_string(options.max_gpus)
                                   : "none up to " + std::to_string(std::min(options.max_gpus, inputs.cluster.gpus_per_node)) +
                                         " (one node: the cluster describes no network)");
      }
      if (options.largest_model) {
        row.push_back(largest[i] ? largest[i]->name + " (" + format_count(largest[i]->params()) + " params)"
                                 : "none");
      }
      table.add_row(row);
    }
    print_table(table, inputs.format);
  }
  if (options.explain) print_explanations(plans);
  if (compare_deepspeed) print_deepspeed_rows(inputs.model, inputs.cluster, inputs.format);

  std::cout << '\n';
  std::vector<std::string> fitting;
  for (const PlanResult& plan : plans) {
    if (plan.fits) fitting.push_back(plan.choice.label());
  }
  if (fitting.empty()) {
    std::cout << "Verdict: no plan fits on " << inputs.cluster.total_gpus() << " x " << inputs.cluster.gpu_model
              << " at micro-batch " << inputs.training.micro_batch
              << ". Try a smaller micro-batch, checkpointing, offload, or more GPUs (--fewest-gpus).\n";
  } else {
    const std::size_t best_index = static_cast<std::size_t>(chosen);
    const PlanResult* best = &plans[best_index];
    std::cout << "Verdict: " << fitting.size() << " of " << plans.size() << " plans fit. "
              << (plans.size() == 1 ? "Plan: " : "Fastest that fits: ") << best->choice.label();
    if (times[best_index]) {
      std::cout << " (" << static_cast<std::int64_t>(times[best_index]->tokens_per_second)
                << " " << rate_unit << " predicted, ";
    } else {
      std::cout << " (";
    }
    std::cout << "headroom " << format_gib(best->gpu_headroom_bytes) << ", largest micro-batch "
              << best->max_micro_batch << ").\n";
  }
  std::cout << "Margin: " << margin_text(inputs.margin) << " of each plan's predicted GPU peak kept free ("
            << inputs.margin.source << "; --margin sets another).\n";
  return status;
}

}  // namespace

void add_plan_command(CLI::App& app, int* status) {
  auto options = std::make_shared<PlanCommandOptions>();
  CLI::App* command = app.add_subcommand(
      "plan", "Will it fit? Per-GPU, host and NVMe memory and communication for every ZeRO stage and offload");
  add_common_options(*command, options->common);
  command->add_flag("--explain", options->explain, "Show every memory term with its formula and source");
  command->add_option("--compare", options->compare, "Put DeepSpeed's own estimator figures beside ours: deepspeed");
  command->add_flag("--fewest-gpus", options->fewest_gpus, "Search the fewest GPUs of this kind that fit, per plan");
  command->add_option("--max-gpus", options->max_gpus, "Upper bound of the --fewest-gpus search")
      ->capture_default_str();
  command->add_flag("--largest-model", options->largest_model,
                    "Search the largest model of this family that fits, per plan (ZeRO paper Table 2)");
  command->add_option("--emit-ds-config", options->emit_ds_config,
                      "Write a DeepSpeed config for the chosen plan (the one asked for, or the simplest that fits)");
  command->add_flag("--overwrite", options->overwrite, "Let --emit-ds-config replace an existing file");
  command->callback([options, status] { *status = run_plan(*options); });
}

}  // namespace zeroplan
