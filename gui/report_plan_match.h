// Which of the GUI's plans a run report's run executed, and the simulator's communication figures for it.
// A report carries its own plan (the memory model's figures and the communication model's bytes), but not the
// simulator's seconds per collective kind; those come from the GUI's comparison, and only when the GUI's inputs
// are the run's: same model, cluster, GPU count as the run's world size, and the same training summary (the
// fields that shape memory and time). The plan is then the one of the run's stage and offloads, whichever plan
// the GUI has selected. Otherwise every difference is listed, so the view can say plainly why the simulator's
// figures are not beside the run's. Pure C++, no Qt.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gui/comparison.h"
#include "gui/gui_inputs.h"
#include "gui/run_report.h"

namespace zeroplan {

struct SimulatedCommunication {
  std::vector<std::pair<std::string, double>> seconds_per_kind;  // NCCL busy per collective kind, summed over calls
  double exposed_comm_seconds = 0.0;                             // NCCL busy while compute is idle
  double step_seconds = 0.0;
};

struct ReportPlanMatch {
  int plan_index = -1;                   // into Comparison::plans; -1 when not matched
  std::string plan_label;                // the run's plan ("stage 2")
  std::vector<std::string> differences;  // "GPUs: 1 in the GUI, 2 ranks in the run", one per input that differs
  std::optional<SimulatedCommunication> simulated;  // when matched and the simulator could time the plan
  std::string problem;                   // the simulator's InputError when it could not
  // The run's own simulator figure (measured.predicted_step_seconds) against the GUI's for the matched plan:
  // equal unless something the report does not record (a DeepSpeed config field) differs. Empty when they agree.
  std::string step_disagreement;

  bool matched() const { return plan_index >= 0; }
  std::optional<double> simulated_seconds(const std::string& kind) const;
};

// comparison may be null (the GUI has no plans yet).
ReportPlanMatch match_report_to_plan(const RunReport& report, const Comparison* comparison);

// The GUI inputs that reproduce the run's (model, cluster, GPUs = world size, micro-batch, sequence,
// accumulation, precision, checkpointing, engine). Throws InputError naming the report's field it cannot read.
GuiInputs inputs_of_report(const RunReport& report);

}  // namespace zeroplan
