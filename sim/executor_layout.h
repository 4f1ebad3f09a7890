// The planner's view of zeroplan's own executor (`--engine zeroplan`): the executor's flat parameter buffer,
// its ZeRO partition and what its engine allocates beside the model states, taken from the executor's own
// layout code (exec/param_layout.h, exec/zero/zero_buffer_layout.h: the pure-C++ zeroplan_exec_layout
// library), so that predicted bytes and buffers equal what `zeroplan run` measures by construction.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/model_description.h"
#include "core/training_config.h"
#include "exec/exec_config.h"
#include "exec/param_layout.h"

namespace zeroplan {

// The executor trains transformers of the gpt2 family (learned positions, LayerNorm, GELU, biases, tied) and the
// llama family (rotary positions with optional llama3 scaling, RMSNorm, SwiGLU, grouped-query attention, optional
// q/k/v biases, tied or untied): one block pipeline configured by exec::ModelShape.
// Throws InputError naming the model's field the executor cannot train.
exec::ModelShape executor_shape(const ModelDescription& model);
// A layer list with ops (core/layer_ops.h) as the executor runs it; throws InputError for anything else.
exec::NetworkShape executor_network(const ModelDescription& model);
// The executor's flat layout of either kind, aligned for `world` ranks.
exec::ParamLayout executor_param_layout(const ModelDescription& model, int world);
bool executor_trains(const ModelDescription& model);
// Throws InputError (source, field) when the executor cannot run seq_len tokens of this model (Mistral's
// sliding window shorter than the sequence).
void check_executor_sequence_length(const ModelDescription& model, std::int64_t seq_len, const std::string& source,
                                    const std::string& field);

// The engine's ZeRO settings for a training configuration (DeepSpeed's zero_optimization fields).
exec::ZeroSettings executor_zero_settings(const TrainingConfig& training, int stage);

struct ExecutorLayoutFigures {
  std::int64_t flat_elements = 0;        // the flat buffer: padded vocabulary, tensors aligned for the world
  std::int64_t partition_elements = 0;   // one rank's partition (stages 1-3)
  std::int64_t buckets = 0;              // gradient buckets (one collective each per reduction)
  // Bytes of the gradient bucket buffers (stages 2-3), the accumulation scratch and the fp32 communication copy.
  std::int64_t gradient_buffer_bytes = 0;
  // Stages 0-1 with fp32 gradient accumulation: the micro-step gradients backward writes (model precision).
  std::int64_t micro_step_gradient_elements = 0;
  std::int64_t persistent_elements = 0;     // stage 3: tensors kept whole
  std::int64_t persistent_buckets = 0;
  std::int64_t arena_elements = 0;          // stage 3: gathered-parameter arena
  // Stage 3, per gather unit: its partitioned buckets (an all-gather call each, the unit's in one NCCL group:
  // exec/zero/zero_engine.cpp gather_unit) and all its buckets (a reduce-scatter call each, grouped by the layer
  // that finishes them: reduce_buckets). Empty below stage 3.
  std::vector<std::int64_t> unit_gather_calls;
  std::vector<std::int64_t> unit_reduce_calls;
  std::vector<std::int64_t> unit_gather_elements;  // the elements of those partitioned buckets (padding included)
  std::int64_t gathered_elements = 0;       // stage 3: all-gather volume of one micro-step (forward + backward)
  std::int64_t gathers = 0;                 // stage 3: unit gathers per micro-step
  // Stage 3, per gather unit (the model's layers, in order): whether the fetch plan gathers it again for its
  // backward use (1), or it stays gathered from the forward (0: core/zero3_fetch_plan.h's reuse rule, which keeps
  // every unit of a model below stage3_max_reuse_distance). Empty below stage 3.
  std::vector<char> unit_regathered_for_backward;
  // Stage 3, tied embeddings: whether the plan gathers the embeddings again for the LM head at the end of the forward
  // (released after the first layer because the head's use lies beyond stage3_max_reuse_distance: GPT-2 1.5B at the
  // default 1e9 elements).
  bool head_regathers_embeddings = false;
  // Stages 2-3 of a transformer: the gradient partition over the kept blocks' MLP tensors (exec/activation_accounting.h
  // mlp_saved_layout), and the bytes of that allocation past the blocks' own (the head unit's chunks).
  bool gradient_partition_over_activations = false;
  std::int64_t gradient_partition_beyond_bytes = 0;
  std::int64_t param_staging_elements = 0;  // stage 3 with offload_param cpu: device staging buffers, all of them
  std::int64_t largest_chunk = 0;           // stage 3: the largest partition chunk (offload_param.buffer_size)
  // offload_optimizer: rank 0's pieces (each bucket's chunk cut at min(kOffloadPieceElements, sub_group_size),
  // exec/zero/zero_engine.cpp setup_offload) and the largest (the NVMe swap buffers hold one each).
  std::int64_t offload_pieces = 0;
  std::int64_t largest_offload_piece = 0;
  std::vector<std::int64_t> offload_piece_elements;  // rank 0's pieces in the order the CPU AdamW steps them
  // offload_param nvme (exec/zero/zero_buffer_layout.h, rank 0's partition, the training precision's bytes): the
  // swap files, the pinned swap buffers, the disk's bytes per step (param_nvme_traffic: the fetch plan's reads less
  // the chunks still in a swap buffer, the update's writes, and with fp32 and the device AdamW the update's reads),
  // the elements kept in host memory (persistent chunks, max_in_cpu) and the largest chunk on NVMe
  // (offload_param.buffer_size must hold it).
  std::int64_t param_nvme_file_bytes = 0;
  std::int64_t param_swap_buffer_bytes = 0;
  std::int64_t param_nvme_read_bytes_per_step = 0;
  std::int64_t param_nvme_write_bytes_per_step = 0;
  // Per micro-step, per gather unit: the share of the unit's partition bytes the disk reads for its forward gather,
  // for its backward regather (when the plan has one), and for the tied head's reread of the embeddings (per
  // micro-step); 0 where every chunk was still in a swap buffer or is kept in host memory.
  std::vector<std::vector<double>> param_nvme_forward_read_share;
  std::vector<std::vector<double>> param_nvme_backward_read_share;
  std::vector<double> param_nvme_head_read_share;
  std::int64_t param_host_elements = 0;
  std::int64_t largest_nvme_chunk = 0;
};

// For a model the executor trains, its figures at `world` ranks and `stage`; nullopt otherwise.
std::optional<ExecutorLayoutFigures> executor_layout_figures(const ModelDescription& model,
                                                             const TrainingConfig& training, int world, int stage);

// LoRA on the executor (exec/zero/zero_engine.h Trainability): the frozen base's engine (parameters only; at stage 3
// partitioned and gathered by its fetch plan, never reduced or updated) and the adapters' (every state, their
// gradients reduced and, at stages 1-3, their parameters gathered after the step), each with its own layout,
// partition and buckets. nullopt without LoRA or for a model the executor does not train.
struct ExecutorLoraFigures {
  ExecutorLayoutFigures base;
  ExecutorLayoutFigures adapters;
};
std::optional<ExecutorLoraFigures> executor_lora_layout_figures(const ModelDescription& model,
                                                                const TrainingConfig& training, int world, int stage);

}  // namespace zeroplan
