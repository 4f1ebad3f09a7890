#include "core/deepspeed_config.h"

#include <algorithm>
#include <cctype>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/input_error.h"
#include "core/json_input.h"
#include "core/number_checks.h"

namespace zeroplan {

namespace {

// Keys DeepSpeed knows (deepspeed/runtime/config.py and the section models) that zeroplan reads or that do
// not change memory or traffic; anything else at these levels gets a warning.
const std::vector<std::string> kTopLevelKeys = {
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "steps_per_print",
    "wall_clock_breakdown", "dump_state", "fp16", "bf16", "bfloat16", "amp", "optimizer", "scheduler",
    "gradient_clipping", "prescale_gradients", "gradient_predivide_factor", "sparse_gradients", "zero_optimization",
    "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "activation_checkpointing", "flops_profiler",
    "tensorboard", "wandb", "csv_monitor", "comet", "comms_logger", "communication_data_type",
    "seq_parallel_communication_data_type", "data_types", "memory_breakdown", "aio", "elasticity", "pipeline",
    "checkpoint", "autotuning", "compression_training", "data_efficiency", "curriculum_learning", "sparse_attention",
    "timers", "torch_autocast", "load_universal_checkpoint", "use_node_local_storage", "disable_allgather",
    "eigenvalue", "progressive_layer_drop", "quantize_training", "nebula", "hybrid_engine", "compile",
    "weight_quantization", "graph_harvesting", "dataloader_drop_last", "use_data_before_expert_parallelism",
    "monitor_config", "gradient_accumulation_dtype"};

const std::vector<std::string> kFp16Keys = {"enabled", "auto_cast", "loss_scale", "initial_scale_power",
                                            "loss_scale_window", "hysteresis", "consecutive_hysteresis",
                                            "min_loss_scale", "fp16_master_weights_and_grads"};
const std::vector<std::string> kBf16Keys = {"enabled", "immediate_grad_update", "check_grad_overflow",
                                            "bf16_master_weights_and_grads", "bf16_optimizer_states"};
const std::vector<std::string> kOptimizerKeys = {"type", "params", "legacy_fusion"};
const std::vector<std::string> kOptimizerParamKeys = {
    "lr", "betas", "eps", "weight_decay", "momentum", "dampening", "nesterov", "adam_w_mode", "bias_correction",
    "amsgrad", "torch_adam", "fused", "foreach", "freeze_step", "cuda_aware", "comm_backend_name", "max_coeff",
    "min_coeff", "var_freeze_step", "var_update_scaler", "local_step_scaler", "local_step_clipper", "initial_accumulator_value",
    "lr_decay", "maximize", "capturable", "differentiable", "set_grad_none"};
const std::vector<std::string> kZeroKeys = {
    "stage", "offload_optimizer", "offload_param", "cpu_offload", "cpu_offload_params", "cpu_offload_use_pin_memory",
    "overlap_comm", "contiguous_gradients", "reduce_bucket_size", "allgather_bucket_size", "allgather_partitions",
    "reduce_scatter", "stage3_prefetch_bucket_size", "prefetch_bucket_size", "stage3_param_persistence_threshold",
    "param_persistence_threshold", "stage3_model_persistence_threshold", "model_persistence_threshold",
    "stage3_max_live_parameters", "max_live_parameters", "stage3_max_reuse_distance", "max_reuse_distance",
    "sub_group_size", "stage3_gather_16bit_weights_on_model_save", "stage3_gather_fp16_weights_on_model_save",
    "gather_16bit_weights_on_model_save", "round_robin_gradients", "elastic_checkpoint", "load_from_fp32_weights",
    "ignore_unused_parameters", "legacy_stage1", "zero_hpz_partition_size", "zero_quantized_weights",
    "zero_quantized_nontrainable_weights", "zero_quantized_gradients", "mics_shard_size",
    "mics_hierarchical_params_gather", "memory_efficient_linear", "pipeline_loading_checkpoint",
    "override_module_apply", "log_trace_cache_warnings", "use_multi_rank_bucket_allreduce", "zeropp_loco_param",
    "stage3_module_granularity_threshold", "module_granularity_threshold", "stage3_use_all_reduce_for_fetch_params",
    "use_all_reduce_for_fetch_params", "round_robin_gradients"};
const std::vector<std::string> kOffloadOptimizerKeys = {"device", "nvme_path", "buffer_count", "pin_memory",
                                                        "pipeline", "pipeline_read", "pipeline_write", "fast_init",
                                                        "ratio"};
const std::vector<std::string> kOffloadParamKeys = {"device", "nvme_path", "buffer_count", "buffer_size",
                                                    "max_in_cpu", "pin_memory"};
// deepspeed/runtime/swap_tensor/aio_config.py (and the GDS / io_uring fields of later releases).
const std::vector<std::string> kAioKeys = {"block_size", "queue_depth", "intra_op_parallelism", "thread_count",
                                           "single_submit", "overlap_events", "use_gds"};
const std::vector<std::string> kDataTypesKeys = {"grad_accum_dtype", "param_dtype", "buffer_dtype",
                                                 "keep_in_fp32_modules"};
const std::vector<std::string> kCheckpointingKeys = {"partition_activations", "cpu_checkpointing",
                                                     "contiguous_memory_optimization", "number_checkpoints",
                                                     "synchronize_checkpoint_boundary", "profile"};

std::string with_commas(std::int64_t value) {
  const std::string digits = std::to_string(value);
  std::string grouped;
  const std::size_t sign = (value < 0) ? 1 : 0;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > sign && (digits.size() - i) % 3 == 0) grouped.push_back(',');
    grouped.push_back(digits[i]);
  }
  return grouped;
}

