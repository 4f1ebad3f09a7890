#include "sim/executor_layout.h"

#include "core/input_error.h"
#include "exec/activation_accounting.h"
#include "exec/lora_layout.h"
#include "exec/param_layout.h"
#include "exec/zero/zero_buffer_layout.h"
#include "exec/zero/zero_partition.h"
#include "sim/executor_device_memory.h"

namespace zeroplan {

namespace {

// Why the executor cannot train this model, or empty: the block pipeline (exec/exec_config.h ModelShape) takes
// LayerNorm or RMSNorm, learned or rotary positions, GELU or SwiGLU, grouped-query attention, any of the biases,
// a tied or untied head.
std::pair<std::string, std::string> executor_gap(const ModelDescription& model) {
  if (!model.transformer && model.has_ops()) return {};  // a layer list that says what it computes
  if (!model.transformer)
    return {"layers", "the executor runs transformers (the gpt2 and llama families) and layer lists whose layers give "
                      "their \"ops\" (core/layer_ops.h, as models/resnet101.json does); this layer list has none"};
  const TransformerShape& t = *model.transformer;
  const bool llama = t.family == ModelFamily::llama;
  if (t.embedding_norm) return {"embedding_norm", "the executor has no norm after the embedding (BLOOM's)"};
  if (!llama && !t.learned_positions)
    return {"learned_positions", "ALiBi positions (a gpt2-family model without a position table) are not implemented"};
  if (llama && t.learned_positions)
    return {"learned_positions", "the executor's llama family uses rotary positions, not a position table"};
  if (t.activation == ActivationKind::relu) return {"activation", "the executor's MLPs are gelu or swiglu; got relu"};
  if (t.norm == NormKind::layer_norm && t.norm_eps != 1e-5)
    return {"norm_eps", "the executor's LayerNorm uses eps 1e-5 (GPT-2's); got " + std::to_string(t.norm_eps)};
  if (!t.rope_scaling_type.empty() && t.rope_scaling_type != "llama3")
    return {"rope_scaling", "rope_type \"" + t.rope_scaling_type + "\" is not implemented (the executor implements "
                            "Llama 3's \"llama3\" scaling, or none)"};
  if (t.hidden % 8 != 0) return {"hidden", "the executor needs a multiple of 8"};
  if (t.heads < 1 || t.hidden % t.heads != 0 || (t.hidden / t.heads) % 8 != 0)
    return {"heads", "the executor needs hidden/heads (the head size) a multiple of 8"};
  if (t.kv_heads < 1 || t.heads % t.kv_heads != 0) return {"kv_heads", "the executor needs kv_heads to divide heads"};
  if (t.ffn_hidden % 8 != 0) return {"ffn_hidden", "the executor needs a multiple of 8"};
  return {};
}

}  // namespace

bool executor_trains(const ModelDescription& model) { return executor_gap(model).first.empty(); }

exec::NetworkShape executor_network(const ModelDescription& model) {
  const auto [field, why] = executor_gap(model);
  if (!field.empty()) throw InputError(model.source, field, why);
  if (!model.has_ops()) throw InputError(model.source, "layers", "a transformer, not a layer list");
  exec::NetworkShape n;
  for (const LayerDescription& layer : model.layers) {
    n.layer_names.push_back(layer.name);
    n.layers.push_back(layer.ops);
  }
  n.input = *model.input_shape;
  n.classes = model.classes;
  return n;
}

exec::ParamLayout executor_param_layout(const ModelDescription& model, int world) {
  if (model.has_ops()) return exec::ParamLayout(executor_network(model), exec::zero_alignment(world));
  return exec::ParamLayout(executor_shape(model), exec::zero_alignment(world));
}

exec::ModelShape executor_shape(const ModelDescription& model) {
  if (!model.transformer)
    throw InputError(model.source, "layers", "a layer list, not a transformer (executor_network describes it)");
  const auto [field, why] = executor_gap(model);
  if (!field.empty()) throw InputError(model.source, field == "transformer.family" ? field : "transformer." + field, why);
  const TransformerShape& t = *model.transformer;
  exec::ModelShape s = exec::make_shape(t.vocab_size, t.hidden, t.layers, t.heads, t.max_seq);
  s.kv_heads = t.kv_heads;
  s.ffn_hidden = t.ffn_hidden;
  s.norm = t.norm == NormKind::rms_norm ? exec::NormKind::rms_norm : exec::NormKind::layer_norm;
  s.norm_eps = t.norm_eps;
  s.norm_bias = s.norm == exec::NormKind::layer_norm;
  s.position = t.learned_positions ? exec::PositionKind::learned : exec::PositionKind::rope;
  s.rope_theta = t.rope_theta;
  s.rope_scaling.llama3 = t.rope_scaling_type == "llama3";
  s.rope_scaling.factor = t.rope_scaling_factor;
  s.rope_scaling.low_freq_factor = t.rope_low_freq_factor;
  s.rope_scaling.high_freq_factor = t.rope_high_freq_factor;
  s.rope_scaling.original_max_position = t.rope_original_max_position;
  s.mlp = t.activation == ActivationKind::swiglu ? exec::MlpKind::swiglu : exec::MlpKind::gelu;
  s.qkv_bias = t.attention_bias;
  s.attn_out_bias = t.attention_bias && t.attention_output_bias;
  s.mlp_bias = t.mlp_bias;
  s.tied_head = t.tied_embeddings;
  s.naming = t.family == ModelFamily::llama ? exec::TensorNaming::llama : exec::TensorNaming::gpt2;
  return s;
}

void check_executor_sequence_length(const ModelDescription& model, std::int64_t seq_len, const std::string& source,
                                    const std::string& field) {
  if (model.transformer && model.transformer->sliding_window > 0 && seq_len > model.transformer->sliding_window)
    // Sliding-window attention (Mistral) masks keys more than sliding_window tokens back; within the window it is
    // full causal attention, which is what the executor's attention computes.
    throw InputError(source, field,
                     std::to_string(seq_len) + " exceeds the model's sliding_window (" +
                         std::to_string(model.transformer->sliding_window) +
                         " tokens): sliding-window attention is not implemented by the executor; use --seq " +
                         std::to_string(model.transformer->sliding_window) + " or less");
}

exec::ZeroSettings executor_zero_settings(const TrainingConfig& training, int stage) {
  const ZeroConfig& z = training.zero;
  exec::ZeroSettings s;
  s.stage = stage;
  s.reduce_bucket_elements = z.reduce_bucket_size;
  s.allgather_bucket_elements = z.allgather_bucket_size;
  s.overlap_comm = z.overlap_comm;
  s.prefetch_bucket_elements = z.prefetch_bucket_size;
  s.param_persistence_threshold = z.param_persistence_threshold;
  s.max_live_parameters = z.max_live_parameters;
  s.max_reuse_distance = z.max_reuse_distance;
  s.offload_optimizer = z.offload_optimizer != OffloadDevice::none;  // cpu or nvme: the CPU AdamW either way
  s.offload_pin_memory = z.pin_memory;
  s.cpu_optimizer_threads = static_cast<int>(training.cpu_threads_per_rank);
  s.sub_group_elements = z.sub_group_size;
  s.offload_param = stage == 3 && z.offload_param != OffloadDevice::none;
  s.param_buffer_count = z.param_buffer_count;
  s.param_buffer_elements = z.param_buffer_size;
  // nvme: the partition's chunks in files under nvme_path (the planner only sizes them; the run opens them).
  if (s.offload_param && z.offload_param == OffloadDevice::nvme) {
    s.param_nvme_path = z.nvme_path.empty() ? "/local_nvme" : z.nvme_path;
    s.param_max_in_cpu = z.param_max_in_cpu;
  }
  s.aio_block_bytes = z.aio_block_size;
  s.aio_queue_depth = static_cast<int>(z.aio_queue_depth);
  s.aio_overlap_events = z.aio_overlap_events;
  // DeepSpeed's dtype fields (run/training_run.cpp refuses what the executor does not implement): fp32 with a
  // 16-bit model changes where and how the gradients are summed (exec/zero/zero_engine.h).
  const bool mixed = training.precision != Precision::fp32;
  s.fp32_grad_accumulation = mixed && training.grad_accum_dtype == Precision::fp32;
  s.fp32_communication = mixed && training.communication_dtype == Precision::fp32;
  return s;
}

namespace {

// One engine's figures over `layout` (the model's, or one of LoRA's two).
ExecutorLayoutFigures layout_figures(const exec::ParamLayout& layout, const TrainingConfig& training, int world,
                                     int stage) {
  const exec::ZeroSettings zero = executor_zero_settings(training, stage);
  const exec::ZeroPartition partition(layout, world, 0, exec::partition_rules(zero));
  const exec::ZeroBufferLayout buffers = exec::zero_buffer_layout(layout, partition, zero, training.grad_accum);
  ExecutorLayoutFigures f;
  f.flat_elements = layout.total();
  f.partition_elements = partition.partition_elements();
  f.buckets = static_cast<std::int64_t>(partition.buckets().size());
  f.gradient_buffer_bytes = buffers.gradient_buffer_bytes(precision_bytes(training.precision));
  f.micro_step_gradient_elements = buffers.micro_step_gradients;
  f.persistent_elements = buffers.persistent_elements;
  for (const exec::GradientBucket& b : partition.buckets()) f.persistent_buckets += b.persistent;
  f.arena_elements = buffers.arena_elements;
  // The all-gathers move each unit's partitioned buckets, not its arena span: persistent tensors between them (a
  // ResNet block's BatchNorm and small convolutions between its larger convolutions) sit in the span unused.
  for (const Zero3UseStep& step : buffers.train_plan.steps)
    for (const Zero3Gather& g : step.gathers)
      for (int k : buffers.unit_buckets[static_cast<std::size_t>(g.unit)])
        f.gathered_elements += partition.buckets()[static_cast<std::size_t>(k)].elements();
  f.gathers = buffers.train_plan.gathers;
  if (stage == 3) {
    for (std::size_t u = 0; u < buffers.units.size(); ++u) {
      f.unit_gather_calls.push_back(static_cast<std::int64_t>(buffers.unit_buckets[u].size()));
      std::int64_t gathered = 0;
      for (int k : buffers.unit_buckets[u]) gathered += partition.buckets()[static_cast<std::size_t>(k)].elements();
      f.unit_gather_elements.push_back(gathered);
      std::int64_t reduced = 0;
      for (const exec::GradientBucket& b : partition.buckets())
        reduced += b.begin >= buffers.units[u].first && b.begin < buffers.units[u].second;
      f.unit_reduce_calls.push_back(reduced);
    }
  }
  // Stage 3: per gather of the train plan, in plan order, the use it serves: the next use of its unit at or after
  // the step it is issued at; the steps past the forward plan's are the backward's uses.
  const auto& steps = buffers.train_plan.steps;
  const std::size_t forward_uses = buffers.forward_plan.steps.size();
  std::vector<std::size_t> gather_use;
  if (stage == 3) {
    f.unit_regathered_for_backward.assign(buffers.units.size(), 0);
    for (std::size_t s = 0; s < steps.size(); ++s)
      for (const Zero3Gather& g : steps[s].gathers) {
        std::size_t use = s;
        while (use < steps.size() && steps[use].unit != g.unit) ++use;
        gather_use.push_back(use);
        if (use >= forward_uses && use < steps.size())
          f.unit_regathered_for_backward[static_cast<std::size_t>(g.unit)] = 1;
        // The forward's last use is the tied head's reread of unit 0 (exec/zero/zero_buffer_layout.cpp).
        if (layout.embeddings_reread() && g.unit == 0 && use + 1 == forward_uses) f.head_regathers_embeddings = true;
      }
  }
  f.param_staging_elements = buffers.param_staging_total();
  f.largest_chunk = buffers.largest_chunk;
  if (!zero.param_nvme_path.empty()) {
    const std::int64_t eb = precision_bytes(training.precision);
    f.param_nvme_file_bytes = buffers.param_nvme_file_bytes(eb);
    f.param_swap_buffer_bytes = buffers.param_swap_buffer_bytes(eb);
    const bool update_reads = training.precision == Precision::fp32 && !zero.offload_optimizer;
    const exec::ZeroBufferLayout::ParamNvmeTraffic traffic =
        buffers.param_nvme_traffic(eb, std::max<std::int64_t>(1, training.grad_accum), update_reads);
    f.param_nvme_read_bytes_per_step = traffic.read_bytes;
    f.param_nvme_write_bytes_per_step = traffic.write_bytes;
    // Each plan gather serves the use gather_use gives; the forward's last is the tied head's reread of unit 0 when
    // the plan has one.
    std::vector<std::int64_t> unit_bytes(buffers.units.size(), 0);
    for (std::size_t u = 0; u < buffers.units.size(); ++u)
      for (int k : buffers.unit_buckets[u])
        unit_bytes[u] += exec::padded_swap_bytes(partition.buckets()[static_cast<std::size_t>(k)].chunk, eb);
    for (const std::vector<std::int64_t>& gathers : traffic.gather_read_bytes) {
      auto& fwd = f.param_nvme_forward_read_share.emplace_back(buffers.units.size(), 0.0);
      auto& bwd = f.param_nvme_backward_read_share.emplace_back(buffers.units.size(), 0.0);
      double& head = f.param_nvme_head_read_share.emplace_back(0.0);
      std::size_t g_index = 0;
      for (std::size_t st = 0; st < steps.size(); ++st)
        for (const Zero3Gather& g : steps[st].gathers) {
          const auto u = static_cast<std::size_t>(g.unit);
          const double share = unit_bytes[u] > 0 ? static_cast<double>(gathers[g_index]) / static_cast<double>(unit_bytes[u]) : 0.0;
          const std::size_t use = gather_use[g_index++];
          if (use >= forward_uses) bwd[u] = share;
          else if (f.head_regathers_embeddings && u == 0 && use + 1 == forward_uses) head = share;
          else fwd[u] = share;
        }
    }
    f.param_host_elements = buffers.param_host_elements;
    f.largest_nvme_chunk = buffers.param_swap_buffer_elements;
  }
  const std::int64_t piece = std::min(exec::kOffloadPieceElements, std::max<std::int64_t>(1, zero.sub_group_elements));
  for (const exec::GradientBucket& b : partition.buckets()) {
    f.offload_pieces += (b.chunk + piece - 1) / piece;
    f.largest_offload_piece = std::max(f.largest_offload_piece, std::min(piece, b.chunk));
    for (std::int64_t sub = 0; sub < b.chunk; sub += piece) f.offload_piece_elements.push_back(std::min(piece, b.chunk - sub));
  }
  return f;
}

}  // namespace

std::optional<ExecutorLayoutFigures> executor_layout_figures(const ModelDescription& model,
                                                             const TrainingConfig& training, int world, int stage) {
  if (!executor_trains(model) || world < 1 || training.zero.reduce_bucket_size < 1) return std::nullopt;
  ExecutorLayoutFigures f = layout_figures(executor_param_layout(model, world), training, world, stage);
  if (model.transformer) {
    const exec::MlpSavedLayout mlp = exec::mlp_saved_layout(executor_planned_config(model, training, stage), world);
    f.gradient_partition_over_activations = mlp.holds_gradient_partition;
    f.gradient_partition_beyond_bytes = mlp.gradient_partition_beyond;
  }
  return f;
}

std::optional<ExecutorLoraFigures> executor_lora_layout_figures(const ModelDescription& model,
                                                                const TrainingConfig& training, int world, int stage) {
  if (!training.lora.enabled || !model.transformer || !executor_trains(model) || world < 1 ||
      training.zero.reduce_bucket_size < 1)
    return std::nullopt;
  const exec::ExecConfig c = executor_planned_config(model, training, stage);
  // exec/cuda/cuda_trainer.cu and exec/cpu/cpu_trainer.cpp (constructors): the frozen base's engine over the
  // model's layout, its block weights left out when NF4 holds them, and the adapters' engine over their own.
  ExecutorLoraFigures f;
  f.base = layout_figures(exec::ParamLayout(c.shape, exec::zero_alignment(world), !c.lora.quantize_nf4), training,
                          world, stage);
  f.adapters = layout_figures(exec::trained_layout(c, world), training, world, stage);
  return f;
}

}  // namespace zeroplan
