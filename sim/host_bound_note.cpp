#include "sim/host_bound_note.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace zeroplan {

namespace {

// Plans whose timeline keeps the host_python lane busy for a third of the step or more, each once (recommend ranks
// one plan at several batches and GPU counts), and the smallest and largest share among them.
struct BoundPlans {
  std::vector<std::string> labels;
  double smallest = 1.0, largest = 0.0;

  void add(const PlanChoice& choice, double share) {
    smallest = std::min(smallest, share);
    largest = std::max(largest, share);
    const std::string label = choice.label();
    if (std::find(labels.begin(), labels.end(), label) == labels.end()) labels.push_back(label);
  }
  std::string busy() const {
    std::string plans;
    for (const std::string& label : labels) plans += (plans.empty() ? "" : ", ") + label;
    char share[32];
    if (std::lround(100.0 * smallest) == std::lround(100.0 * largest))
      std::snprintf(share, sizeof share, "%.0f%%", 100.0 * largest);
    else
      std::snprintf(share, sizeof share, "%.0f-%.0f%%", 100.0 * smallest, 100.0 * largest);
    return "DeepSpeed's Python is busy for " + std::string(share) + " of the step of " + plans;
  }
};

// Stage 3's plans: which host their per-call costs are timed for, and how to time them for another.
std::string stage3_note(const ClusterDescription& cluster, const TrainingConfig& training, const BoundPlans& stage3,
                        const std::string& host_op_input) {
  std::string note = "host-bound: " + stage3.busy() + ", which is timed for ";
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

}  // namespace

std::vector<std::string> host_bound_notes(const ClusterDescription& cluster, const TrainingConfig& training,
                                          const std::vector<PlanChoice>& choices,
                                          const std::vector<const StepSimulation*>& steps,
                                          const std::string& host_op_input) {
  if (training.engine != TrainingEngine::deepspeed) return {};
  BoundPlans stage3, below;
  for (std::size_t i = 0; i < choices.size() && i < steps.size(); ++i) {
    if (!steps[i] || !(steps[i]->step_seconds > 0.0)) continue;
    const double share =
        steps[i]->busy_seconds[static_cast<std::size_t>(Resource::host_python)] / steps[i]->step_seconds;
    if (!(share >= 1.0 / 3.0)) continue;
    if (choices[i].stage == 3) {
      stage3.add(choices[i], share);
      continue;
    }
    // Below stage 3 the host's Python mostly runs beside the GPU (GPT-2 1.5B's stage-2 hooks: 63% of the step, all
    // of it under the backward's kernels): a plan is bound by it where the GPU also waits on the host for a third of
    // the step.
    if (steps[i]->offload_wait_seconds / steps[i]->step_seconds >= 1.0 / 3.0) below.add(choices[i], share);
  }
  // Stages 0-2: their host costs (the per-tensor loops at the accumulation boundary, the gradient hooks, eager
  // dispatch per module) are the cluster's own and the host input does not scale them: on 2026-11-27 they did not
  // follow the probe (bench/deepspeed/results-pending/README.md, "A probe of the host's speed"). What the user should
  // know is how far machines of one kind spread on such a step: ResNet-101 fp16 stage 0 (micro-batch 128, one GPU,
  // the loss scale settled or never overflowing) took 0.087, 0.094, 0.114, 0.145 and 0.199 s on five nvidia-h100-x1
  // machines (bench/deepspeed/results*/ resnet101_fp16_1gpu_*), and two of them, minutes apart, ran the same
  // configurations up to 1.48x apart (results-pending/README.md, "The loss scale settled").
  std::vector<std::string> notes;
  if (!stage3.labels.empty()) notes.push_back(stage3_note(cluster, training, stage3, host_op_input));
  if (!below.labels.empty())
    notes.push_back("host-bound: " + below.busy() + ", timed at " + cluster.name + "'s own host costs, which " +
                    host_op_input + " does not scale: such steps differ from machine to machine (ResNet-101 stage 0 "
                    "measured 0.087-0.199 s on five H100 machines of one kind)");
  return notes;
}

}  // namespace zeroplan