bool is_auto(const nlohmann::json& value) { return value.is_string() && value.get<std::string>() == "auto"; }

// Context shared by the section readers.
struct Reader {
  const std::string& source;
  const ModelDescription& model;
  int world_size;
  TrainingConfig& training;

  void note(const std::string& text) const { training.notes.push_back(text); }
  void warn(const std::string& text) const { training.warnings.push_back(source + ": " + text); }

  void warn_unknown(const JsonFields& fields, const std::vector<std::string>& known, const std::string& why) const {
    for (const auto& key : fields.unknown_keys(known)) {
      warn("unknown DeepSpeed key '" + fields.field_path(key) + "' ignored" + why);
    }
  }

  // The model's hidden size for HF's "auto" bucket rules; a model without one cannot resolve them.
  std::int64_t hidden(const JsonFields& fields, const std::string& key) const {
    if (!model.transformer) {
      fields.fail(key, "\"auto\" needs the model's hidden size (the HF integration uses config.hidden_size); model \"" +
                           model.name + "\" has none: give a number");
    }
    return model.transformer->hidden;
  }
};

// An integer that may be written "auto": nullopt for "auto".
std::optional<std::int64_t> integer_or_auto(const JsonFields& fields, const std::string& key, bool allow_zero) {
  if (is_auto(fields.raw(key))) return std::nullopt;
  if (fields.raw(key).is_string()) {
    fields.fail(key, "expected an integer or \"auto\", got \"" + fields.raw(key).get<std::string>() + "\"");
  }
  return allow_zero ? fields.non_negative_integer(key) : fields.positive_integer(key);
}

std::optional<double> number_or_auto(const JsonFields& fields, const std::string& key) {
  if (is_auto(fields.raw(key))) return std::nullopt;
  if (fields.raw(key).is_string()) {
    fields.fail(key, "expected a number or \"auto\", got \"" + fields.raw(key).get<std::string>() + "\"");
  }
  return fields.non_negative_number(key);
}

// "enabled": true/false or "auto" (HF fills it from its own --fp16/--bf16 flags; here from the training's
// precision). DeepSpeed treats a section without "enabled" as disabled.
bool section_enabled(const Reader& reader, const JsonFields& section, Precision precision) {
  if (!section.has("enabled")) {
    reader.warn("'" + section.field_path("enabled") + "' not set: DeepSpeed treats the section as disabled");
    return false;
  }
  if (is_auto(section.raw("enabled"))) {
    const bool enabled = reader.training.precision == precision;
    reader.note(section.field_path("enabled") + " auto -> " + (enabled ? "true" : "false") +
                " (the training precision is " + to_string(reader.training.precision) + "; HF integration)");
    return enabled;
  }
  return section.boolean("enabled");
}

