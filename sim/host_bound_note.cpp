#include "sim/host_bound_note.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace zeroplan {

std::optional<std::string> host_bound_note(const ClusterDescription& cluster, const TrainingConfig& training,
                                           const std::vector<PlanChoice>& choices,
                                           const std::vector<const StepSimulation*>& steps,
                                           const std::string& host_op_input) {
  if (training.engine != TrainingEngine::deepspeed) return std::nullopt;
  std::vector<std::string> bound;  // each plan once: recommend ranks one at several batches and GPU counts
  double smallest = 1.0, largest = 0.0;
  for (std::size_t i = 0; i < choices.size() && i < steps.size(); ++i) {
    // Stage 3 only: its host costs are the ones --host-op-seconds scales (sim/simulator.cpp says why).
    if (choices[i].stage != 3 || !steps[i] || !(steps[i]->step_seconds > 0.0)) continue;
    const double share =
        steps[i]->busy_seconds[static_cast<std::size_t>(Resource::host_python)] / steps[i]->step_seconds;
    if (!(share >= 1.0 / 3.0)) continue;
    smallest = std::min(smallest, share);
    largest = std::max(largest, share);
    const std::string label = choices[i].label();
    if (std::find(bound.begin(), bound.end(), label) == bound.end()) bound.push_back(label);
  }
  std::string plans;
  for (const std::string& label : bound) plans += (plans.empty() ? "" : ", ") + label;
  if (plans.empty()) return std::nullopt;
  char share[32];
  if (std::lround(100.0 * smallest) == std::lround(100.0 * largest))
    std::snprintf(share, sizeof share, "%.0f%%", 100.0 * largest);
  else
    std::snprintf(share, sizeof share, "%.0f-%.0f%%", 100.0 * smallest, 100.0 * largest);
  std::string note = "host-bound: DeepSpeed's Python is busy for " + std::string(share) + " of the step of " + plans +
                     ", which is timed for ";
  const double reference = cluster.cost_host_eager_op_seconds();
  const std::string field = cluster.cost_host_field();
  const double own = training.host_eager_op_seconds;
  char figure[32];
  if (own > 0.0) {
    std::snprintf(figure, sizeof figure, "%.2f us", own * 1e6);
    return note + "the host given by " + host_op_input + " (" + figure + " per eager operation)";
  }
  if (cluster.probed_eager_op_seconds > 0.0 && reference > 0.0) {
    std::snprintf(figure, sizeof figure, "%.2f us", cluster.probed_eager_op_seconds * 1e6);
    return note + "the host zeroplan calibrate probed for " + cluster.name + " (" + figure + " per eager operation, " +
           "host.probed_eager_op_seconds); " + host_op_input + " times another";
  }
  if (!(reference > 0.0))
    return note + "the host " + cluster.name + "'s per-call costs hold on (the cluster names no " + field +
                  " to time another host from)";
  std::snprintf(figure, sizeof figure, "%.2f us", reference * 1e6);
  // The spread: ds_peer.py's probe on nvidia-h200-x2 machines, 2026-11-27 (docs/planner-vs-deepspeed.md, "The host's
  // speed").
  return note + "a host whose probe reads " + figure + " per eager operation (" + cluster.name + " " + field +
         "); machines of one kind differ (5.3-11.9 us measured on H200 hosts, steps up to 2.3x "
         "apart): run python3 bench/deepspeed/host_probe.py on yours and give its figure as " + host_op_input;
}

}  // namespace zeroplan
