// The simulator's view of a comparison, as the GUI shows it: per plan the predicted step time, tokens/s, MFU
// and exposed communication (sim/simulator.h), the recommended plan (sim/recommender.h), and for the selected
// plan the step's timeline (tasks per resource) and its GPU memory curve.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/units.h"
#include "gui/comparison.h"
#include "sim/timeline.h"

namespace zeroplan {

struct PlanTiming {
  double step_seconds = 0.0;
  double tokens_per_second = 0.0;
  double mfu = 0.0;                    // 0..1
  double exposed_comm_seconds = 0.0;   // communication not hidden behind compute
  double compute_seconds = 0.0;
  double comm_seconds = 0.0;
  std::string mfu_basis;               // the FLOP convention and the peak the MFU uses
};

struct SimulatedPlans {
  std::vector<std::optional<PlanTiming>> timings;  // one per Comparison::plans entry
  int recommended = -1;                            // index into Comparison::plans, -1 when none fits
  std::string recommendation;                      // why it is recommended (or why none is)
  std::string problem;                             // the simulator's InputError when a plan could not be timed
  std::string notes;  // sim/host_bound_note.h's lines; empty: none
};

// The simulated step of one plan for the timeline view.
struct PlanStep {
  std::string label;                               // the plan's label
  std::vector<TimelineTask> tasks;                 // every task, start/finish in seconds
  std::vector<std::pair<double, Bytes>> memory_curve;  // (time s, GPU bytes in use) after each change
  Bytes peak_memory_bytes = 0;
  Bytes gpu_capacity_bytes = 0;
  double step_seconds = 0.0;
};

// Simulates every plan of the comparison. A plan the simulator cannot time (its InputError) has no timing and
// the error is kept in `problem`; the memory comparison stays usable. The recommended plan is the one with the
// most tokens/s among the plans that fit (the recommender's criterion, sim/recommender.h, restricted to the
// compared plans).
SimulatedPlans simulate_plans(const Comparison& comparison);
// The timeline of one plan (index into comparison.plans). Throws InputError when it cannot be simulated.
PlanStep simulate_plan_step(const Comparison& comparison, int plan_index);

}  // namespace zeroplan