void read_batch_sizes(const Reader& reader, const JsonFields& top) {
  TrainingConfig& training = reader.training;
  const std::int64_t world = reader.world_size;
  std::optional<std::int64_t> total, micro, accum;
  bool total_auto = false;
  if (top.has("train_micro_batch_size_per_gpu")) {
    micro = integer_or_auto(top, "train_micro_batch_size_per_gpu", false);
    if (micro) require_count_at_most(*micro, kMaxMicroBatch, top.source(), "train_micro_batch_size_per_gpu", kMaxSizeWhy);
    if (!micro) {
      micro = training.micro_batch;
      reader.note("train_micro_batch_size_per_gpu auto -> " + with_commas(*micro) +
                  " (the training micro-batch, as HF's per_device_train_batch_size)");
    }
  }
  if (top.has("gradient_accumulation_steps")) {
    accum = integer_or_auto(top, "gradient_accumulation_steps", false);
    if (accum) require_count_at_most(*accum, kMaxGradAccum, top.source(), "gradient_accumulation_steps", kMaxGradAccumWhy);
    if (!accum) {
      accum = training.grad_accum;
      reader.note("gradient_accumulation_steps auto -> " + with_commas(*accum) +
                  " (the training gradient accumulation, as HF's gradient_accumulation_steps)");
    }
  }
  if (top.has("train_batch_size")) {
    total = integer_or_auto(top, "train_batch_size", false);
    if (!total) {
      total_auto = true;
      const std::int64_t m = micro.value_or(training.micro_batch);
      const std::int64_t a = accum.value_or(training.grad_accum);
      std::int64_t product = 0;
      if (__builtin_mul_overflow(m, a, &product) || __builtin_mul_overflow(product, world, &product)) {
        top.fail("train_batch_size", "absurd size: micro-batch * accumulation * world size overflows");
      }
      total = product;
      reader.note("train_batch_size auto -> " + with_commas(m) + " * " + with_commas(a) + " * " +
                  std::to_string(world) + " GPUs = " + with_commas(*total) + " (HF integration)");
    }
  }
  (void)total_auto;

  auto describe = [&]() {
    return "train_batch_size " + (total ? with_commas(*total) : std::string("(absent)")) +
           ", train_micro_batch_size_per_gpu " + (micro ? with_commas(*micro) : std::string("(absent)")) +
           ", gradient_accumulation_steps " + (accum ? with_commas(*accum) : std::string("(absent)")) +
           ", world size " + std::to_string(world);
  };
  // DeepSpeed's rule (runtime/config.py _configure_train_batch_size): train_batch_size = micro * accum * world;
  // any two determine the third.
  if (total && micro && accum) {
    std::int64_t product = 0;
    if (__builtin_mul_overflow(*micro, *accum, &product) || __builtin_mul_overflow(product, world, &product) ||
        product != *total) {
      top.fail("train_batch_size", "contradiction: " + describe() +
                                       "; expected train_batch_size == micro * accumulation * world = " +
                                       with_commas(*micro) + " * " + with_commas(*accum) + " * " +
                                       std::to_string(world));
    }
  } else if (total && micro) {
    if (*total % (*micro * world) != 0) {
      top.fail("train_batch_size", "contradiction: " + describe() +
                                       "; train_batch_size must be a multiple of micro-batch * world size");
    }
    accum = *total / (*micro * world);
    reader.note("gradient_accumulation_steps derived: " + with_commas(*total) + " / (" + with_commas(*micro) + " * " +
                std::to_string(world) + ") = " + with_commas(*accum) + " (DeepSpeed's rule)");
  } else if (total && accum) {
    if (*total % (*accum * world) != 0) {
      top.fail("train_batch_size", "contradiction: " + describe() +
                                       "; train_batch_size must be a multiple of accumulation * world size");
    }
    micro = *total / (*accum * world);
    reader.note("train_micro_batch_size_per_gpu derived: " + with_commas(*total) + " / (" + with_commas(*accum) +
                " * " + std::to_string(world) + ") = " + with_commas(*micro) + " (DeepSpeed's rule)");
  } else if (total) {
    if (*total % world != 0) {
      top.fail("train_batch_size", "contradiction: " + describe() + "; train_batch_size must be a multiple of the world size");
    }
    micro = *total / world;
    accum = 1;
    reader.note("train_micro_batch_size_per_gpu derived: " + with_commas(*total) + " / " + std::to_string(world) +
                " GPUs = " + with_commas(*micro) + ", gradient_accumulation_steps 1 (DeepSpeed's rule)");
  } else if (micro && !accum) {
    accum = 1;
    reader.note("gradient_accumulation_steps not set: 1 (DeepSpeed's default)");
  } else if (!micro) {
    reader.warn("neither train_batch_size nor train_micro_batch_size_per_gpu is set (DeepSpeed requires one); "
                "the micro-batch stays " + with_commas(training.micro_batch));
  }
  // Within the bounds every front end checks (core/number_checks.h), named by the config's own fields.
  if (micro) {
    require_count_at_most(*micro, kMaxMicroBatch, top.source(), top.field_path("train_micro_batch_size_per_gpu"),
                          kMaxSizeWhy);
  }
  if (accum) {
    require_count_at_most(*accum, kMaxGradAccum, top.source(), top.field_path("gradient_accumulation_steps"),
                          kMaxGradAccumWhy);
  }
  if (micro) training.micro_batch = *micro;
  if (accum) training.grad_accum = *accum;
}

// DeepSpeed's DtypeEnum spellings (runtime/config.py): data_types.grad_accum_dtype accepts every one of them;
// communication_data_type only fp32, fp16 and bf16 (get_communication_data_type, lower-cased).
std::optional<Precision> precision_named(std::string name, bool every_spelling) {
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  if (name == "fp32" || (every_spelling && (name == "float32" || name == "float" || name == "torch.float32")))
    return Precision::fp32;
  if (name == "fp16" || (every_spelling && (name == "float16" || name == "half" || name == "torch.float16")))
    return Precision::fp16;
  if (name == "bf16" || (every_spelling && (name == "bfloat16" || name == "torch.bfloat16"))) return Precision::bf16;
  return std::nullopt;
}

// communication_data_type and data_types.grad_accum_dtype, and DeepSpeed's refusal of what its engine cannot run:
// without ZeRO the engine wraps the optimizer in FP16_Optimizer / FP16_UnfusedOptimizer only when the gradients
// accumulate in the model's dtype, and raises NotImplementedError for any other mix
// (runtime/engine.py _do_optimizer_sanity_check).
void read_data_types(const Reader& reader, const JsonFields& top) {
  TrainingConfig& training = reader.training;
  if (top.has("communication_data_type") && !top.raw("communication_data_type").is_null()) {
    const auto dtype = precision_named(top.string("communication_data_type"), /*every_spelling=*/false);
    if (!dtype) top.fail("communication_data_type", "expected fp32, fp16 or bf16 (DeepSpeed's accepted values)");
    training.communication_dtype = *dtype;
  }
  if (top.has("data_types")) {
    const JsonFields section = top.object("data_types");
    reader.warn_unknown(section, kDataTypesKeys, "");
    if (section.has("grad_accum_dtype") && !section.raw("grad_accum_dtype").is_null()) {
      const auto dtype = precision_named(section.string("grad_accum_dtype"), /*every_spelling=*/true);
      if (!dtype) section.fail("grad_accum_dtype", "expected fp32, fp16 or bf16 (or DeepSpeed's other spellings)");
      training.grad_accum_dtype = *dtype;
    }
  }
  if (training.zero.stage == 0 && training.grad_accum_dtype && *training.grad_accum_dtype != training.precision) {
    throw InputError(reader.source, "data_types.grad_accum_dtype",
                     to_string(*training.grad_accum_dtype) + " gradient accumulation with a " +
                         to_string(training.precision) +
                         " model needs ZeRO stage 1-3: DeepSpeed 0.19.8 raises NotImplementedError for it at stage 0 "
                         "(engine.py _do_optimizer_sanity_check)");
  }
}

