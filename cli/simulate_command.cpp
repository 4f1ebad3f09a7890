#include "cli/simulate_command.h"

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/common_options.h"
#include "cli/text_table.h"
#include "core/input_error.h"
#include "core/units.h"
#include "sim/chrome_trace.h"
#include "sim/deepspeed_engine.h"
#include "sim/host_bound_note.h"
#include "sim/plan_json.h"
#include "sim/planner.h"
#include "sim/simulation_json.h"
#include "sim/simulator.h"

namespace zeroplan {

namespace {

struct SimulateCommandOptions {
  CommonOptions common;
  std::string trace;
  bool overwrite = false;
};

std::string fixed(double value, const char* format) {
  char buffer[48];
  std::snprintf(buffer, sizeof buffer, format, value);
  return buffer;
}
std::string ms_cell(double seconds) { return fixed(seconds * 1e3, "%.2f"); }

struct SimulatedPlan {
  PlanChoice choice;
  StepSimulation simulation;
  bool fits = false;  // timeline GPU peak within capacity, host and NVMe within the node's (memory model)
};

void print_details(const SimulatedPlan& plan, const ResolvedInputs& inputs) {
  const StepSimulation& s = plan.simulation;
  std::cout << "\n" << plan.choice.label() << ": step " << format_seconds(s.step_seconds) << ", "
            << fixed(s.tokens_per_second, "%.0f") << " " << s.token_unit << "/s, "
            << fixed(s.model_flops_per_second_per_gpu / 1e12, "%.1f") << " model TFLOP/s per GPU, MFU "
            << fixed(100.0 * s.mfu, "%.1f") << "% of " << s.peak_name << " (" << fixed(s.peak_flops / 1e12, "%.0f")
            << " TFLOP/s)";
  if (s.mfu_of_measured_gemm > 0.0) {
    std::cout << ", " << fixed(100.0 * s.mfu_of_measured_gemm, "%.1f") << "% of the measured bf16 GEMM rate";
  }
  std::cout << "\n  FLOPs: " << s.flop_convention << " = " << format_count(s.model_flops_per_token) << " per "
            << (s.token_unit == "tokens" ? "token" : "sample") << "\n";
  std::cout << "  step = compute " << format_seconds(s.compute_seconds) << " (recompute "
            << format_seconds(s.recompute_seconds) << ") + exposed communication "
            << format_seconds(s.exposed_comm_seconds) << " (NCCL busy while compute idles; NCCL busy in all "
            << format_seconds(s.communication_seconds) << ") + waiting on the host (hooks, PCIe, CPU optimizer, NVMe) "
            << format_seconds(s.offload_wait_seconds) << "\n";
  std::cout << "  GPU memory peak " << format_gib(s.peak_gpu_bytes) << " at " << format_seconds(s.peak_memory_at_seconds)
            << " (static " << format_gib(s.static_gpu_bytes) << " + activations, logits, gathered params), capacity "
            << format_gib(inputs.cluster.gpu_memory_bytes) << "\n";
  TextTable busy({"resource", "busy ms", "% of step"});
  for (int r = 0; r < kResourceCount; ++r) {
    const double seconds = s.busy_seconds[static_cast<std::size_t>(r)];
    busy.add_row({to_string(static_cast<Resource>(r)), ms_cell(seconds),
                  fixed(100.0 * seconds / s.step_seconds, "%.1f")});
  }
  busy.print_text(std::cout);
  if (!s.collectives.empty()) {
    std::cout << "  collectives (nccl-tests definitions: algbw = S/t; busbw = algbw x 2(n-1)/n for all-reduce, "
                 "x (n-1)/n for all-gather and reduce-scatter; GB/s = 1e9 bytes/s):\n";
    TextTable table({"collective", "ranks", "calls", "bytes (S, total)", "time ms", "algbw GB/s", "busbw GB/s"});
    for (const CollectiveTiming& c : s.collectives) {
      table.add_row({to_string(c.kind), std::to_string(c.ranks), std::to_string(c.calls), format_bytes(c.bytes),
                     ms_cell(c.seconds), fixed(c.algbw / kGB, "%.1f"), fixed(c.busbw / kGB, "%.1f")});
    }
    table.print_text(std::cout);
  }
}

int run_simulate(const SimulateCommandOptions& options) {
  const ResolvedInputs inputs = resolve_inputs(options.common);
  // Choices the cluster cannot run (NVMe offload without NVMe) are left out of a comparison and said so; asked
  // for explicitly (the only choice), simulate_step's error names the missing figure.
  std::vector<PlanChoice> choices;
  std::vector<std::string> left_out;
  const std::vector<PlanChoice> all_choices = enumerate_plan_choices(inputs.filter);
  for (const PlanChoice& choice : all_choices) {
    std::string why;
    if (inputs.training.engine == TrainingEngine::deepspeed && !deepspeed_runs(inputs.training, choice, &why)) {
      if (all_choices.size() == 1) throw InputError("command line", "--stage", why);
      left_out.push_back(choice.label() + " (" + why + ")");
    } else if (all_choices.size() > 1 && !cluster_supports(inputs.cluster, choice, &why)) {
      left_out.push_back(choice.label() + " (" + why + ")");
    } else {
      choices.push_back(choice);
    }
  }
  if (!options.trace.empty()) {
    if (choices.size() != 1) {
      throw InputError("command line", "--trace",
                       "a trace shows one plan but the flags select " + std::to_string(choices.size()) +
                           "; give --stage (with no offload flags it means no offload, as in DeepSpeed)");
    }
    if (std::filesystem::exists(options.trace) && !options.overwrite) {
      throw InputError(options.trace, "--trace", "file exists; not overwriting it (pass --overwrite to replace it)");
    }
  }
  PlannerOptions planner;
  planner.search_max_micro_batch = false;
  planner.gpu_memory_margin = inputs.margin.fraction;
  SimulationOptions simulation_options;
  simulation_options.record_events = !options.trace.empty();
  std::vector<SimulatedPlan> plans;
  for (const PlanChoice& choice : choices) {
    SimulatedPlan plan;
    plan.choice = choice;
    plan.simulation = simulate_step(inputs.model, inputs.cluster, inputs.training, choice, simulation_options);
    const PlanResult memory = evaluate_plan(inputs.model, inputs.cluster, inputs.training, choice, planner);
    plan.fits = memory.host_fits && memory.nvme_fits &&
                timeline_gpu_fits(plan.simulation, inputs.cluster, inputs.margin.fraction);
    plans.push_back(std::move(plan));
  }
  bool any_fits = false;
  for (const SimulatedPlan& plan : plans) any_fits = any_fits || plan.fits;
  const int status = any_fits ? 0 : 1;

  if (!options.trace.empty()) {
    write_chrome_trace(options.trace, plans.front().simulation, inputs.model,
                       "zeroplan: " + inputs.model.name + ", " + plans.front().choice.label() + ", rank 0 of " +
                           std::to_string(inputs.cluster.total_gpus()));
    std::cerr << "wrote the step's timeline to " << options.trace << " (open it in ui.perfetto.dev)\n";
  }

  // The lines said beside the verdict (sim/host_bound_note.h): under the table, and as "verdict_notes" in the JSON.
  std::vector<std::string> verdict_notes;
  {
    std::vector<PlanChoice> choices;
    std::vector<const StepSimulation*> steps;
    for (const SimulatedPlan& plan : plans) {
      choices.push_back(plan.choice);
      steps.push_back(&plan.simulation);
    }
    verdict_notes = host_bound_notes(inputs.cluster, inputs.training, choices, steps, "--host-op-seconds");
  }

  if (inputs.format == OutputFormat::json) {
    nlohmann::json document;
    document["model"] = inputs.model.name;
    document["params"] = inputs.model.params();
    document["cluster"] = inputs.cluster.name;
    document["gpus"] = inputs.cluster.total_gpus();
    document["micro_batch"] = inputs.training.micro_batch;
    if (inputs.model.transformer) document["seq_len"] = inputs.training.seq_len;
    document["grad_accum"] = inputs.training.grad_accum;
    document["checkpointing"] = to_string(inputs.training.checkpointing);
    document["exposed_comm_definition"] = "seconds NCCL is busy while the GPU compute stream is idle";
    document["gpu_margin"] = margin_json(inputs.margin);
    document["verdict_notes"] = verdict_notes;
    nlohmann::json list = nlohmann::json::array();
    for (const SimulatedPlan& plan : plans) {
      nlohmann::json entry = simulation_json(plan.simulation);
      entry["stage"] = plan.choice.stage;
      entry["offload_optimizer"] = to_string(plan.choice.offload_optimizer);
      entry["offload_param"] = to_string(plan.choice.offload_param);
      entry["fits"] = plan.fits;
      list.push_back(std::move(entry));
    }
    document["plans"] = std::move(list);
    document["not_simulated"] = left_out;
    std::cout << document.dump(2) << '\n';
    return status;
  }

  TextTable table({"plan", "step ms", inputs.model.transformer ? "tokens/s" : "samples/s", "MFU %", "compute ms",
                   "comm ms", "exposed comm ms", "host wait ms", "peak GiB", "fits"});
  for (const SimulatedPlan& plan : plans) {
    const StepSimulation& s = plan.simulation;
    table.add_row({plan.choice.label(), ms_cell(s.step_seconds), fixed(s.tokens_per_second, "%.0f"),
                   fixed(100.0 * s.mfu, "%.1f"), ms_cell(s.compute_seconds), ms_cell(s.communication_seconds),
                   ms_cell(s.exposed_comm_seconds), ms_cell(s.offload_wait_seconds),
                   fixed(to_gib(s.peak_gpu_bytes), "%.2f"), plan.fits ? "yes" : "NO"});
  }
  if (inputs.format == OutputFormat::csv) {
    table.print_csv(std::cout);
    return status;
  }
  std::cout << inputs.model.name << " on " << inputs.cluster.total_gpus() << " x " << inputs.cluster.gpu_model
            << " (" << inputs.cluster.name << "), micro-batch " << inputs.training.micro_batch << " x "
            << inputs.training.grad_accum << " steps, "
            << (inputs.model.transformer ? "sequence " + std::to_string(inputs.training.seq_len) + ", " : std::string())
            << to_string(inputs.training.precision) << ", checkpointing " << to_string(inputs.training.checkpointing)
            << "\n";
  for (const std::string& note : inputs.training.notes) std::cout << "  note: " << note << '\n';
  for (const std::string& warning : inputs.training.warnings) std::cout << "  warning: " << warning << '\n';
  if (inputs.format == OutputFormat::markdown) table.print_markdown(std::cout);
  else table.print_text(std::cout);
  for (const std::string& plan : left_out) std::cout << "  not simulated: " << plan << '\n';
  std::cout << "fits: the peak plus a " << margin_text(inputs.margin) << " margin within the GPU's memory ("
            << inputs.margin.source << "; --margin sets another)\n";
  for (const std::string& note : verdict_notes) std::cout << note << '\n';
  if (plans.size() == 1) {
    print_details(plans.front(), inputs);
  } else {
    std::cout << "(--stage and --offload-* pick one plan for its breakdown and --trace.)\n";
  }
  return status;
}

}  // namespace

void add_simulate_command(CLI::App& app, int* status) {
  auto options = std::make_shared<SimulateCommandOptions>();
  CLI::App* command = app.add_subcommand(
      "simulate", "How fast? Step time, tokens/s, MFU and where the time goes, from a simulated step timeline");
  add_common_options(*command, options->common);
  command->add_option("--trace", options->trace,
                      "Write the step's timeline as Chrome trace-event JSON (Perfetto, chrome://tracing)");
  command->add_flag("--overwrite", options->overwrite, "Let --trace replace an existing file");
  command->callback([options, status] { *status = run_simulate(*options); });
}

}  // namespace zeroplan
