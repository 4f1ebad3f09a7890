#include "gui/report_plan_match.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "core/input_error.h"
#include "core/training_config.h"
#include "sim/simulator.h"

namespace zeroplan {

namespace {

// Training-summary fields that select the plan (stage, offloads: the run's plan is looked up by them) or shape
// neither memory nor time in the planner and simulator (optimizer hyper-parameters, loss scaling, the NVMe path,
// the notes), so they may differ between the GUI and the run.
bool ignored_for_matching(const std::string& key) {
  static const std::vector<std::string> exact = {
      "zero.stage",    "zero.offload_optimizer", "zero.offload_param", "zero.nvme_path", "notes", "warnings",
      "learning_rate", "weight_decay",           "adam_betas",         "adam_epsilon",   "gradient_clipping"};
  return std::find(exact.begin(), exact.end(), key) != exact.end() || key.rfind("loss_scale.", 0) == 0;
}

// Training-summary fields added after runs already wrote reports, each with the value that stands for the behaviour
// before it: a report that lacks one is read with it (TrainingConfig's own default is no guide: fp32_loss's, for
// one, depends on the engine). A field missing from this list and from a report still differs, as "(none)".
const std::vector<std::pair<std::string, std::string>> kFieldsAddedLater = {
    {"deterministic", "false"},  // 2026-11-29: --deterministic recorded (cuDNN attention is not offered to it)
};

std::string ranks_text(int ranks) { return std::to_string(ranks) + (ranks == 1 ? " rank" : " ranks"); }

}  // namespace

std::optional<double> ReportPlanMatch::simulated_seconds(const std::string& kind) const {
  if (!simulated) return std::nullopt;
  for (const auto& [name, seconds] : simulated->seconds_per_kind) {
    if (name == kind) return seconds;
  }
  return 0.0;  // the simulated step issues no collective of this kind
}

ReportPlanMatch match_report_to_plan(const RunReport& report, const Comparison* comparison) {
  ReportPlanMatch match;
  match.plan_label = report.plan_label;
  if (!comparison) {
    match.differences.push_back("the GUI has no plans yet");
    return match;
  }
  const Comparison& c = *comparison;
  auto differ = [&](const std::string& what, const std::string& gui, const std::string& run) {
    if (gui != run) match.differences.push_back(what + ": " + gui + " in the GUI, " + run + " in the run");
  };
  differ("model", c.model.name, report.model_name);
  differ("cluster", c.cluster.name, report.cluster_name);
  if (c.cluster.total_gpus() != report.world_size) {
    match.differences.push_back("GPUs: " + std::to_string(c.cluster.total_gpus()) + " in the GUI, " +
                                ranks_text(report.world_size) + " in the run");
  }
  // Field by field over both training summaries (a field only one side has differs too).
  const auto gui_fields = flatten_json_fields(training_to_json(c.training));
  auto value_in = [](const std::vector<std::pair<std::string, std::string>>& fields, const std::string& key) {
    for (const auto& [name, value] : fields) {
      if (name == key) return value;
    }
    return std::string("(none)");
  };
  std::vector<std::string> keys;
  for (const auto* fields : {&gui_fields, &report.training_fields}) {
    for (const auto& [key, unused] : *fields) {
      if (!ignored_for_matching(key) && std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
    }
  }
  for (const std::string& key : keys) {
    std::string run = value_in(report.training_fields, key);
    if (run == "(none)") run = value_in(kFieldsAddedLater, key);
    differ(key, value_in(gui_fields, key), run);
  }
  if (!match.differences.empty()) return match;

  // The run's plan among the GUI's: by its stage and offloads, not by what the GUI has selected.
  PlanChoice choice;
  choice.stage = report.stage;
  choice.offload_optimizer =
      parse_offload_device(value_in(report.training_fields, "zero.offload_optimizer"), report.source,
                           "training.zero.offload_optimizer");
  choice.offload_param = parse_offload_device(value_in(report.training_fields, "zero.offload_param"), report.source,
                                              "training.zero.offload_param");
  match.plan_index = c.index_of(choice);
  if (match.plan_index < 0) {
    match.differences.push_back("the GUI has no plan '" + choice.label() + "' for these inputs");
    return match;
  }
  try {
    const StepSimulation sim = simulate_step(c.model, c.cluster, c.training, choice);
    SimulatedCommunication out;
    for (const CollectiveTiming& timing : sim.collectives) {
      const std::string kind = to_string(timing.kind);
      auto entry = std::find_if(out.seconds_per_kind.begin(), out.seconds_per_kind.end(),
                                [&](const auto& e) { return e.first == kind; });
      if (entry == out.seconds_per_kind.end()) out.seconds_per_kind.emplace_back(kind, timing.seconds);
      else entry->second += timing.seconds;
    }
    out.exposed_comm_seconds = sim.exposed_comm_seconds;
    out.step_seconds = sim.step_seconds;
    match.simulated = out;
    // The run simulated its own plan; the same inputs give the same step (1e-9 relative: the figure went through
    // JSON's shortest round-trip text).
    if (report.predicted_step_seconds &&
        std::abs(*report.predicted_step_seconds - sim.step_seconds) > 1e-9 * std::max(sim.step_seconds, 1e-12)) {
      match.step_disagreement = "the GUI's simulator predicts " + format_seconds(sim.step_seconds) +
                                " per step, the run's recorded " + format_seconds(*report.predicted_step_seconds) +
                                ": an input the report does not record differs (a DeepSpeed config field?)";
    }
  } catch (const InputError& error) {
    match.problem = error.what();
  }
  return match;
}

GuiInputs inputs_of_report(const RunReport& report) {
  GuiInputs in;
  const std::string bundled = "bundled:";
  in.model = report.model_source.rfind(bundled, 0) == 0 ? report.model_source.substr(bundled.size())
                                                        : report.model_source;
  in.cluster = report.cluster_name;
  in.gpus = report.world_size;
  auto field = [&](const std::string& key) {
    const std::optional<std::string> value = report.training_field(key);
    if (!value) throw InputError(report.source, "training." + key, "missing: the run's inputs need it");
    return *value;
  };
  auto integer = [&](const std::string& key) {
    const std::string text = field(key);
    std::size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != text.size() || value < 1) {
      throw InputError(report.source, "training." + key, "expected a positive integer, got " + text);
    }
    return static_cast<std::int64_t>(value);
  };
  in.micro_batch = integer("micro_batch");
  in.seq = integer("seq_len");
  in.grad_accum = integer("grad_accum");
  in.precision = parse_precision(field("precision"), report.source, "training.precision");
  in.checkpointing = parse_checkpointing(field("checkpointing"), report.source, "training.checkpointing");
  in.engine = parse_engine(field("engine"), report.source, "training.engine");
  return in;
}

}  // namespace zeroplan