void read_precision(const Reader& reader, const JsonFields& top) {
  TrainingConfig& training = reader.training;
  bool fp16 = false;
  bool bf16 = false;
  std::string bf16_key = top.has("bf16") ? "bf16" : "bfloat16";
  if (top.has("fp16")) {
    const JsonFields section = top.object("fp16");
    reader.warn_unknown(section, kFp16Keys, "");
    fp16 = section_enabled(reader, section, Precision::fp16);
    if (fp16) {
      LossScaleConfig& scale = training.loss_scale;
      if (section.has("loss_scale")) scale.static_loss_scale = section.non_negative_number("loss_scale");
      if (section.has("initial_scale_power")) {
        const std::int64_t power = section.non_negative_integer("initial_scale_power");
        if (power > 126) section.fail("initial_scale_power", "absurd: 2^" + std::to_string(power) + " overflows fp32");
        scale.initial_scale_power = static_cast<double>(power);
      }
      scale.loss_scale_window = section.positive_integer_or("loss_scale_window", scale.loss_scale_window);
      scale.hysteresis = section.positive_integer_or("hysteresis", scale.hysteresis);
      scale.min_loss_scale = section.positive_number_or("min_loss_scale", scale.min_loss_scale);
      scale.consecutive_hysteresis = section.boolean_or("consecutive_hysteresis", scale.consecutive_hysteresis);
    }
  }
  if (top.has("bf16") || top.has("bfloat16")) {
    const JsonFields section = top.object(bf16_key);
    reader.warn_unknown(section, kBf16Keys, "");
    bf16 = section_enabled(reader, section, Precision::bf16);
  }
  if (fp16 && bf16) {
    top.fail(bf16_key + ".enabled", "contradiction: fp16.enabled and " + bf16_key +
                                        ".enabled are both true; expected at most one 16-bit precision");
  }
  if (top.has("amp")) reader.warn("'amp' (NVIDIA apex) is not modelled; the precision comes from fp16/bf16");
  const Precision chosen = fp16 ? Precision::fp16 : bf16 ? Precision::bf16 : Precision::fp32;
  if (!fp16 && !bf16) {
    reader.note("no fp16 or bf16 section enabled: DeepSpeed trains in fp32 (was " + to_string(training.precision) + ")");
  }
  training.precision = chosen;
}

void read_optimizer(const Reader& reader, const JsonFields& top) {
  TrainingConfig& training = reader.training;
  if (!top.has("optimizer")) {
    reader.note("no optimizer section: the client's optimizer is used (HF Trainer: AdamW); optimizer stays " +
                to_string(training.optimizer));
    return;
  }
  const JsonFields section = top.object("optimizer");
  reader.warn_unknown(section, kOptimizerKeys, "");
  const std::string type = section.string("type");
  std::string lower = type;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  // DeepSpeed lower-cases the type (runtime/engine.py _configure_basic_optimizer); other names are looked up in
  // torch.optim. Memory depends only on the per-parameter state.
  if (lower == "adam" || lower == "adamw" || lower == "fusedadam" || lower == "cpuadam" || lower == "deepspeedcpuadam") {
    training.optimizer = OptimizerKind::adamw;
  } else if (lower == "onebitadam" || lower == "zerooneadam" || lower == "lamb" || lower == "onebitlamb" ||
             lower == "muadam" || lower == "muadamw") {
    training.optimizer = OptimizerKind::adamw;
    reader.note("optimizer.type " + type + ": modelled as AdamW (two fp32 states per parameter)");
  } else if (lower == "sgd" || lower == "musgd") {
    training.optimizer = OptimizerKind::sgd_momentum;
  } else if (lower == "adagrad" || lower == "lion") {
    training.optimizer = OptimizerKind::sgd_momentum;
    reader.note("optimizer.type " + type + ": one fp32 state per parameter, modelled as SGD with momentum");
  } else {
    section.fail("type", "optimizer \"" + type +
                             "\" is not modelled; expected one of Adam, AdamW, SGD, Lamb, OneBitAdam, ZeroOneAdam, "
                             "OneBitLamb, Adagrad, Lion, MuAdam, MuAdamW, MuSGD");
  }
  if (!section.has("params")) return;
  const JsonFields params = section.object("params");
  reader.warn_unknown(params, kOptimizerParamKeys, "");
  auto number = [&](const std::string& key, double& target, const char* hf_name) {
    if (!params.has(key)) return;
    if (const auto value = number_or_auto(params, key)) {
      target = *value;
    } else {
      reader.note(params.field_path(key) + " auto -> " + nlohmann::json(target).dump() + " (the training " + hf_name +
                  ", HF integration)");
    }
  };
  // torch_adam: torch.optim.AdamW instead of DeepSpeed's FusedAdam, foreach unless "fused" is true
  // (engine.py get_optimizer_configuration).
  if (params.has("torch_adam") && params.boolean("torch_adam")) {
    const bool fused = params.has("fused") && params.raw("fused").is_boolean() && params.boolean("fused");
    training.adam_implementation = fused ? AdamImplementation::torch_fused : AdamImplementation::torch_foreach;
    reader.note("optimizer.params.torch_adam: torch.optim.AdamW (" + std::string(fused ? "fused" : "foreach") +
                "), not DeepSpeed's FusedAdam");
    // The same function returns torch's AdamW before it looks at zero_use_cpu_optimizer(), so ZeRO-Offload then
    // steps the host partition with torch.optim.AdamW on CPU tensors, not DeepSpeedCPUAdam. The planner times that
    // at the cluster's torch CPU AdamW rate where it gives one (sim/simulator.cpp cpu_optimizer_rate).
    if (!fused)
      reader.note("optimizer.params.torch_adam with ZeRO-Offload (the plans with the optimizer on cpu or nvme): "
                  "DeepSpeed steps the offloaded partition with torch.optim.AdamW on CPU tensors, not "
                  "DeepSpeedCPUAdam (engine.py get_optimizer_configuration), timed at the cluster's "
                  "host.torch_cpu_adamw_params_per_second where it has one (else at DeepSpeedCPUAdam's rate); on "
                  "nvidia-h200-x2 (GPT-2 1.5B, DeepSpeed 0.19.8) the torch path took 2.2-3.4 s per step against "
                  "0.86-1.30 s (bench/deepspeed/results-pending/README.md): drop torch_adam for offload");
  }
  number("lr", training.learning_rate, "learning rate");
  number("eps", training.adam_epsilon, "adam_epsilon");
  number("weight_decay", training.weight_decay, "weight decay");
  if (params.has("momentum")) params.non_negative_number("momentum");
  if (params.has("betas")) {
    const nlohmann::json& betas = params.raw("betas");
    if (is_auto(betas)) {
      reader.note(params.field_path("betas") + " auto -> [" + nlohmann::json(training.adam_beta1).dump() + ", " +
                  nlohmann::json(training.adam_beta2).dump() + "] (the training Adam betas, HF integration)");
    } else {
      if (!betas.is_array() || betas.size() != 2 || !betas[0].is_number() || !betas[1].is_number()) {
        params.fail("betas", "expected [beta1, beta2] or \"auto\", got " + betas.dump());
      }
      const double beta1 = betas[0].get<double>();
      const double beta2 = betas[1].get<double>();
      if (!(beta1 >= 0.0 && beta1 < 1.0 && beta2 >= 0.0 && beta2 < 1.0)) {
        params.fail("betas", "expected each beta in [0, 1), got " + betas.dump());
      }
      training.adam_beta1 = beta1;
      training.adam_beta2 = beta2;
    }
  }
}

