#include "sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "core/input_error.h"
#include "core/number_checks.h"
#include "sim/collective_time.h"
#include "sim/activation_memory.h"
#include "sim/compute_time.h"
#include "core/lora_modules.h"
#include "sim/lora_model.h"
#include "sim/executor_layout.h"
#include "sim/memory_margin.h"
#include "sim/memory_inputs.h"
#include "sim/memory_model.h"
#include "sim/saturating.h"
#include "sim/zero_schedule.h"

namespace zeroplan {

namespace {

constexpr const char* kTrainingSource = "training configuration";

void require_rate(const ClusterDescription& cluster, double value, const char* field, const std::string& why) {
  if (!(value > 0.0)) {
    throw InputError(cluster.source, field, "is " + std::to_string(value) + "; expected > 0 (" + why + ")");
  }
}

void validate(const ModelDescription& model, const ClusterDescription& cluster, const TrainingConfig& training) {
  if (model.layers.empty()) throw InputError(model.source, "layers", "the model has no layers to simulate");
  // The inputs' bounds again (core/number_checks.h): the simulator is called with configurations no front end
  // resolved (the recommender's candidates, tests), and it sizes its timeline from them.
  require_count_at_most(training.micro_batch, kMaxMicroBatch, kTrainingSource, "micro_batch", kMaxSizeWhy);
  require_count_at_most(training.seq_len, kMaxSeqLen, kTrainingSource, "seq_len", kMaxSizeWhy);
  require_count_at_most(training.grad_accum, kMaxGradAccum, kTrainingSource, "gradient_accumulation_steps",
                        kMaxGradAccumWhy);
  require_tokens_per_micro_step(training.micro_batch, training.seq_len, kTrainingSource, "micro_batch * seq_len");
  require_count_at_most(cluster.total_gpus(), kMaxGpus, cluster.source, "gpus", kMaxSizeWhy);
  const ZeroConfig& zero = training.zero;
  if (zero.stage < 0 || zero.stage > 3) {
    throw InputError(kTrainingSource, "zero_optimization.stage",
                     "is " + std::to_string(zero.stage) + "; expected 0, 1, 2 or 3");
  }
  if (zero.offload_param != OffloadDevice::none && zero.stage != 3) {
    throw InputError(kTrainingSource, "zero_optimization.offload_param",
                     "parameter offload needs stage 3 (DeepSpeed only partitions parameters there)");
  }
  if (zero.offload_optimizer != OffloadDevice::none && zero.stage == 0) {
    throw InputError(kTrainingSource, "zero_optimization.offload_optimizer",
                     "optimizer offload needs stage 1, 2 or 3");
  }
  require_positive(zero.reduce_bucket_size, kTrainingSource, "zero_optimization.reduce_bucket_size");
  require_positive(zero.allgather_bucket_size, kTrainingSource, "zero_optimization.allgather_bucket_size");
  require_positive(zero.sub_group_size, kTrainingSource, "zero_optimization.sub_group_size");
  if (zero.prefetch_bucket_size < 0) {
    throw InputError(kTrainingSource, "zero_optimization.stage3_prefetch_bucket_size", "expected >= 0 elements");
  }
  if (zero.max_live_parameters < 0) {
    throw InputError(kTrainingSource, "zero_optimization.stage3_max_live_parameters", "expected >= 0 elements");
  }
  if (cluster.total_gpus() < 1) {
    throw InputError(cluster.source, "nodes", "the cluster has no GPUs; expected gpus_per_node >= 1, nodes >= 1");
  }
  const bool offload = zero.offload_optimizer != OffloadDevice::none || zero.offload_param != OffloadDevice::none;
  if (offload) require_rate(cluster, cluster.pcie_bandwidth, "pcie_bandwidth", "offload copies over PCIe");
  if (zero.offload_optimizer != OffloadDevice::none) {
    require_rate(cluster, cluster.cpu_optimizer_params_per_second, "cpu_optimizer_params_per_second",
                 "the offloaded optimizer runs on the host CPU");
  }
  if (zero.offload_optimizer == OffloadDevice::nvme || zero.offload_param == OffloadDevice::nvme) {
    require_rate(cluster, cluster.nvme_read_bandwidth, "nvme_read_bandwidth", "NVMe offload");
    require_rate(cluster, cluster.nvme_write_bandwidth, "nvme_write_bandwidth", "NVMe offload");
  }
}

// Spreads the memory model's activation bytes (the peak, one micro-step) over the layers that save them:
// every transformer block alike; a generic layer by its activation elements per sample.
std::vector<Bytes> activation_bytes_per_layer(const ModelDescription& model, Bytes total) {
  std::vector<double> weight(model.layers.size(), 0.0);
  double weight_sum = 0.0;
  for (std::size_t i = 0; i < model.layers.size(); ++i) {
    const LayerDescription& layer = model.layers[i];
    weight[i] = model.transformer ? (layer.kind == "transformer_block" ? 1.0 : 0.0)
                                  : static_cast<double>(layer.activation_elements_per_sample);
    weight_sum += weight[i];
  }
  std::vector<Bytes> bytes(model.layers.size(), 0);
  if (weight_sum <= 0.0) {
    if (!bytes.empty()) bytes.back() = total;
    return bytes;
  }
  Bytes assigned = 0;
  std::size_t last = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<Bytes>(static_cast<double>(total) * weight[i] / weight_sum);
    assigned += bytes[i];
    if (weight[i] > 0.0) last = i;
  }
  bytes[last] += total - assigned;  // rounding: the sum is exactly the memory model's figure
  return bytes;
}

std::string peak_label(Precision precision) { return "datasheet dense " + to_string(precision); }

}  // namespace

