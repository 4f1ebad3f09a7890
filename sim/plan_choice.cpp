#include "sim/plan_choice.h"

#include "exec/exec_config.h"

namespace zeroplan {

namespace {
const char* offload_name(OffloadDevice device) {
  switch (device) {
    case OffloadDevice::none: return "none";
    case OffloadDevice::cpu: return "cpu";
    case OffloadDevice::nvme: return "nvme";
  }
  return "none";
}

bool passes(const PlanChoice& choice, const PlanChoiceFilter& filter) {
  if (filter.stage >= 0 && choice.stage != filter.stage) return false;
  if (filter.offload_optimizer_set && choice.offload_optimizer != filter.offload_optimizer) return false;
  if (filter.offload_param_set && choice.offload_param != filter.offload_param) return false;
  return true;
}
}  // namespace

std::string PlanChoice::label() const {
  std::string text = "stage " + std::to_string(stage);
  if (offload_optimizer != OffloadDevice::none) text += std::string(" + opt:") + offload_name(offload_optimizer);
  if (offload_param != OffloadDevice::none) text += std::string(" + param:") + offload_name(offload_param);
  return text;
}

std::vector<PlanChoice> enumerate_plan_choices(const PlanChoiceFilter& filter) {
  constexpr OffloadDevice kDevices[] = {OffloadDevice::none, OffloadDevice::cpu, OffloadDevice::nvme};
  std::vector<PlanChoice> all;
  all.push_back({0, OffloadDevice::none, OffloadDevice::none});
  // Stages 1 and 2 offload the optimizer to the CPU only: NVMe offload is ZeRO-Infinity, a stage-3 feature
  // (DeepSpeed rejects offload_optimizer.device nvme below stage 3).
  for (int stage : {1, 2})
    for (OffloadDevice optimizer : {OffloadDevice::none, OffloadDevice::cpu}) all.push_back({stage, optimizer, OffloadDevice::none});
  // Stage 3: every pair. DeepSpeed accepts offload_param without offload_optimizer (the 16-bit partition lives
  // on the host/NVMe, the fp32 master and optimizer states stay on the GPU, and the updated partition is copied
  // back after each step; runtime/zero/stage3.py), so all nine are plans.
  for (OffloadDevice optimizer : kDevices)
    for (OffloadDevice param : kDevices) all.push_back({3, optimizer, param});
  std::vector<PlanChoice> chosen;
  for (const PlanChoice& choice : all)
    if (passes(choice, filter)) chosen.push_back(choice);
  return chosen;
}

TrainingConfig apply_choice(const TrainingConfig& training, const PlanChoice& choice) {
  TrainingConfig applied = training;
  applied.zero.stage = choice.stage;
  applied.zero.offload_optimizer = choice.offload_optimizer;
  applied.zero.offload_param = choice.stage == 3 ? choice.offload_param : OffloadDevice::none;
  // overlap_comm nobody gave follows the engine's own default: DeepSpeed's is true at stage 3 only
  // (runtime/zero/config.py overlap_comm_valid); zeroplan's executor overlaps at every stage
  // (exec/exec_config.h ZeroSettings), and `zeroplan run` resolves it here too, so that `plan --engine zeroplan`
  // and the run's prediction count the same gradient bucket buffers (zero_buffer_layout.cpp: one more with it).
  if (!applied.zero.overlap_comm_given) {
    if (applied.engine == TrainingEngine::deepspeed) applied.zero.overlap_comm = choice.stage == 3;
    if (applied.engine == TrainingEngine::zeroplan) applied.zero.overlap_comm = exec::ZeroSettings{}.overlap_comm;
  }
  return applied;
}

}  // namespace zeroplan