OffloadDevice read_device(const JsonFields& section) {
  if (!section.has("device")) return OffloadDevice::none;  // DeepSpeed's default device is "none"
  const std::string device = section.one_of("device", {"none", "cpu", "nvme"});
  return parse_offload_device(device, section.source(), section.field_path("device"));
}

// NVMe offload swaps into a directory the config must name: DeepSpeed's offload configs default nvme_path to None
// and its swappers fail without one (runtime/swap_tensor), so zeroplan refuses the config as DeepSpeed would.
void read_nvme_path(const JsonFields& offload, OffloadDevice device, ZeroConfig& zero) {
  if (offload.has("nvme_path")) {
    zero.nvme_path = offload.string("nvme_path");
    if (zero.nvme_path.empty()) offload.fail("nvme_path", "is empty; expected the directory on the NVMe drive to swap to");
  } else if (device == OffloadDevice::nvme) {
    offload.fail("nvme_path",
                 "missing: device nvme needs the directory on the NVMe drive to swap to (DeepSpeed's own requirement: "
                 "it does not start NVMe offload without one), e.g. \"nvme_path\": \"/local_nvme\"");
  }
}

// The aio section: the NVMe swappers' request size, depth and submission (exec/offload/nvme_io.h). DeepSpeed's
// thread_count / intra_op_parallelism and single_submit shape its libaio threads; one io_uring thread does their
// work here, so they are read for their type only.
void read_aio(const Reader& reader, const JsonFields& top) {
  if (!top.has("aio")) return;
  const JsonFields aio = top.object("aio");
  reader.warn_unknown(aio, kAioKeys, "");
  ZeroConfig& zero = reader.training.zero;
  zero.aio_block_size = aio.positive_integer_or("block_size", zero.aio_block_size);
  if (zero.aio_block_size % 4096 != 0 || zero.aio_block_size > (std::int64_t{1} << 30))
    aio.fail("block_size", std::to_string(zero.aio_block_size) + " bytes; expected a multiple of 4096 (direct I/O) up "
                           "to 1 GiB");
  zero.aio_queue_depth = aio.positive_integer_or("queue_depth", zero.aio_queue_depth);
  if (zero.aio_queue_depth > 4096) aio.fail("queue_depth", std::to_string(zero.aio_queue_depth) + "; expected 1 to 4096");
  zero.aio_overlap_events = aio.boolean_or("overlap_events", zero.aio_overlap_events);
  if (aio.has("single_submit")) aio.boolean("single_submit");
  if (aio.has("use_gds")) aio.boolean("use_gds");
  if (aio.has("thread_count")) aio.positive_integer("thread_count");
  if (aio.has("intra_op_parallelism")) aio.positive_integer("intra_op_parallelism");
}