std::int64_t parameter_tensors(const ModelDescription& model, const LayerDescription& layer) {
  if (layer.params <= 0) return 0;
  if (model.transformer && layer.kind == "transformer_block") {
    // Two norms (a weight, and a bias for LayerNorm), the attention projections (q/k/v fused for gpt2, apart for
    // llama) and the MLP's (gate and up for SwiGLU), each with its bias when the shape has one.
    const TransformerShape& s = *model.transformer;
    const std::int64_t norms = s.norm == NormKind::layer_norm ? 4 : 2;
    const std::int64_t attention = s.family == ModelFamily::gpt2 ? 2 : 4;
    const std::int64_t mlp = s.activation == ActivationKind::swiglu ? 3 : 2;
    const std::int64_t attention_biases = s.attention_bias ? (s.attention_output_bias ? attention : attention - 1) : 0;
    return norms + attention + attention_biases + mlp + (s.mlp_bias ? mlp : 0);
  }
  if (model.transformer && layer.kind == "embedding") return model.transformer->learned_positions ? 2 : 1;
  if (model.transformer && layer.kind == "norm") return model.transformer->norm == NormKind::layer_norm ? 2 : 1;
  if (model.transformer) return 1;
  // A layer list names only its modules: a convolution or linear weight, a norm's weight and bias; count one and a
  // half tensors per module.
  return std::max<std::int64_t>(1, (3 * layer.module_count + 1) / 2);
}

std::int64_t linear_calls(const ModelDescription& model, std::size_t layer_index) {
  if (!model.transformer || layer_index >= model.layers.size()) return 0;
  const TransformerShape& s = *model.transformer;
  const LayerDescription& layer = model.layers[layer_index];
  std::int64_t calls = 0;
  // A block: the attention projections (q/k/v fused for gpt2, apart for llama, and the output projection) and the
  // MLP's (gate and up for SwiGLU, then down).
  if (layer.kind == "transformer_block")
    calls = (s.family == ModelFamily::gpt2 ? 2 : 4) + (s.activation == ActivationKind::swiglu ? 3 : 2);
  if (layer.kind == "lm_head") calls = 1;
  // Tied embeddings: the output projection is F.linear with the token embedding's weight, after the last layer.
  if (s.tied_embeddings && layer_index + 1 == model.layers.size()) ++calls;
  return calls;
}

double host_speed_factor(const ClusterDescription& cluster, const TrainingConfig& training) {
  const double host = training.host_eager_op_seconds > 0.0 ? training.host_eager_op_seconds
                                                            : cluster.probed_eager_op_seconds;
  const double reference = cluster.cost_host_eager_op_seconds();
  if (!(host > 0.0) || !(reference > 0.0)) return 1.0;
  return host / reference;
}

