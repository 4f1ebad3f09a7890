#include "sim/executor_layout.h"

#include "core/input_error.h"
#include "exec/param_layout.h"
#include "exec/zero/zero_buffer_layout.h"
#include "exec/zero/zero_partition.h"

namespace zeroplan {

namespace {

// Why the executor cannot train this model, or empty.
std::pair<std::string, std::string> executor_gap(const ModelDescription& model) {
  if (!model.transformer || model.transformer->family != ModelFamily::gpt2)
    return {"transformer.family", "the executor trains gpt2-family transformers; got " + to_string(model.family)};
  const TransformerShape& t = *model.transformer;
  if (t.kv_heads != t.heads) return {"kv_heads", "the gpt2 executor needs kv_heads == heads (no grouped-query attention)"};
  if (t.ffn_hidden != 4 * t.hidden) return {"ffn_hidden", "the gpt2 executor needs ffn_hidden == 4 * hidden"};
  if (t.norm != NormKind::layer_norm) return {"norm", "the gpt2 executor needs layer_norm"};
  if (t.activation != ActivationKind::gelu) return {"activation", "the gpt2 executor needs gelu"};
  if (!(t.attention_bias && t.mlp_bias)) return {"attention_bias", "the gpt2 executor needs biases on every linear layer"};
  if (!t.tied_embeddings) return {"tied_embeddings", "the gpt2 executor needs tied embeddings"};
  if (!t.learned_positions) return {"learned_positions", "the gpt2 executor needs learned positions"};
  if (t.embedding_norm) return {"embedding_norm", "the gpt2 executor needs no embedding norm"};
  if (t.hidden % 8 != 0) return {"hidden", "the gpt2 executor needs a multiple of 8"};
  if (t.heads < 1 || t.hidden % t.heads != 0 || (t.hidden / t.heads) % 8 != 0)
    return {"heads", "the gpt2 executor needs hidden/heads a multiple of 8"};
  return {};
}

}  // namespace

bool executor_trains(const ModelDescription& model) { return executor_gap(model).first.empty(); }

exec::Gpt2Shape executor_shape(const ModelDescription& model) {
  const auto [field, why] = executor_gap(model);
  if (!field.empty()) throw InputError(model.source, field == "transformer.family" ? field : "transformer." + field, why);
  const TransformerShape& t = *model.transformer;
  return exec::make_shape(t.vocab_size, t.hidden, t.layers, t.heads, t.max_seq);
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
  s.offload_param = stage == 3 && z.offload_param == OffloadDevice::cpu;
  s.param_buffer_count = z.param_buffer_count;
  s.param_buffer_elements = z.param_buffer_size;
  // DeepSpeed's dtype fields (run/training_run.cpp refuses what the executor does not implement): fp32 with a
  // 16-bit model changes where and how the gradients are summed (exec/zero/zero_engine.h).
  const bool mixed = training.precision != Precision::fp32;
  s.fp32_grad_accumulation = mixed && training.grad_accum_dtype == Precision::fp32;
  s.fp32_communication = mixed && training.communication_dtype == Precision::fp32;
  return s;
}

std::optional<ExecutorLayoutFigures> executor_layout_figures(const ModelDescription& model,
                                                             const TrainingConfig& training, int world, int stage) {
  if (!executor_trains(model) || world < 1 || training.zero.reduce_bucket_size < 1) return std::nullopt;
  const exec::ParamLayout layout(executor_shape(model), exec::zero_alignment(world));
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
  f.gathered_elements = buffers.train_plan.gathered_elements;
  f.gathers = buffers.train_plan.gathers;
  f.param_staging_elements = buffers.param_staging_total();
  f.largest_chunk = buffers.largest_chunk;
  const std::int64_t piece = std::min(exec::kOffloadPieceElements, std::max<std::int64_t>(1, zero.sub_group_elements));
  for (const exec::GradientBucket& b : partition.buckets()) {
    f.offload_pieces += (b.chunk + piece - 1) / piece;
    f.largest_offload_piece = std::max(f.largest_offload_piece, std::min(piece, b.chunk));
  }
  return f;
}

}  // namespace zeroplan