void read_zero(const Reader& reader, const JsonFields& top) {
  TrainingConfig& training = reader.training;
  ZeroConfig& zero = training.zero;
  if (!top.has("zero_optimization")) {
    zero.stage = 0;
    zero.offload_optimizer = OffloadDevice::none;
    zero.offload_param = OffloadDevice::none;
    zero.overlap_comm = false;
    reader.note("no zero_optimization section: ZeRO stage 0 (DeepSpeed's default)");
    return;
  }
  const JsonFields section = top.object("zero_optimization");
  reader.warn_unknown(section, kZeroKeys, " (DeepSpeed's own validation rejects unknown zero_optimization keys)");

  if (section.has("stage")) {
    if (is_auto(section.raw("stage"))) section.fail("stage", "\"auto\" is not resolved for the stage; expected 0, 1, 2 or 3");
    const std::int64_t stage = section.non_negative_integer("stage");
    if (stage > 3) section.fail("stage", "unknown ZeRO stage " + std::to_string(stage) + "; expected 0, 1, 2 or 3");
    zero.stage = static_cast<int>(stage);
  } else {
    zero.stage = 0;
    reader.note("zero_optimization.stage not set: 0 (DeepSpeed's default)");
  }

  zero.offload_optimizer = OffloadDevice::none;
  zero.offload_param = OffloadDevice::none;
  std::string param_device_field = section.field_path("offload_param.device");
  if (section.has("cpu_offload") && section.boolean("cpu_offload")) {
    zero.offload_optimizer = OffloadDevice::cpu;
    reader.note("zero_optimization.cpu_offload (deprecated) -> offload_optimizer.device cpu");
  }
  if (section.has("cpu_offload_params") && section.boolean("cpu_offload_params")) {
    zero.offload_param = OffloadDevice::cpu;
    param_device_field = section.field_path("cpu_offload_params");
    reader.note("zero_optimization.cpu_offload_params (deprecated) -> offload_param.device cpu");
  }
  if (section.has("cpu_offload_use_pin_memory")) zero.pin_memory = section.boolean("cpu_offload_use_pin_memory");
  if (section.has("offload_optimizer")) {
    const JsonFields offload = section.object("offload_optimizer");
    reader.warn_unknown(offload, kOffloadOptimizerKeys, "");
    zero.offload_optimizer = read_device(offload);
    zero.pin_memory = offload.boolean_or("pin_memory", zero.pin_memory);
    zero.optimizer_buffer_count = offload.positive_integer_or("buffer_count", zero.optimizer_buffer_count);
    read_nvme_path(offload, zero.offload_optimizer, zero);
    if (offload.has("ratio") && offload.non_negative_number("ratio") != 1.0) {
      reader.warn("'" + offload.field_path("ratio") + "' (partial optimizer offload) is not modelled: the whole "
                  "optimizer is offloaded");
    }
  }
  if (section.has("offload_param")) {
    const JsonFields offload = section.object("offload_param");
    reader.warn_unknown(offload, kOffloadParamKeys, "");
    zero.offload_param = read_device(offload);
    zero.pin_memory = offload.boolean_or("pin_memory", zero.pin_memory);
    zero.param_buffer_count = offload.positive_integer_or("buffer_count", zero.param_buffer_count);
    zero.param_buffer_size = offload.positive_integer_or("buffer_size", zero.param_buffer_size);
    zero.param_max_in_cpu = offload.non_negative_integer_or("max_in_cpu", zero.param_max_in_cpu);
    read_nvme_path(offload, zero.offload_param, zero);
  }
  if (zero.offload_param != OffloadDevice::none && zero.stage < 3) {
    throw InputError(section.source(), param_device_field,
                     "contradiction: offload_param (device " + to_string(zero.offload_param) +
                         ") partitions parameters, which needs ZeRO stage 3; the config has stage " +
                         std::to_string(zero.stage));
  }
  if (zero.offload_optimizer != OffloadDevice::none && zero.stage == 0) {
    reader.warn("'" + section.field_path("offload_optimizer") +
                "' is ignored at ZeRO stage 0 (DeepSpeed offloads only the ZeRO optimizer, stages 1-3)");
    zero.offload_optimizer = OffloadDevice::none;
  }

  // overlap_comm: DeepSpeedZeroConfig defaults it to true for stage 3 only (runtime/zero/config.py
  // overlap_comm_valid). Not given, each plan takes its own stage's default (sim/plan_choice.cpp apply_choice).
  if (section.has("overlap_comm")) {
    zero.overlap_comm = section.boolean("overlap_comm");
    zero.overlap_comm_given = true;
  } else {
    zero.overlap_comm = zero.stage == 3;
    zero.overlap_comm_given = false;
    // The engine is chosen later (--engine): say both defaults, as sim/plan_choice.cpp apply_choice applies them.
    reader.note("zero_optimization.overlap_comm not set: each plan takes its engine's default: DeepSpeed's, true at "
                "stage 3 and false below (" + std::string(zero.overlap_comm ? "true" : "false") + " for stage " +
                std::to_string(zero.stage) + "); zeroplan's executor (--engine zeroplan) overlaps at every stage");
  }
  zero.contiguous_gradients = section.boolean_or("contiguous_gradients", zero.contiguous_gradients);
  zero.use_multi_rank_bucket_allreduce =
      section.boolean_or("use_multi_rank_bucket_allreduce", zero.use_multi_rank_bucket_allreduce);
  zero.reduce_scatter = section.boolean_or("reduce_scatter", zero.reduce_scatter);

  // Sizes in elements; "auto" as transformers/integrations/deepspeed.py resolves it from config.hidden_size. A bucket
  // or sub-group of 0 elements holds nothing to reduce, gather or step (`positive`: refused here, naming the file);
  // a prefetch bucket, persistence threshold, live-parameter budget or reuse distance of 0 turns the feature off.
  auto size = [&](const std::vector<std::string>& keys, std::int64_t& target, const char* rule,
                  std::int64_t (*resolve)(std::int64_t), bool positive = false) {
    for (const auto& key : keys) {
      if (!section.has(key)) continue;
      if (const auto value = integer_or_auto(section, key, /*allow_zero=*/!positive)) {
        target = *value;
      } else {
        if (!resolve) section.fail(key, "\"auto\" is not resolved for this key; give a number");
        const std::int64_t h = reader.hidden(section, key);
        target = resolve(h);
        reader.note(section.field_path(key) + " auto -> " + rule + " = " + with_commas(target) + " (hidden " +
                    with_commas(h) + ", HF integration)");
      }
      return;
    }
  };
  size({"reduce_bucket_size"}, zero.reduce_bucket_size, "hidden^2", [](std::int64_t h) { return h * h; }, true);
  size({"allgather_bucket_size"}, zero.allgather_bucket_size, "", nullptr, true);
  size({"stage3_prefetch_bucket_size", "prefetch_bucket_size"}, zero.prefetch_bucket_size, "0.9 * hidden^2",
       [](std::int64_t h) { return static_cast<std::int64_t>(0.9 * static_cast<double>(h) * static_cast<double>(h)); });
  size({"stage3_param_persistence_threshold", "param_persistence_threshold"}, zero.param_persistence_threshold,
       "10 * hidden", [](std::int64_t h) { return 10 * h; });
  size({"stage3_max_live_parameters", "max_live_parameters"}, zero.max_live_parameters, "", nullptr);
  size({"stage3_max_reuse_distance", "max_reuse_distance"}, zero.max_reuse_distance, "", nullptr);
  size({"sub_group_size"}, zero.sub_group_size, "", nullptr, true);

  // ZeRO++ and MiCS change what is partitioned and sent; zeroplan models plain ZeRO.
  if (section.has("zero_hpz_partition_size") && section.positive_integer("zero_hpz_partition_size") > 1) {
    reader.warn("'zero_optimization.zero_hpz_partition_size' (ZeRO++ hpZ) is not modelled");
  }
  for (const char* key : {"zero_quantized_weights", "zero_quantized_gradients", "zero_quantized_nontrainable_weights"}) {
    if (section.has(key) && section.boolean(key)) {
      reader.warn("'zero_optimization." + std::string(key) + "' (ZeRO++ quantization) is not modelled");
    }
  }
  if (section.has("mics_shard_size") && section.raw("mics_shard_size").is_number() &&
      section.raw("mics_shard_size").get<double>() > 0) {
    reader.warn("'zero_optimization.mics_shard_size' (MiCS) is not modelled");
  }
}

