#include "core/training_config.h"

#include <nlohmann/json.hpp>

#include "core/input_error.h"

namespace zeroplan {

std::string to_string(Precision precision) {
  switch (precision) {
    case Precision::fp32: return "fp32";
    case Precision::fp16: return "fp16";
    case Precision::bf16: return "bf16";
  }
  return "unknown";
}

std::string to_string(OptimizerKind optimizer) {
  switch (optimizer) {
    case OptimizerKind::adamw: return "adamw";
    case OptimizerKind::sgd_momentum: return "sgd_momentum";
    case OptimizerKind::adam_8bit: return "adam_8bit";
  }
  return "unknown";
}

std::string to_string(OffloadDevice device) {
  switch (device) {
    case OffloadDevice::none: return "none";
    case OffloadDevice::cpu: return "cpu";
    case OffloadDevice::nvme: return "nvme";
  }
  return "unknown";
}

std::string to_string(Checkpointing checkpointing) {
  switch (checkpointing) {
    case Checkpointing::none: return "none";
    case Checkpointing::selective: return "selective";
    case Checkpointing::full: return "full";
  }
  return "unknown";
}

std::string to_string(TrainingEngine engine) {
  switch (engine) {
    case TrainingEngine::deepspeed: return "deepspeed";
    case TrainingEngine::zeroplan: return "zeroplan";
    case TrainingEngine::ideal: return "ideal";
  }
  return "unknown";
}

std::string to_string(ModelCode code) {
  switch (code) {
    case ModelCode::harness: return "harness";
    case ModelCode::transformers: return "transformers";
  }
  return "unknown";
}

std::string to_string(AdamImplementation implementation) {
  switch (implementation) {
    case AdamImplementation::deepspeed_fused: return "deepspeed_fused_adam";
    case AdamImplementation::torch_foreach: return "torch_adamw_foreach";
    case AdamImplementation::torch_fused: return "torch_adamw_fused";
  }
  return "unknown";
}

std::string to_string(BaseQuantization quantization) {
  switch (quantization) {
    case BaseQuantization::none: return "none";
    case BaseQuantization::nf4: return "nf4";
    case BaseQuantization::int8: return "int8";
  }
  return "unknown";
}

namespace {
template <typename Enum>
Enum parse_named(const std::string& text, const std::string& source, const std::string& field,
                 std::initializer_list<Enum> values) {
  std::string expected;
  for (const Enum value : values) {
    if (to_string(value) == text) return value;
    expected += (expected.empty() ? "" : ", ") + to_string(value);
  }
  throw InputError(source, field, "unknown value \"" + text + "\"; expected one of " + expected);
}
}  // namespace

Precision parse_precision(const std::string& text, const std::string& source, const std::string& field) {
  return parse_named(text, source, field, {Precision::fp32, Precision::fp16, Precision::bf16});
}

OptimizerKind parse_optimizer(const std::string& text, const std::string& source, const std::string& field) {
  // The names users know the 8-bit AdamW by: the CLI's help ("adam8bit") and Hugging Face TrainingArguments' optim
  // "paged_adamw_8bit", QLoRA's choice (bitsandbytes PagedAdamW8bit: the same block-wise 8-bit states, allocated in
  // CUDA unified memory so that they page to the host under memory pressure instead of failing; arXiv 2305.14314
  // sec. 3 "Paged Optimizers"). The planner holds them on the device, as they are while they fit.
  if (text == "adam8bit" || text == "adamw_8bit" || text == "paged_adamw_8bit") return OptimizerKind::adam_8bit;
  return parse_named(text, source, field, {OptimizerKind::adamw, OptimizerKind::sgd_momentum, OptimizerKind::adam_8bit});
}

OffloadDevice parse_offload_device(const std::string& text, const std::string& source, const std::string& field) {
  return parse_named(text, source, field, {OffloadDevice::none, OffloadDevice::cpu, OffloadDevice::nvme});
}

Checkpointing parse_checkpointing(const std::string& text, const std::string& source, const std::string& field) {
  return parse_named(text, source, field, {Checkpointing::none, Checkpointing::selective, Checkpointing::full});
}

TrainingEngine parse_engine(const std::string& text, const std::string& source, const std::string& field) {
  return parse_named(text, source, field, {TrainingEngine::deepspeed, TrainingEngine::zeroplan, TrainingEngine::ideal});
}

ModelCode parse_model_code(const std::string& text, const std::string& source, const std::string& field) {
  return parse_named(text, source, field, {ModelCode::harness, ModelCode::transformers});
}

void use_engine(TrainingConfig& training, TrainingEngine engine) {
  training.engine = engine;
  if (engine != TrainingEngine::zeroplan) return;
  training.fused_attention = true;
  training.fused_cross_entropy = true;
  training.fp32_loss = false;
  const bool fp32_accumulation = training.precision != Precision::fp32 && training.grad_accum_dtype == Precision::fp32;
  training.notes.push_back(std::string("engine zeroplan: ") +
                           (fp32_accumulation ? "fp32 gradient accumulation (data_types.grad_accum_dtype)"
                                              : "16-bit gradients only") +
                           ", in-place reduction, fused attention and fused softmax cross-entropy, exact-size "
                           "allocations (exec/)");
}

int precision_bytes(Precision precision) { return precision == Precision::fp32 ? 4 : 2; }

int optimizer_state_bytes_per_param(OptimizerKind optimizer) {
  switch (optimizer) {
    case OptimizerKind::adamw: return 8;         // fp32 momentum + variance (ZeRO paper: K = 12 with the master)
    case OptimizerKind::sgd_momentum: return 4;  // fp32 momentum buffer
    case OptimizerKind::adam_8bit: return 2;     // two 1-byte states (Dettmers et al. 2021, arXiv 2110.02861)
  }
  return 0;
}

nlohmann::json training_to_json(const TrainingConfig& training) {
  const ZeroConfig& zero = training.zero;
  nlohmann::json j = {
      {"micro_batch", training.micro_batch},
      {"seq_len", training.seq_len},
      {"grad_accum", training.grad_accum},
      {"precision", to_string(training.precision)},
      {"optimizer", to_string(training.optimizer)},
      {"checkpointing", to_string(training.checkpointing)},
      {"engine", to_string(training.engine)},
      {"partition_activations", training.partition_activations},
      {"cpu_checkpointing", training.cpu_checkpointing},
      {"fused_attention", training.fused_attention},
      {"fused_cross_entropy", training.fused_cross_entropy},
      {"deterministic", training.deterministic},
      {"fp32_loss", training.fp32_loss},
      {"gradient_clipping", training.gradient_clipping},
      {"grad_accum_dtype", to_string(training.grad_accum_dtype.value_or(training.precision))},
      {"communication_dtype", to_string(training.communication_dtype.value_or(training.precision))},
      {"adam_implementation", to_string(training.adam_implementation)},
      {"cpu_threads_per_rank", training.cpu_threads_per_rank},
      {"loss_scale",
       {{"initial_scale_power", training.loss_scale.initial_scale_power},
        {"loss_scale_window", training.loss_scale.loss_scale_window},
        {"hysteresis", training.loss_scale.hysteresis},
        {"consecutive_hysteresis", training.loss_scale.consecutive_hysteresis},
        {"min_loss_scale", training.loss_scale.min_loss_scale},
        {"static_loss_scale", training.loss_scale.static_loss_scale}}},
      {"lora",
       {{"enabled", training.lora.enabled},
        {"rank", training.lora.rank},
        {"alpha", training.lora.alpha},
        {"targets", training.lora.targets},
        {"quantize_base", to_string(training.lora.quantize_base)}}},
      {"learning_rate", training.learning_rate},
      {"weight_decay", training.weight_decay},
      {"adam_betas", {training.adam_beta1, training.adam_beta2}},
      {"adam_epsilon", training.adam_epsilon},
      {"zero",
       {{"stage", zero.stage},
        {"offload_optimizer", to_string(zero.offload_optimizer)},
        {"offload_param", to_string(zero.offload_param)},
        {"overlap_comm", zero.overlap_comm},
        {"use_multi_rank_bucket_allreduce", zero.use_multi_rank_bucket_allreduce},
        {"reduce_scatter", zero.reduce_scatter},
        {"contiguous_gradients", zero.contiguous_gradients},
        {"reduce_bucket_size", zero.reduce_bucket_size},
        {"allgather_bucket_size", zero.allgather_bucket_size},
        {"prefetch_bucket_size", zero.prefetch_bucket_size},
        {"max_live_parameters", zero.max_live_parameters},
        {"max_reuse_distance", zero.max_reuse_distance},
        {"param_persistence_threshold", zero.param_persistence_threshold},
        {"sub_group_size", zero.sub_group_size},
        {"zero_init", zero.zero_init},
        {"pin_memory", zero.pin_memory},
        {"param_buffer_count", zero.param_buffer_count},
        {"param_buffer_size", zero.param_buffer_size},
        {"optimizer_buffer_count", zero.optimizer_buffer_count},
        {"nvme_path", zero.nvme_path}}},
      {"notes", training.notes},
      {"warnings", training.warnings},
  };
  // The LoRA settings only where LoRA is on: a full fine-tune's record (and the run reports written before LoRA
  // existed, which the GUI matches field by field) has none.
  if (!training.lora.enabled) j.erase("lora");
  // Whose modules build the model only where it shapes the plan, the DeepSpeed engine's (a run's record is the
  // zeroplan engine's, and the run reports written before it existed have none).
  if (training.engine == TrainingEngine::deepspeed) j["model_code"] = to_string(training.model_code);
  return j;
}

}  // namespace zeroplan