double cpu_optimizer_rate(const ClusterDescription& cluster, const TrainingConfig& training, int ranks_in_node) {
  // DeepSpeed with torch_adam (and not "fused") steps the offloaded partition with torch.optim.AdamW's for-loop on
  // CPU tensors (engine.py get_optimizer_configuration, _configure_basic_optimizer): bound by the host's memory, the
  // node's rate shared by its ranks, where the cluster gives it. torch's fused CPU AdamW runs at DeepSpeedCPUAdam's
  // rate (device-and-peers.md: 5.90 / 6.08 against 6.29 / 6.06 Gparam/s on the x2 host).
  if (training.engine == TrainingEngine::deepspeed &&
      training.adam_implementation == AdamImplementation::torch_foreach &&
      cluster.torch_cpu_adamw_params_per_second > 0.0)
    return cluster.torch_cpu_adamw_params_per_second / std::max(1, ranks_in_node);
  const double share = cluster.cpu_optimizer_params_per_second / std::max(1, ranks_in_node);
  if (!(cluster.cpu_adam_params_per_second_per_thread > 0.0)) return share;
  const std::int64_t threads =
      training.cpu_threads_per_rank > 0 ? training.cpu_threads_per_rank
                                        : std::max<std::int64_t>(1, cluster.host_cores / std::max(1, ranks_in_node));
  return std::min(share, static_cast<double>(threads) * cluster.cpu_adam_params_per_second_per_thread);
}

namespace {

// The executor's stage-3 figures per gather unit (sim/executor_layout.h), per layer of the description: the units
// are its layers, except that an untied head's final norm and LM head are one unit (exec/param_layout.h), gathered
// and reduced where the description's LM head layer computes. The final norm's layer takes the head unit's figure
// with `copy` (whether it is regathered), else 0 (its calls and elements, counted at the head). None when the units
// match the layers otherwise.
template <typename T>
std::optional<std::vector<T>> unit_figures_per_layer(const ModelDescription& model, const std::vector<T>& units,
                                                     bool copy) {
  const std::size_t n = model.layers.size();
  if (units.size() == n) return units;
  if (units.empty() || units.size() + 1 != n || n < 2 || model.layers[n - 2].kind != "norm" ||
      model.layers[n - 1].kind != "lm_head")
    return std::nullopt;
  std::vector<T> layers(units.begin(), units.end());
  layers.insert(layers.end() - 1, copy ? units.back() : T{});
  return layers;
}

// The steady micro-step's exposed communication stands for every skipped one only if the communication of the
// micro-steps up to it ends before the boundary micro-step computes: then what it overlaps is steady micro-steps
// alone, as in the full step (zero_schedule.h SteadyMicroSteps). Otherwise the step is built whole.
bool steady_share_is_own(const Timeline& timeline, const SteadyMicroSteps& steady) {
  for (TaskId id = 0; id < steady.end_task; ++id) {
    const TimelineTask& task = timeline.task(id);
    if (task.resource == Resource::nccl && task.finish > steady.boundary_start) return false;
  }
  return true;
}

Bytes persistent_param_bytes(const ModelDescription& model, const TrainingConfig& training) {
  if (training.zero.stage != 3) return 0;
  Bytes persistent = 0;
  for (const LayerDescription& layer : model.layers) persistent += persistent_params(layer, training.zero);
  return persistent * precision_bytes(training.precision);
}

}  // namespace

namespace {
// zeroplan's executor allocates stage 3's gathered-parameter arena and persistent tensors once, for the whole run
// (exec/zero/zero_engine.cpp setup_stage3): static memory, not the timeline's per-layer gathers.
bool executor_arena(const ModelDescription& model, const TrainingConfig& training) {
  return training.engine == TrainingEngine::zeroplan && executor_trains(model);
}
}  // namespace

Bytes static_gpu_bytes(const ModelDescription& model, const TrainingConfig& training, const MemoryEstimate& memory) {
  if (executor_arena(model, training))
    return memory.gpu.total - memory.gpu.activations - memory.gpu.logits - memory.transient.total();
  return memory.gpu.total - memory.gpu.activations - memory.gpu.logits - memory.gpu.gathered_params -
         memory.transient.total() + persistent_param_bytes(model, training);
}

Bytes timeline_gpu_demand(const StepSimulation& simulation) {
  return std::max(simulation.peak_gpu_bytes, simulation.init_peak_gpu_bytes);
}

bool timeline_gpu_fits(const StepSimulation& simulation, const ClusterDescription& cluster, double margin) {
  return fits_with_margin(timeline_gpu_demand(simulation), cluster.gpu_memory_bytes, margin);
}

bool cluster_supports(const ClusterDescription& cluster, const PlanChoice& choice, std::string* why) {
  const auto missing = [&](const char* text) {
    if (why != nullptr) *why = text;
    return false;
  };
  const bool offload = choice.offload_optimizer != OffloadDevice::none || choice.offload_param != OffloadDevice::none;
  if (offload && !(cluster.pcie_bandwidth > 0.0)) return missing("the cluster gives no PCIe bandwidth");
  if (choice.offload_optimizer != OffloadDevice::none && !(cluster.cpu_optimizer_params_per_second > 0.0)) {
    return missing("the cluster gives no CPU optimizer rate");
  }
  const bool nvme = choice.offload_optimizer == OffloadDevice::nvme || choice.offload_param == OffloadDevice::nvme;
  if (nvme && !(cluster.nvme_read_bandwidth > 0.0 && cluster.nvme_write_bandwidth > 0.0)) {
    return missing("the cluster has no NVMe");
  }
  return true;
}