void read_activation_checkpointing(const Reader& reader, const JsonFields& top) {
  if (!top.has("activation_checkpointing")) return;
  const JsonFields section = top.object("activation_checkpointing");
  reader.warn_unknown(section, kCheckpointingKeys, "");
  TrainingConfig& training = reader.training;
  training.partition_activations = section.boolean_or("partition_activations", training.partition_activations);
  training.cpu_checkpointing = section.boolean_or("cpu_checkpointing", training.cpu_checkpointing);
  reader.note("activation_checkpointing configures deepspeed.checkpointing (partition_activations " +
              std::string(training.partition_activations ? "true" : "false") + ", cpu_checkpointing " +
              (training.cpu_checkpointing ? "true" : "false") +
              "); it does not turn recompute on by itself: checkpointing stays " + to_string(training.checkpointing));
}

}  // namespace

void apply_deepspeed_config(const std::filesystem::path& path, const ModelDescription& model, int world_size,
                            TrainingConfig& training) {
  apply_deepspeed_config(read_json_file(path, /*allow_comments=*/true), path.string(), model, world_size, training);
}

void apply_deepspeed_config(const nlohmann::json& document, const std::string& source,
                            const ModelDescription& model, int world_size, TrainingConfig& training) {
  if (world_size < 1) throw InputError("--gpus", "", "expected at least 1 GPU, got " + std::to_string(world_size));
  const JsonFields top(document, source);
  // Work on a copy so that a config that fails halfway leaves the caller's training configuration untouched.
  TrainingConfig updated = training;
  const Reader reader{source, model, world_size, updated};
  reader.warn_unknown(top, kTopLevelKeys, "");
  read_batch_sizes(reader, top);
  read_precision(reader, top);
  read_optimizer(reader, top);
  if (top.has("gradient_clipping")) {
    if (const auto clipping = number_or_auto(top, "gradient_clipping")) {
      updated.gradient_clipping = *clipping;
    } else {
      reader.note("gradient_clipping auto -> " + nlohmann::json(updated.gradient_clipping).dump() +
                  " (the training max_grad_norm, HF integration)");
    }
  }
  read_zero(reader, top);
  read_aio(reader, top);
  read_data_types(reader, top);
  read_activation_checkpointing(reader, top);
  training = std::move(updated);
}

