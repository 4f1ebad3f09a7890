#include "core/plan_inputs.h"

#include <cstdio>

#include "core/deepspeed_config.h"
#include "core/input_error.h"
#include "core/number_checks.h"

namespace zeroplan {

namespace {

// Where a stage or offload came from, so that a contradiction names the flag or the DeepSpeed config's field.
struct Origin {
  std::string source;
  std::string field;
};

// The given values onto the training configuration. Applied before the DeepSpeed config (its "auto" entries
// resolve to them) and after it (they win over what it sets).
void apply_given(const PlanInputs& in, TrainingConfig& training) {
  if (in.micro_batch) training.micro_batch = *in.micro_batch;
  if (in.seq) training.seq_len = *in.seq;
  if (in.grad_accum) training.grad_accum = *in.grad_accum;
  if (in.precision) training.precision = *in.precision;
  if (in.optimizer) training.optimizer = *in.optimizer;
  if (in.checkpointing) training.checkpointing = *in.checkpointing;
}

// A note for each value the DeepSpeed config set that a given value replaces, so the config's own notes
// (derived batch sizes) are not read as the plan's.
void note_replaced(const PlanInputs& in, const PlanInputNames& names, const TrainingConfig& from_config,
                   const std::string& config, TrainingConfig& training) {
  const auto replaced = [&](const std::string& name, const std::string& given, const std::string& configured) {
    training.notes.push_back(name + " " + given + " replaces " + configured + " from " + config);
  };
  if (in.micro_batch && *in.micro_batch != from_config.micro_batch) {
    replaced(names.micro_batch, std::to_string(*in.micro_batch),
             "micro-batch " + std::to_string(from_config.micro_batch));
  }
  if (in.grad_accum && *in.grad_accum != from_config.grad_accum) {
    replaced(names.grad_accum, std::to_string(*in.grad_accum),
             "gradient accumulation " + std::to_string(from_config.grad_accum));
  }
  if (in.precision && *in.precision != from_config.precision) {
    replaced("precision", to_string(*in.precision), "precision " + to_string(from_config.precision));
  }
  if (in.optimizer && *in.optimizer != from_config.optimizer) {
    replaced("optimizer", to_string(*in.optimizer), "optimizer " + to_string(from_config.optimizer));
  }
}

bool optimizer_offload_allowed(int stage, OffloadDevice device) {
  if (device == OffloadDevice::none) return true;
  if (stage == 0) return false;
  return device == OffloadDevice::cpu || stage == 3;  // NVMe is ZeRO-Infinity, stage 3 only
}

}  // namespace

// The probe times one small launch: microseconds, not seconds or nanoseconds, on any machine that runs CUDA.
void require_host_op_seconds(double seconds, const std::string& source, const std::string& name) {
  if (seconds >= kMinHostOpSeconds && seconds <= kMaxHostOpSeconds) return;
  char given[32];
  std::snprintf(given, sizeof given, "%g", seconds);
  throw InputError(source, name,
                   std::string("is ") + given + " s; expected seconds per eager operation between 1e-7 and 1e-3 "
                   "(bench/deepspeed/host_probe.py prints it; about 7e-6 on an H200 host)");
}

ResolvedPlanInputs resolve_plan_inputs(const PlanInputs& in, const PlanInputNames& names) {
  const std::string& source = names.source;
  // Sizes first: an absurd value is refused before any file is read or anything is sized from it.
  if (in.gpus) require_count_at_most(*in.gpus, kMaxGpus, source, names.gpus, kMaxSizeWhy);
  if (in.micro_batch) require_count_at_most(*in.micro_batch, kMaxMicroBatch, source, names.micro_batch, kMaxSizeWhy);
  if (in.seq) require_count_at_most(*in.seq, kMaxSeqLen, source, names.seq, kMaxSizeWhy);
  if (in.grad_accum) {
    require_count_at_most(*in.grad_accum, kMaxGradAccum, source, names.grad_accum, kMaxGradAccumWhy);
  }
  if (in.stage && *in.stage != kAllStages && (*in.stage < 0 || *in.stage > 3)) {
    throw InputError(source, names.stage,
                     "unknown ZeRO stage " + std::to_string(*in.stage) + ": expected 0, 1, 2, 3 or all");
  }
  if (in.host_op_seconds) require_host_op_seconds(*in.host_op_seconds, source, names.host_op_seconds);
  if (in.model.empty()) throw InputError(source, names.model, "is required: a bundled name or a file");

  ResolvedPlanInputs out;
  out.model = load_model(in.model);
  out.cluster = load_cluster(in.cluster);
  if (in.gpus) out.cluster = with_gpu_count(out.cluster, *in.gpus);
  const int world_size = out.cluster.total_gpus();

  TrainingConfig& training = out.training;
  if (out.model.transformer) {
    training.seq_len = out.model.transformer->max_seq;
  } else {
    training.seq_len = 1;  // generic layer-list models count samples, not tokens
    if (in.seq) {
      throw InputError(source, names.seq,
                       "model \"" + out.model.name +
                           "\" is a layer list: it counts samples, not tokens, and has no sequence length");
    }
  }
  if (in.seq) check_sequence_length(out.model, *in.seq, source, names.seq);

  apply_given(in, training);
  if (in.ds_config) {
    apply_deepspeed_config(*in.ds_config, out.model, world_size, training);
    note_replaced(in, names, training, *in.ds_config, training);
    apply_given(in, training);
  }
  if (out.model.transformer && !in.seq) {
    training.notes.insert(training.notes.begin(), "sequence length " + std::to_string(training.seq_len) +
                                                      " (the model's maximum; " + names.seq + " sets another)");
  }
  if (in.engine) use_engine(training, *in.engine);
  // A Hugging Face config.json is built by transformers in the script people write (from_config, or from_pretrained
  // of the checkpoint the config belongs to); a zeroplan description by the harness's own model.
  training.model_code = in.model_code.value_or(out.model.hf_config ? ModelCode::transformers : ModelCode::harness);
  if (training.engine == TrainingEngine::deepspeed && training.model_code == ModelCode::transformers && !in.model_code) {
    // sim/activation_memory.cpp counts transformers' own saved set for the Llama family (RMSNorm, SwiGLU); other
    // families' modules are planned with the harness's list.
    const bool llama_like = out.model.transformer && out.model.transformer->norm == NormKind::rms_norm &&
                            out.model.transformer->activation == ActivationKind::swiglu;
    training.notes.push_back(llama_like ? "model code transformers: a Hugging Face config.json, built by transformers' "
                                          "modules (--model-code harness for the harness's own model)"
                                        : "model code transformers: a Hugging Face config.json; this family's modules "
                                          "are planned with the harness's saved activations (only the Llama family's "
                                          "own are modelled)");
  }
  // zeroplan's executor implements no dropout: its plan is made without, as `zeroplan run` makes it
  // (run/training_run.cpp), so that the two show the same figures.
  if (in.engine == TrainingEngine::zeroplan && out.model.transformer && out.model.transformer->dropout > 0) {
    training.notes.push_back("engine zeroplan: the model's dropout " + std::to_string(out.model.transformer->dropout) +
                             " is not implemented by the executor; the plan uses dropout 0, as zeroplan run does");
    out.model.transformer->dropout = 0;
  }
  require_tokens_per_micro_step(training.micro_batch, training.seq_len,
                                in.micro_batch || in.seq ? source : in.ds_config.value_or(source),
                                names.micro_batch + " * " + names.seq);

  // The comparison narrowed to the stage and offloads asked for: a DeepSpeed config asks for its own (as if they
  // were given); given values override it, and kAllStages brings the full comparison back.
  PlanChoiceFilter& filter = out.filter;
  const std::string config = in.ds_config.value_or("");
  Origin stage_origin{config, "zero_optimization.stage"};
  Origin optimizer_origin{config, "zero_optimization.offload_optimizer.device"};
  Origin param_origin{config, "zero_optimization.offload_param.device"};
  if (in.ds_config) {
    filter.stage = training.zero.stage;
    filter.offload_optimizer_set = true;
    filter.offload_optimizer = training.zero.offload_optimizer;
    filter.offload_param_set = true;
    filter.offload_param = training.zero.offload_param;
  }
  if (in.stage && *in.stage == kAllStages) {
    filter = PlanChoiceFilter{};
  } else if (in.stage) {
    // A stage without offloads means no offload, as in DeepSpeed; a DeepSpeed config's offloads stay where the
    // stage allows them.
    filter.stage = *in.stage;
    training.zero.stage = *in.stage;
    stage_origin = {source, names.stage};
    OffloadDevice optimizer = in.ds_config ? training.zero.offload_optimizer : OffloadDevice::none;
    OffloadDevice param = in.ds_config ? training.zero.offload_param : OffloadDevice::none;
    if (!in.offload_optimizer && !optimizer_offload_allowed(*in.stage, optimizer)) {
      training.notes.push_back("offload_optimizer " + to_string(optimizer) + " from " + config +
                               " does not apply at stage " + std::to_string(*in.stage) + ": no optimizer offload");
      optimizer = OffloadDevice::none;
    }
    if (!in.offload_param && param != OffloadDevice::none && *in.stage != 3) {
      training.notes.push_back("offload_param " + to_string(param) + " from " + config + " needs stage 3 (stage " +
                               std::to_string(*in.stage) + " asked for): no parameter offload");
      param = OffloadDevice::none;
    }
    filter.offload_optimizer_set = true;
    filter.offload_optimizer = optimizer;
    filter.offload_param_set = true;
    filter.offload_param = param;
    training.zero.offload_optimizer = optimizer;
    training.zero.offload_param = param;
  }
  if (in.offload_optimizer) {
    filter.offload_optimizer_set = true;
    filter.offload_optimizer = *in.offload_optimizer;
    training.zero.offload_optimizer = *in.offload_optimizer;
    optimizer_origin = {source, names.offload_optimizer};
  }
  if (in.offload_param) {
    filter.offload_param_set = true;
    filter.offload_param = *in.offload_param;
    training.zero.offload_param = *in.offload_param;
    param_origin = {source, names.offload_param};
  }
  if (filter.offload_param_set && filter.offload_param != OffloadDevice::none) {
    if (filter.stage >= 0 && filter.stage < 3) {
      throw InputError(param_origin.source, param_origin.field,
                       "parameter offload needs ZeRO stage 3 (stage " + std::to_string(filter.stage) + " asked for" +
                           (stage_origin.source == param_origin.source ? "" : " by " + stage_origin.field) + ")");
    }
    if (filter.stage < 0) filter.stage = 3;
  }
  if (filter.offload_optimizer_set && filter.offload_optimizer == OffloadDevice::nvme && filter.stage >= 0 &&
      filter.stage < 3) {
    throw InputError(optimizer_origin.source, optimizer_origin.field,
                     "NVMe optimizer offload (ZeRO-Infinity) needs ZeRO stage 3 (stage " +
                         std::to_string(filter.stage) + " asked for); stages 1 and 2 offload to cpu");
  }
  if (filter.offload_optimizer_set && filter.offload_optimizer != OffloadDevice::none && filter.stage == 0) {
    throw InputError(optimizer_origin.source, optimizer_origin.field,
                     "optimizer offload needs ZeRO stage 1, 2 or 3 (stage 0 asked for)");
  }
  if (in.host_op_seconds && training.engine != TrainingEngine::deepspeed) {
    training.notes.push_back(names.host_op_seconds + " ignored: it scales DeepSpeed's host costs, and the engine "
                             "planned is " + to_string(training.engine) + "'s, which has none");
  } else if (in.host_op_seconds) {
    const bool several = out.cluster.total_gpus() > 1;
    const std::string field = out.cluster.cost_host_field();
    const double reference = out.cluster.cost_host_eager_op_seconds();
    if (!(reference > 0.0)) {
      throw InputError(source, names.host_op_seconds,
                       "cluster " + out.cluster.name + " gives no " + field + " (the host its DeepSpeed costs hold on " +
                           (several ? "at more than one rank" : "at one rank") +
                           ") to scale from; expected a cluster description that has it");
    }
    training.host_eager_op_seconds = *in.host_op_seconds;
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.2f", *in.host_op_seconds / reference);
    training.notes.push_back(std::string("DeepSpeed's stage-3 per-call host costs x ") + ratio + " (" +
                             names.host_op_seconds + " against the cluster's " + field + ")");
  }
  return out;
}

}  // namespace zeroplan
