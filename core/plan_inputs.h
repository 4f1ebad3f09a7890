// The inputs every front end shares (the CLI's common flags, the GUI's input panel) and their one resolution into
// the shared descriptions. Precedence: the model's defaults < the DeepSpeed config < the values given here. The
// values given here are known before the DeepSpeed config is read, so its "auto" entries resolve to them and every
// note describes the run that is planned (issue 9: no note may contradict a flag beside it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/cluster_description.h"
#include "core/model_description.h"
#include "core/training_config.h"

namespace zeroplan {

inline constexpr int kAllStages = -1;  // PlanInputs::stage: compare every stage ("--stage all")

// What the user gave; an unset optional means "not given".
struct PlanInputs {
  std::string model;                             // bundled name, model description file or HF config.json
  std::string cluster = kDefaultClusterName;     // bundled name or cluster description file
  std::optional<int> gpus;                       // GPUs of the cluster's kind (data-parallel degree)
  std::optional<std::string> ds_config;          // DeepSpeed config file
  std::optional<std::int64_t> micro_batch;       // samples per GPU per micro-step
  std::optional<std::int64_t> seq;               // tokens per sample
  std::optional<std::int64_t> grad_accum;        // micro-steps per optimizer step
  std::optional<Precision> precision;
  std::optional<OptimizerKind> optimizer;
  std::optional<Checkpointing> checkpointing;
  std::optional<TrainingEngine> engine;
  std::optional<ModelCode> model_code;           // default: transformers for a Hugging Face config.json
  std::optional<int> stage;                      // 0..3, or kAllStages
  std::optional<OffloadDevice> offload_optimizer;
  std::optional<OffloadDevice> offload_param;
  // The training host's seconds per small eager CUDA operation (bench/deepspeed/host_probe.py): DeepSpeed's
  // stage-3 per-call host costs are scaled from the host they hold on at the plan's GPU count
  // (ClusterDescription::cost_host_eager_op_seconds, sim/simulator.h host_speed_factor).
  std::optional<double> host_op_seconds;

  bool operator==(const PlanInputs&) const = default;
};

// How errors name each input: the CLI's flags (the defaults) or the GUI's labels.
struct PlanInputNames {
  std::string source = "command line";
  std::string model = "--model";
  std::string gpus = "--gpus";
  std::string micro_batch = "--micro-batch";
  std::string seq = "--seq";
  std::string grad_accum = "--grad-accum";
  std::string stage = "--stage";
  std::string offload_optimizer = "--offload-optimizer";
  std::string offload_param = "--offload-param";
  std::string host_op_seconds = "--host-op-seconds";
};

// Which plan choices the comparison is narrowed to (sim/plan_choice.h enumerates them): -1 / unset: any.
struct PlanChoiceFilter {
  int stage = -1;
  bool offload_optimizer_set = false;
  OffloadDevice offload_optimizer = OffloadDevice::none;
  bool offload_param_set = false;
  OffloadDevice offload_param = OffloadDevice::none;
};

struct ResolvedPlanInputs {
  ModelDescription model;
  ClusterDescription cluster;  // resized to the GPUs asked for
  TrainingConfig training;     // defaults < DeepSpeed config < inputs; stage and offloads of the plan asked for
  PlanChoiceFilter filter;     // the stage and offloads asked for (flags or the DeepSpeed config)
};

// Throws InputError naming the input (names) or the file at fault; nothing is half-resolved.
// Stage and offloads: a stage given without offloads means no offload, as in DeepSpeed (a DeepSpeed config's
// offloads stay where that stage allows them); an offload given without a stage narrows to the stages that allow
// it; none of them given (and no DeepSpeed config) compares every plan.
ResolvedPlanInputs resolve_plan_inputs(const PlanInputs& inputs, const PlanInputNames& names = {});

// The host speeds a probe can read, seconds per eager operation: a CUDA launch takes microseconds on any machine
// that runs one, so a figure outside these is in the wrong unit.
inline constexpr double kMinHostOpSeconds = 1e-7;
inline constexpr double kMaxHostOpSeconds = 1e-3;
// Throws InputError naming `name` unless `seconds` is within them; resolve_plan_inputs checks
// PlanInputs::host_op_seconds with it.
void require_host_op_seconds(double seconds, const std::string& source, const std::string& name);

}  // namespace zeroplan