nlohmann::json emit_deepspeed_config(const TrainingConfig& training, int world_size) {
  if (world_size < 1) throw InputError("--gpus", "", "expected at least 1 GPU, got " + std::to_string(world_size));
  const ZeroConfig& zero = training.zero;
  nlohmann::json config;
  config["train_batch_size"] = training.micro_batch * training.grad_accum * world_size;
  config["train_micro_batch_size_per_gpu"] = training.micro_batch;
  config["gradient_accumulation_steps"] = training.grad_accum;
  config["gradient_clipping"] = training.gradient_clipping;
  if (training.precision == Precision::fp16) {
    nlohmann::json fp16 = {{"enabled", true},
                           {"loss_scale", training.loss_scale.static_loss_scale},
                           {"initial_scale_power", static_cast<std::int64_t>(training.loss_scale.initial_scale_power)},
                           {"loss_scale_window", training.loss_scale.loss_scale_window},
                           {"hysteresis", training.loss_scale.hysteresis},
                           {"consecutive_hysteresis", training.loss_scale.consecutive_hysteresis},
                           {"min_loss_scale", training.loss_scale.min_loss_scale}};
    config["fp16"] = std::move(fp16);
  } else if (training.precision == Precision::bf16) {
    config["bf16"] = {{"enabled", true}};
  }
  if (training.communication_dtype) config["communication_data_type"] = to_string(*training.communication_dtype);
  if (training.grad_accum_dtype) config["data_types"] = {{"grad_accum_dtype", to_string(*training.grad_accum_dtype)}};
  switch (training.optimizer) {
    case OptimizerKind::adamw:
      config["optimizer"] = {{"type", "AdamW"},
                             {"params",
                              {{"lr", training.learning_rate},
                               {"betas", {training.adam_beta1, training.adam_beta2}},
                               {"eps", training.adam_epsilon},
                               {"weight_decay", training.weight_decay}}}};
      if (training.adam_implementation != AdamImplementation::deepspeed_fused) {
        config["optimizer"]["params"]["torch_adam"] = true;
        if (training.adam_implementation == AdamImplementation::torch_fused) config["optimizer"]["params"]["fused"] = true;
      }
      break;
    case OptimizerKind::sgd_momentum:
      config["optimizer"] = {
          {"type", "SGD"},
          {"params", {{"lr", training.learning_rate}, {"momentum", 0.9}, {"weight_decay", training.weight_decay}}}};
      break;
    case OptimizerKind::adam_8bit:
      // DeepSpeed has no 8-bit Adam of its own: the client passes one (bitsandbytes) to deepspeed.initialize,
      // which ZeRO accepts only with this flag.
      config["zero_allow_untested_optimizer"] = true;
      break;
  }
  nlohmann::json z = {{"stage", zero.stage}};
  if (zero.stage >= 1) {
    // The plan's own value: the one given, else DeepSpeed's default for this stage (true at stage 3).
    z["overlap_comm"] = zero.overlap_comm_given ? zero.overlap_comm : zero.stage == 3;
    z["contiguous_gradients"] = zero.contiguous_gradients;
    z["reduce_bucket_size"] = zero.reduce_bucket_size;
    z["reduce_scatter"] = zero.reduce_scatter;
    if (zero.stage <= 2) {
      z["allgather_bucket_size"] = zero.allgather_bucket_size;
      z["use_multi_rank_bucket_allreduce"] = zero.use_multi_rank_bucket_allreduce;
    }
    if (zero.offload_optimizer != OffloadDevice::none) {
      nlohmann::json offload = {{"device", to_string(zero.offload_optimizer)}, {"pin_memory", zero.pin_memory}};
      if (zero.offload_optimizer == OffloadDevice::nvme) {
        offload["nvme_path"] = zero.nvme_path;
        offload["buffer_count"] = zero.optimizer_buffer_count;
      }
      z["offload_optimizer"] = std::move(offload);
    }
  }
  if (zero.stage == 3) {
    if (zero.offload_param != OffloadDevice::none) {
      nlohmann::json offload = {{"device", to_string(zero.offload_param)}, {"pin_memory", zero.pin_memory}};
      if (zero.offload_param == OffloadDevice::nvme) {
        offload["nvme_path"] = zero.nvme_path;
        offload["buffer_count"] = zero.param_buffer_count;
        offload["buffer_size"] = zero.param_buffer_size;
        offload["max_in_cpu"] = zero.param_max_in_cpu;
      }
      z["offload_param"] = std::move(offload);
    }
    z["stage3_prefetch_bucket_size"] = zero.prefetch_bucket_size;
    z["stage3_param_persistence_threshold"] = zero.param_persistence_threshold;
    z["stage3_max_live_parameters"] = zero.max_live_parameters;
    z["stage3_max_reuse_distance"] = zero.max_reuse_distance;
    z["sub_group_size"] = zero.sub_group_size;
  }
  config["zero_optimization"] = std::move(z);
  if (training.checkpointing != Checkpointing::none || training.partition_activations || training.cpu_checkpointing) {
    config["activation_checkpointing"] = {{"partition_activations", training.partition_activations},
                                          {"cpu_checkpointing", training.cpu_checkpointing},
                                          {"contiguous_memory_optimization", false},
                                          {"synchronize_checkpoint_boundary", false}};
  }
  return config;
}

}  // namespace zeroplan