StepSimulation simulate_step(const ModelDescription& model, const ClusterDescription& cluster,
                             const TrainingConfig& base_training, const PlanChoice& choice,
                             const SimulationOptions& options) {
  const TrainingConfig training = apply_choice(base_training, choice);
  validate(model, cluster, training);
  const int world_size = cluster.total_gpus();
  const int gpus_in_node = std::min(world_size, cluster.gpus_per_node);

  const MemoryEstimate memory = estimate_memory(model, cluster, training, choice);
  std::vector<LayerCompute> compute = layer_compute_times(model, cluster, training);
  // LoRA: no weight gradients for the frozen base, the adapters' GEMMs, QLoRA's dequantisation (sim/lora_model.h).
  apply_lora_to_layer_compute(model, cluster, training, compute);
  const CollectiveTimer collectives(cluster, world_size);

  // LoRA: the model as PEFT wraps it for the schedule's per-module host work. Each adapted linear becomes a LoraLayer
  // whose forward calls three more modules, lora_dropout (nn.Identity at dropout 0), lora_A and lora_B
  // (peft/tuners/lora/layer.py Linear.forward), and DeepSpeed's and eager PyTorch's per-call costs apply to each.
  // transformers' Llama-family blocks (sim/activation_memory.h transformers_llama_modules) are 13 modules, each of
  // which DeepSpeed hooks and eager PyTorch calls: the decoder layer, self_attn and its q/k/v/o projections, mlp and
  // its gate/up/down projections and act_fn (an nn.SiLU module), and the two RMSNorms (modeling_llama.py, as
  // Mistral's and Qwen2's; a Qwen2-1.5B stage-3 profile counts 369 PreBackwardFunctionForModule calls over 28
  // blocks and the model's own modules, bench/deepspeed/results-pending/hf-profiles-2026-11-29/hf_q15_s3). The
  // description counts its weight modules and the block (10).
  constexpr std::int64_t kTransformersLlamaBlockModuleCalls = 13;
  ModelDescription peft_model;
  const ModelDescription* scheduled = &model;
  const bool transformers_blocks = model.transformer && transformers_llama_modules(*model.transformer, training);
  if (training.lora.enabled || transformers_blocks) {
    peft_model = model;
    const std::int64_t adapter_calls =
        training.lora.enabled ? 3 * lora_figures(model, training).adapted_per_block : 0;
    for (LayerDescription& layer : peft_model.layers) {
      if (layer.kind != "transformer_block") continue;
      if (transformers_blocks) layer.module_calls = kTransformersLlamaBlockModuleCalls;
      layer.module_calls += adapter_calls;
    }
    scheduled = &peft_model;
  }
  StepScheduleInputs inputs;
  inputs.model = scheduled;
  inputs.training = &training;
  inputs.world_size = world_size;
  inputs.compute = &compute;
  inputs.collectives = &collectives;
  inputs.activation_bytes = activation_bytes_per_layer(model, memory.gpu.activations);
  inputs.logits_bytes = memory.gpu.logits;
  inputs.prefetch_window = std::max(0, options.prefetch_window);
  // The optimizer step is a few multi-tensor streaming kernels over the partition (sim/compute_time.h).
  inputs.optimizer_bandwidth =
      cluster.streaming_bandwidth > 0.0 ? cluster.streaming_bandwidth : cluster.hbm_bandwidth;
  inputs.pcie_bandwidth = cluster.pcie_bandwidth;
  // The node's host CPU and NVMe serve every GPU process of the node at once: each rank gets its share, and a
  // rank's CPU Adam runs on its own threads (cpu_optimizer_rate).
  inputs.cpu_optimizer_params_per_second = cpu_optimizer_rate(cluster, training, gpus_in_node);
  // DeepSpeed's host passes beside the CPU step (the unscale and the cast to 16 bits) stream the host's memory as
  // DeepSpeedCPUAdam does, at 30 bytes per parameter of its rate, whichever Adam steps (torch's for-loop AdamW is
  // slower than the memory: GPT-2 1.5B stage 3 on 2 H200 with torch_adam, torch.profiler: AdamW.step 1.32 s, the
  // rest of the step phase 0.11 s for 14 bytes a parameter over 0.78e9 parameters,
  // bench/deepspeed/results-pending/README.md).
  TrainingConfig deepspeed_cpu_adam = training;
  deepspeed_cpu_adam.adam_implementation = AdamImplementation::deepspeed_fused;
  inputs.host_memory_bytes_per_second = 30.0 * cpu_optimizer_rate(cluster, deepspeed_cpu_adam, gpus_in_node);
  inputs.nvme_read_bandwidth = cluster.nvme_read_bandwidth / gpus_in_node;
  inputs.nvme_write_bandwidth = cluster.nvme_write_bandwidth / gpus_in_node;

  inputs.every_micro_step = options.record_events;
  if (training.engine == TrainingEngine::deepspeed && training.zero.stage == 3 &&
      training.zero.offload_param == OffloadDevice::nvme) {
    // DeepSpeed keeps the sub-groups within max_in_cpu in host memory: only the rest is read and written.
    const std::int64_t partition = ceil_div(model.params(), world_size);
    if (partition > 0) {
      const std::int64_t kept =
          deepspeed_param_elements_in_cpu(partition, training.zero.param_max_in_cpu, training.zero.sub_group_size);
      inputs.nvme_param_read_share = static_cast<double>(partition - kept) / static_cast<double>(partition);
      inputs.nvme_param_write_share = inputs.nvme_param_read_share;
    }
  }
  inputs.static_gathered_params = executor_arena(model, training);
  const bool offloads_optimizer = training.zero.offload_optimizer != OffloadDevice::none;
  // The executor's own layout (partition, buckets, fetch plan), built once for what follows.
  const std::optional<ExecutorLayoutFigures> figures =
      inputs.static_gathered_params && !training.lora.enabled && (training.zero.stage > 0 || offloads_optimizer)
          ? executor_layout_figures(model, training, world_size, training.zero.stage)
          : std::nullopt;
  // The executor's device AdamW launches a kernel per gradient bucket: ResNet-101 at stage 3 on two GPUs has two
  // buckets a layer (its partitioned and its persistent tensors), 65 kernels of a few thousand to a few million
  // elements.
  if (figures && !offloads_optimizer && training.zero.stage > 0)
    inputs.executor_adamw_launch_seconds = static_cast<double>(figures->buckets) * cluster.kernel_overhead_seconds;
  if (training.zero.stage == 3 || offloads_optimizer) {
    if (figures) {
      // The executor's fetch plan keeps a unit gathered from its forward to its backward use when the reuse rule
      // allows: no all-gather (nor NVMe read, nor host copy) for it in backward.
      if (const auto regathers = unit_figures_per_layer(model, figures->unit_regathered_for_backward, true)) {
        inputs.backward_regathers = *regathers;
        inputs.head_regathers_embeddings = figures->head_regathers_embeddings;
        // (per unit: a description whose layers are its units; others read the default share)
        if (training.zero.offload_param == OffloadDevice::nvme &&
            figures->unit_regathered_for_backward.size() == model.layers.size()) {
          inputs.nvme_forward_read_share = figures->param_nvme_forward_read_share;
          inputs.nvme_backward_read_share = figures->param_nvme_backward_read_share;
          inputs.nvme_head_read_share = figures->param_nvme_head_read_share;
          const double partition_bytes =
              static_cast<double>(figures->partition_elements) * static_cast<double>(precision_bytes(training.precision));
          inputs.nvme_param_write_share =
              partition_bytes > 0.0 ? static_cast<double>(figures->param_nvme_write_bytes_per_step) / partition_bytes : 1.0;
        }
      }
      // Stage 3 on several GPUs: the NCCL calls of each unit's gather and reduction, and the persistent tensors'
      // gather after the step.
      const auto gather_calls = unit_figures_per_layer(model, figures->unit_gather_calls, false);
      if (training.zero.stage == 3 && world_size > 1 && gather_calls) {
        inputs.executor_unit_gather_calls = *gather_calls;
        inputs.executor_unit_reduce_calls = *unit_figures_per_layer(model, figures->unit_reduce_calls, false);
        inputs.executor_unit_gather_elements = *unit_figures_per_layer(model, figures->unit_gather_elements, false);
        inputs.executor_persistent_buckets = figures->persistent_buckets;
        inputs.executor_persistent_elements = figures->persistent_elements;
      }
      // Its CPU AdamW steps the partition piece by piece, each call at a fixed cost besides its elements.
      if (offloads_optimizer) {
        inputs.offload_pieces = figures->offload_piece_elements;
        inputs.cpu_optimizer_call_seconds = cluster.cpu_optimizer_call_seconds;
      }
    }
  }
  // Elementwise gradient copies and conversions run at the optimizer's streaming rate (both are memory bound).
  inputs.streaming_bandwidth = inputs.optimizer_bandwidth;
  if (training.engine == TrainingEngine::deepspeed) {
    inputs.deepspeed = true;
    inputs.path = deepspeed_engine_path(training);
    inputs.transient = memory.transient;
    inputs.deepspeed_optimizer_bandwidth =
        cluster.optimizer_bandwidth > 0.0 ? cluster.optimizer_bandwidth : inputs.optimizer_bandwidth;
    inputs.kernel_overhead_seconds = cluster.kernel_overhead_seconds;
    // Stage 3's per-call costs are the Python of the host they were measured on: on a host of another speed (the
    // training host's probe against the cluster's, host_speed_factor) each scales by the ratio. Only these: on five
    // machines GPT-2 1.5B stage 3 followed the probe (within -12.4..+13.3% scaled, -41.5..+32.0% not), while stages
    // 0-2's gradient hooks, per-tensor loops and eager dispatch did not (bench/deepspeed/results-pending/README.md).
    const double host = host_speed_factor(cluster, training);
    inputs.module_hook_seconds = host * cluster.deepspeed_module_hook_seconds;
    inputs.forward_module_function_seconds = host * cluster.deepspeed_forward_module_function_seconds;
    inputs.stage3_gradient_hook_seconds = host * cluster.deepspeed_stage3_gradient_hook_seconds;
    inputs.stage3_offload_gradient_hook_seconds = host * cluster.deepspeed_stage3_offload_gradient_hook_seconds;
    inputs.linear_forward_seconds = host * cluster.deepspeed_linear_forward_seconds;
    inputs.linear_backward_seconds = host * cluster.deepspeed_linear_backward_seconds;
    inputs.step_tensor_seconds = host * cluster.deepspeed_step_tensor_seconds;
    inputs.eager_forward_module_seconds = cluster.eager_forward_module_seconds;
    inputs.eager_backward_module_seconds = cluster.eager_backward_module_seconds;
    inputs.gradient_hook_seconds = cluster.deepspeed_gradient_hook_seconds;
    inputs.bookkeeping_gradient_hook_seconds = cluster.deepspeed_bookkeeping_gradient_hook_seconds;
    inputs.offload_gradient_hook_seconds = cluster.deepspeed_offload_gradient_hook_seconds;
    inputs.tensor_op_seconds = cluster.deepspeed_tensor_op_seconds;
    inputs.pageable_pcie_bandwidth =
        cluster.pageable_pcie_bandwidth > 0.0 ? cluster.pageable_pcie_bandwidth : cluster.pcie_bandwidth;
    inputs.fresh_pageable_write_bandwidth = cluster.fresh_pageable_write_bandwidth;
    inputs.tensors_per_layer.reserve(model.layers.size());
    for (const LayerDescription& layer : model.layers) inputs.tensors_per_layer.push_back(parameter_tensors(model, layer));
    inputs.gather_bytes_per_element = lora_gather_bytes_per_element(model, training);
    if (training.lora.enabled) {
      // Only the adapters get gradients: their tensors are what the gradient hooks, reductions and the step see.
      const LoraFigures lora = lora_figures(model, training);
      const std::int64_t per_block = model.transformer && model.transformer->layers > 0
                                         ? lora.trainable_params / model.transformer->layers
                                         : 0;
      for (std::size_t i = 0; i < model.layers.size(); ++i) {
        const bool block = model.layers[i].kind == "transformer_block";
        inputs.tensors_per_layer[i] = block ? lora.adapter_tensors_per_block : 0;
        inputs.trainable_params_per_layer.push_back(block ? per_block : 0);
      }
    }
    inputs.linear_calls_per_layer.reserve(model.layers.size());
    for (std::size_t i = 0; i < model.layers.size(); ++i) inputs.linear_calls_per_layer.push_back(linear_calls(model, i));
    // LoRA: lora_A and lora_B are nn.Linear, two more F.linear calls per adapted module (zero.Init's
    // LinearFunctionForZeroStage3 at stage 3).
    if (training.lora.enabled) {
      const std::int64_t adapted = lora_figures(model, training).adapted_per_block;
      for (std::size_t i = 0; i < model.layers.size(); ++i)
        if (model.layers[i].kind == "transformer_block") inputs.linear_calls_per_layer[i] += 2 * adapted;
    }
  }

  if (training.engine == TrainingEngine::zeroplan && training.lora.enabled && model.transformer) {
    // LoRA on zeroplan's executor: the adapters' engine reduces and updates the adapters only (their share of
    // each block); the frozen base's engine gathers at stage 3 what it partitions, which with --quantize-base
    // nf4 leaves out the block weights (their codes stay whole: exec/activation_accounting.h device_allocations).
    const LoraFigures lora = lora_figures(model, training);
    const std::int64_t per_block = lora.trainable_params / std::max<std::int64_t>(1, model.transformer->layers);
    const bool nf4 = training.lora.quantize_base == BaseQuantization::nf4;
    std::int64_t block_weights = 0;
    for (const BlockLinear& module : block_linear_modules(model))
      block_weights += module.in_features * module.out_features;
    const double e = precision_bytes(training.precision);
    for (const LayerDescription& layer : model.layers) {
      const bool block = layer.kind == "transformer_block";
      inputs.trainable_params_per_layer.push_back(block ? per_block : 0);
      if (nf4)
        inputs.gather_bytes_per_element.push_back(
            block && layer.params > 0
                ? e * static_cast<double>(std::max<std::int64_t>(0, layer.params - block_weights)) /
                      static_cast<double>(layer.params)
                : e);
    }
  }

  // One workspace per thread: after the first step of a given size, building a step allocates nothing.
  thread_local Timeline timeline;
  SteadyMicroSteps steady = build_step_schedule(inputs, timeline);
  if (steady.count > 0 && !steady_share_is_own(timeline, steady)) {
    inputs.every_micro_step = true;
    steady = build_step_schedule(inputs, timeline);
  }
  const auto repeats = static_cast<double>(steady.count);

  StepSimulation result;
  result.repeated_micro_steps = steady.count;
  result.cpu_optimizer_params_per_second = inputs.cpu_optimizer_params_per_second;
  result.step_seconds = timeline.makespan() + repeats * steady.period_seconds;
  const std::int64_t per_gpu_items =
      training.micro_batch * training.grad_accum * (model.transformer ? training.seq_len : 1);
  result.tokens_per_step = per_gpu_items * world_size;
  result.token_unit = model.transformer ? "tokens" : "samples";
  result.tokens_per_second = static_cast<double>(result.tokens_per_step) / result.step_seconds;
  result.model_flops_per_token = model_flops_per_token(model, training);
  result.flop_convention = model_flops_convention(model, training);
  result.model_flops_per_second_per_gpu =
      result.model_flops_per_token * static_cast<double>(per_gpu_items) / result.step_seconds;
  result.peak_flops = cluster.peak_flops(to_string(training.precision));
  result.peak_name = peak_label(training.precision);
  result.mfu = result.model_flops_per_second_per_gpu / result.peak_flops;
  if (cluster.measured_gemm_flops_bf16 > 0.0 && training.precision == Precision::bf16) {
    result.mfu_of_measured_gemm = result.model_flops_per_second_per_gpu / cluster.measured_gemm_flops_bf16;
  }

  result.busy_seconds = timeline.busy_seconds();
  result.exposed_comm_seconds = timeline.exposed_seconds(Resource::nccl, Resource::gpu_compute);
  std::array<CollectiveTiming, 3> by_kind{};
  // Each task counted once, and the steady micro-step's once more for every micro-step left off the timeline.
  const auto count_task = [&](const TimelineTask& task, double times) {
    const double seconds = task.finish - task.start;
    if (task.kind == TaskKind::recompute) result.recompute_seconds += times * seconds;
    if (!is_collective(task.kind)) return;
    const CollectiveKind kind = task.kind == TaskKind::all_reduce       ? CollectiveKind::all_reduce
                                : task.kind == TaskKind::reduce_scatter ? CollectiveKind::reduce_scatter
                                                                        : CollectiveKind::all_gather;
    CollectiveTiming& timing = by_kind[static_cast<int>(kind)];
    timing.kind = kind;
    timing.ranks = world_size;
    timing.calls += static_cast<std::int64_t>(times);
    timing.bytes += static_cast<Bytes>(times) * task.bytes;
    timing.seconds += times * seconds;
  };
  for (const TimelineTask& task : timeline.tasks()) count_task(task, 1.0);
  if (steady.count > 0) {
    for (TaskId id = steady.first_task; id < steady.end_task; ++id) {
      const TimelineTask& task = timeline.task(id);
      result.busy_seconds[static_cast<int>(task.resource)] += repeats * (task.finish - task.start);
      count_task(task, repeats);
    }
    result.exposed_comm_seconds += repeats * timeline.exposed_seconds(Resource::nccl, Resource::gpu_compute,
                                                                      steady.first_task, steady.end_task);
  }
  result.compute_seconds = result.busy_seconds[static_cast<int>(Resource::gpu_compute)];
  result.communication_seconds = result.busy_seconds[static_cast<int>(Resource::nccl)];
  result.offload_wait_seconds =
      std::max(0.0, result.step_seconds - result.compute_seconds - result.exposed_comm_seconds);

  for (CollectiveTiming& timing : by_kind) {
    if (timing.calls == 0) continue;
    timing.algbw = algorithm_bandwidth(timing.bytes, timing.seconds);
    timing.busbw = bus_bandwidth(timing.kind, timing.ranks, timing.bytes, timing.seconds);
    result.collectives.push_back(timing);
  }

  // Memory: what the memory model holds for the whole step (model states, buckets, buffers, runtime, stage-3
  // persistent parameters) plus the timeline's dynamic bytes (activations, logits, gathered parameters).
  const Bytes persistent_bytes = persistent_param_bytes(model, training);
  result.static_gpu_bytes = static_gpu_bytes(model, training, memory);
  std::array<Bytes, kMemoryUseCount> live{};
  result.peak_gpu_bytes = timeline.peak_memory(result.static_gpu_bytes, &result.peak_memory_at_seconds, &live);
  // A peak in the boundary micro-step happens after the micro-steps left off the timeline.
  if (steady.count > 0 && result.peak_memory_at_seconds >= steady.boundary_start)
    result.peak_memory_at_seconds += repeats * steady.period_seconds;
  result.sum_of_worst_cases_gpu_bytes = memory.gpu.total;
  result.init_peak_gpu_bytes = memory.init_peak_gpu_bytes;
  result.peak_breakdown = memory.gpu;
  result.peak_breakdown.activations = live[static_cast<int>(MemoryUse::activations)];
  result.peak_breakdown.logits = live[static_cast<int>(MemoryUse::logits)];
  result.peak_breakdown.gathered_params = executor_arena(model, training)
                                              ? memory.gpu.gathered_params
                                              : persistent_bytes + live[static_cast<int>(MemoryUse::gathered_params)];
  // DeepSpeed's transient buffers: what of them is live at the peak, beside the part held all step.
  const TransientGpuBytes& t = memory.transient;
  result.peak_breakdown.grads = memory.gpu.grads - t.grads() + live[static_cast<int>(MemoryUse::grads)];
  result.peak_breakdown.gradient_buckets =
      memory.gpu.gradient_buckets - t.buckets() + live[static_cast<int>(MemoryUse::gradient_buckets)];
  result.peak_breakdown.optimizer_states =
      memory.gpu.optimizer_states - t.step_temporaries + live[static_cast<int>(MemoryUse::optimizer_temporaries)];
  // The caching allocator's idle segments, replayed at the loss's backward of a warm step (sim/
  // deepspeed_allocator_replay.h; MemoryEstimate::reserve_idle_at_loss), are what the device reserves beyond the
  // tensors live there: the replay's earlier steps made every segment the step's later requests need (the flat
  // gradients, the optimizer's fp32 gradients and temporaries), so those requests are carved from these idle blocks.
  // A peak after the loss (the optimizer step of a fully checkpointed model, whose loss holds little beside the
  // model states) holds only what of them is still idle then, and the static bytes (the curve's baseline) only
  // that part. TinyLlama-1.1B at stage 0 with gradient checkpointing on one H200: 29.31 GiB device used, 24.65
  // allocated at the step's peak, 28.01 reserved; planned 36.09 with the loss's idle segments added to the step's
  // peak, 30.70 now (bench/deepspeed/results-pending/README.md, 2026-11-30).
  if (memory.reserve_idle_at_loss > 0) {
    const Bytes at_loss = timeline.peak_memory_while(MemoryUse::logits, result.static_gpu_bytes);
    if (at_loss > 0) {
      const Bytes filled = std::min(memory.reserve_idle_at_loss, std::max<Bytes>(0, result.peak_gpu_bytes - at_loss));
      result.static_gpu_bytes -= filled;
      result.peak_gpu_bytes -= filled;
      result.peak_breakdown.runtime_overhead -= filled;
    }
  }
  result.peak_breakdown.total = result.peak_gpu_bytes;

  if (options.record_events) {
    result.events = timeline.tasks();
    result.memory_changes = timeline.memory_changes();
  }
  return result;
}

}  // namespace zeroplan
