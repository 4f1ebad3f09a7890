// The executor's own view of what it trains: the model's shape (a configuration of one block pipeline) and the
// training settings the step needs. cli/run_command.cpp fills it from the shared
// ModelDescription / TrainingConfig (core/), so exec/ itself has no dependency on core/ or sim/.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/layer_ops.h"

namespace zeroplan::exec {

enum class ExecPrecision { fp32, fp16, bf16 };
// What backward recomputes instead of keeping from forward.
// - selective: Korthikanti et al. 2022 (arXiv 2205.05198, sec. 5) recompute the attention core, which the flash
//   attention kernel never stores; the executor recomputes instead what is cheap to rebuild and large to keep: the
//   LN1 and LN2 outputs (a LayerNorm over the kept block input / LN2 input) and the GELU output (from the kept
//   pre-GELU FC output), 6 of the 16 e*sbh saved per layer, as llm.c does with its `-r 2` (train_gpt2.cu,
//   recompute: 1 GELU, 2 GELU and LayerNorm). They are rebuilt in the backward working set, so no buffer is added.
// - full: only each block's input is kept; backward reruns the block's forward first.
enum class ExecRecompute { none, selective, full };

std::string to_string(ExecPrecision precision);
int element_bytes(ExecPrecision precision);  // bytes of a parameter / activation / gradient element

// What the model is, as the executor builds it: one block pipeline (embedding, L pre-norm blocks, final norm,
// head) whose op kinds come from the shared model description (core/model_description.h; cli/run_command.cpp
// fills this from it). GPT-2 (Radford et al. 2019): learned positions, LayerNorm, tanh-GELU MLP of 4h, biases
// everywhere, tied head. Llama (Touvron et al. 2023, arXiv 2302.13971, 2307.09288; transformers'
// modeling_llama.py): rotary positions, RMSNorm, SwiGLU MLP (gate, up, down), grouped-query attention, no biases
// (Qwen2: q/k/v biases), an untied head. The trainers read only the kinds, never a family name.
enum class NormKind { layer_norm, rms_norm };
enum class MlpKind { gelu, swiglu };
enum class PositionKind { learned, rope };
// Which names the tensors carry in checkpoints and exports (run/hf_tensor_names.h) and how they are initialized:
// GPT-2's (nanoGPT's init, residual projections scaled) or transformers' Llama names (normal(0, 0.02) for every
// matrix, transformers LlamaPreTrainedModel._init_weights).
enum class TensorNaming { gpt2, llama };

// Llama 3's rope_scaling {"rope_type": "llama3"} (transformers modeling_rope_utils.py,
// _compute_llama3_parameters): inverse frequencies of long wavelengths divided by `factor`, a smooth blend
// between low_freq_factor and high_freq_factor.
struct RopeScaling {
  bool llama3 = false;
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  std::int64_t original_max_position = 8192;
};

struct ModelShape {
  std::int64_t vocab = 0;          // V: real vocabulary (softmax runs over these columns only)
  std::int64_t padded_vocab = 0;   // Vp: rows of the token embedding (and head), V rounded up to a multiple of 128
  std::int64_t hidden = 0;         // h (C)
  std::int64_t layers = 0;         // L
  std::int64_t heads = 0;          // a: query heads
  std::int64_t kv_heads = 0;       // key/value heads (== heads without grouped-query attention)
  std::int64_t head_size = 0;      // HS (hidden / heads for every model the executor trains)
  std::int64_t ffn_hidden = 0;     // F: the MLP's inner width (4h for GPT-2, intermediate_size for Llama)
  std::int64_t max_seq = 0;        // longest sequence (GPT-2: rows of the position embedding)
  NormKind norm = NormKind::layer_norm;
  double norm_eps = 1e-5;          // LayerNorm eps (GPT-2: 1e-5) or rms_norm_eps
  PositionKind position = PositionKind::learned;
  double rope_theta = 10000.0;     // RoPE base (Su et al. 2021, arXiv 2104.09864)
  RopeScaling rope_scaling;
  MlpKind mlp = MlpKind::gelu;
  bool qkv_bias = true;            // biases on the q/k/v projections
  bool attn_out_bias = true;       // a bias on the attention output projection
  bool mlp_bias = true;            // biases on the MLP projections
  bool norm_bias = true;           // LayerNorm's bias (RMSNorm has none)
  bool tied_head = true;           // the head is the token embedding (false: its own lm_head matrix)
  TensorNaming naming = TensorNaming::gpt2;

  std::int64_t head_dim() const { return head_size; }
  std::int64_t q_dim() const { return heads * head_size; }             // attention output width
  std::int64_t kv_dim() const { return kv_heads * head_size; }
  std::int64_t qkv_dim() const { return q_dim() + 2 * kv_dim(); }     // fused q, k, v projection rows
  // The MLP's first projection's rows: fc (F) for GELU, gate and up fused (2F) for SwiGLU.
  std::int64_t mlp_in_dim() const { return mlp == MlpKind::swiglu ? 2 * ffn_hidden : ffn_hidden; }
};

// V rounded up to a multiple of 128 (tensor-core friendly GEMM width, as llm.c pads 50257 to 50304; 50304
// is already a multiple of 128).
std::int64_t pad_vocab(std::int64_t vocab);
// GPT-2's shape (llm.c / nanoGPT): heads of hidden/heads, F = 4h, learned positions, LayerNorm, GELU, biases, tied.
ModelShape make_shape(std::int64_t vocab, std::int64_t hidden, std::int64_t layers, std::int64_t heads,
                      std::int64_t max_seq);
// A Llama shape: RMSNorm (eps), RoPE (theta), SwiGLU of ffn_hidden, kv_heads key/value heads, no biases, untied;
// the caller sets qkv_bias, tied_head and rope_scaling where the model has them.
ModelShape make_llama_shape(std::int64_t vocab, std::int64_t hidden, std::int64_t layers, std::int64_t heads,
                            std::int64_t kv_heads, std::int64_t ffn_hidden, std::int64_t max_seq,
                            double rope_theta = 10000.0, double norm_eps = 1e-5);

struct OptimizerSettings {
  double learning_rate = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double epsilon = 1e-8;
  double weight_decay = 0.1;    // applied to 2-D weights and embeddings only (GPT-2 / nanoGPT convention)
  double grad_clip = 1.0;       // global L2 norm; <= 0 disables clipping
};

// DeepSpeed's fp16 section (deepspeed/runtime/fp16/loss_scaler.py, DynamicLossScaler).
struct LossScaleSettings {
  double static_scale = 0.0;        // > 0: a fixed scale ("loss_scale" in the DeepSpeed config)
  double initial_scale_power = 16;  // initial dynamic scale 2^power
  std::int64_t scale_window = 1000;
  std::int64_t hysteresis = 2;
  double min_scale = 1.0;
  bool consecutive_hysteresis = false;
};

// The ZeRO side of the step (DeepSpeed's zero_optimization block, docs/config-json "ZeRO optimizations"). The
// engine (exec/zero/zero_engine.h) reads these; world size and rank come from the communicator.
struct ZeroSettings {
  int stage = 0;                                     // 0: DDP-like, 1: optimizer states, 2: + gradients, 3: + params
  std::int64_t reduce_bucket_elements = 500000000;   // reduce_bucket_size (DeepSpeed default 5e8 elements)
  std::int64_t allgather_bucket_elements = 500000000;  // allgather_bucket_size (DeepSpeed default 5e8)
  bool overlap_comm = true;        // reductions on the comm stream while backward runs
  bool reduce_scatter = true;      // stages 1-2: reduce-scatter buckets (false: all-reduce them, DeepSpeed's option)
  bool deterministic = false;      // fixed-order reductions everywhere (bit-identical repeated runs)
  // DeepSpeed's data_types.grad_accum_dtype and communication_data_type (runtime/engine.py get_data_types,
  // communication_data_type) when they are fp32 with a 16-bit model; both off in fp32 training. Backward still
  // writes each micro-step's gradients in the model's precision (as torch's .grad is); with
  // fp32_grad_accumulation they are summed over micro-steps, reduced and handed to AdamW in fp32 (DeepSpeed's
  // BF16_Optimizer: fp32 gradient accumulation, bf16_optimizer.py accumulate_hp_grads_and_remove_lp), with
  // fp32_communication every gradient reduction runs in fp32 (the bucket converted before its collective,
  // stage_1_and_2.py allreduce_bucket: tensor.to(communication_data_type)). exec/zero/zero_engine.h says where.
  bool fp32_grad_accumulation = false;
  bool fp32_communication = false;
  // Stage 3 (core/zero3_fetch_plan.h; DeepSpeed's stage3_* fields and defaults).
  std::int64_t prefetch_bucket_elements = 50000000;     // stage3_prefetch_bucket_size
  std::int64_t param_persistence_threshold = 100000;    // stage3_param_persistence_threshold
  std::int64_t max_live_parameters = 1000000000;        // stage3_max_live_parameters
  std::int64_t max_reuse_distance = 1000000000;         // stage3_max_reuse_distance
  // ZeRO-Offload (DeepSpeed's offload_optimizer {"device": "cpu"}, stages 1-3): the rank's fp32 master
  // parameters and AdamW moments live in host memory and the CPU AdamW (exec/offload/cpu_adamw.h) updates them.
  bool offload_optimizer = false;
  bool offload_pin_memory = true;  // offload_optimizer.pin_memory: page-locked host buffers (asynchronous copies)
  int cpu_optimizer_threads = 0;   // the CPU AdamW's threads; 0: offload::default_optimizer_threads(world)
  // sub_group_size: the optimizer steps the partition in pieces of at most this many elements (DeepSpeed
  // stage3.py's sub groups); the offload pipeline's pieces are at most this (and at most 2^24, zero_engine.cpp).
  std::int64_t sub_group_elements = 1000000000;
  // ZeRO-Infinity parameter offload (DeepSpeed's offload_param {"device": "cpu"}, stage 3 only; zero/stage3.py,
  // partition_parameters.py): the rank's 16-bit parameter partition lives in host memory (pinned when
  // offload_pin_memory: DeepSpeed's offload configs share one pin_memory here, core/training_config.h), each
  // gathered chunk is copied host-to-device into a staging buffer and all-gathered from there. DeepSpeed reads
  // buffer_count and buffer_size for NVMe swapping only (offload_config.py: "buffers in buffer pool for
  // parameter offloading to NVMe"; max_in_cpu likewise, NVMe only, not read here); the executor bounds its
  // device staging buffers by them: at most param_buffer_count buffers of at most param_buffer_elements each
  // (zero_buffer_layout.h).
  bool offload_param = false;
  std::int64_t param_buffer_count = 5;            // offload_param.buffer_count (DeepSpeed default 5)
  std::int64_t param_buffer_elements = 100000000;  // offload_param.buffer_size (DeepSpeed default 1e8 elements)
  // ZeRO-Infinity optimizer offload (offload_optimizer {"device": "nvme"}, with offload_optimizer): a non-empty
  // nvme_path puts the fp32 master partition and AdamW moments in files under it, swapped through
  // optimizer_buffer_count host buffers (exec/offload/optimizer_swapper.h); the update is that of offload to the
  // CPU. nvme_path_source / nvme_path_field name where the path came from in its errors.
  std::string nvme_path;
  std::string nvme_path_source = "DeepSpeed config";
  std::string nvme_path_field = "zero_optimization.offload_optimizer.nvme_path";
  std::int64_t optimizer_buffer_count = 4;  // offload_optimizer.buffer_count (DeepSpeed default 4)
  // ZeRO-Infinity parameter offload to NVMe (offload_param {"device": "nvme"}, with offload_param): a non-empty
  // param_nvme_path puts the 16-bit partition chunks in files under it (exec/offload/param_swapper.h), read ahead
  // of their all-gathers into min(param_buffer_count, chunks on NVMe) pinned buffers and written back after the
  // optimizer step (DeepSpeed swap_tensor/partitioned_param_swapper.py). param_max_in_cpu: partition elements
  // kept in pinned host memory instead, the first chunks in bucket order (offload_param.max_in_cpu, DeepSpeed's
  // default 1e9 elements, core/training_config.h).
  // Persistent tensors' chunks stay in host memory too (their whole copy is on the device; the step's update
  // gathers them right after writing them).
  std::string param_nvme_path;
  std::string param_nvme_path_source = "DeepSpeed config";
  std::string param_nvme_path_field = "zero_optimization.offload_param.nvme_path";
  std::int64_t param_max_in_cpu = 1'000'000'000;
  // DeepSpeed's "aio" section (deepspeed/runtime/swap_tensor/aio_config.py: block_size 1048576, queue_depth 8,
  // overlap_events true), for both swappers' stores (exec/offload/nvme_io.h). thread_count and single_submit
  // have no counterpart: one io_uring thread submits in batches.
  std::int64_t aio_block_bytes = std::int64_t{1} << 20;
  int aio_queue_depth = 8;
  bool aio_overlap_events = true;
};

// The offload pipeline's unit (exec/zero/zero_engine.cpp; the planner sizes NVMe swap buffers by it): the CPU
// AdamW starts on a piece as soon as it has arrived, and its copy to the device overlaps the next piece's update.
// 2^24 elements (64 MiB of fp32 master, 32 MiB of 16-bit gradients) keep the pipeline's fill and drain (one
// piece's copy each way, ~1-2 ms over PCIe 4/5) small beside the update of a GPT-2 1.5B partition, while a
// piece's CPU update (~30 ms at 5e8 elements/s) dwarfs its thread-pool wake-up.
constexpr std::int64_t kOffloadPieceElements = std::int64_t{1} << 24;

// Stage 3 with the optimizer states in host memory (exec/zero/zero_engine_offload.cpp offloaded_update): the pieces,
// in order, are updated a batch at a time (one hand-off to the CPU AdamW's threads) and each batch is copied to the
// device in one copy per contiguous run, while the next batch is updated. A batch closes once it holds
// kOffloadUpdateBatchElements. A model of many small tensors has a piece per bucket: ResNet-101 at stage 3 on two
// GPUs is a few hundred pieces of a few thousand to a few hundred thousand elements, and a hand-off, two time marks
// and a copy for each cost more host time than their updates did.
constexpr std::int64_t kOffloadUpdateBatchElements = std::int64_t{1} << 20;

// [first, last) ranges of consecutive pieces (given by their element counts), each a batch as above.
inline std::vector<std::pair<std::size_t, std::size_t>> offload_update_batches(
    const std::vector<std::int64_t>& piece_elements) {
  std::vector<std::pair<std::size_t, std::size_t>> batches;
  std::size_t first = 0;
  std::int64_t held = 0;
  for (std::size_t i = 0; i < piece_elements.size(); ++i) {
    held += piece_elements[i];
    if (held >= kOffloadUpdateBatchElements || i + 1 == piece_elements.size()) {
      batches.emplace_back(first, i + 1);
      first = i + 1;
      held = 0;
    }
  }
  return batches;
}

// A layer-list network as the model description gives it (core/layer_ops.h: each layer's ops over named tensors,
// PyTorch's semantics), and one sample's input: what the executor runs for ResNet-101 on CIFAR-10.
struct NetworkShape {
  std::vector<std::string> layer_names;
  std::vector<std::vector<LayerOp>> layers;
  TensorShape input;
  std::int64_t classes = 0;
};

// LoRA on the transformer pipeline (Hu et al. 2021, arXiv 2106.09685; PEFT 0.21 peft/tuners/lora/layer.py Linear):
// every adapted linear of every block computes base(x) + (alpha / rank) * B(A(x)), A (rank x in) and B (out x rank),
// lora_dropout 0, no adapter bias. The adapters are the trainable parameters (exec/lora_layout.h: their own flat
// layout, trained by the ZeRO engine); the base is frozen, held by a ZeRO engine without gradients or optimizer
// states (exec/zero/zero_engine.h Trainability::frozen). cli/run fills it from core/lora_modules.h resolve_lora.
struct LoraExecSettings {
  bool enabled = false;
  std::int64_t rank = 8;
  double alpha = 8.0;
  // The adapted modules by their path in a block, PEFT's names ("self_attn.q_proj", "mlp.down_proj"; GPT-2
  // "attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"), in the block's order.
  std::vector<std::string> modules;
  // PEFT's target_modules as the user gave them or PEFT's defaults (written in adapter_config.json).
  std::vector<std::string> targets;
  // --quantize-base nf4: the block linear weights of the base held as bitsandbytes NF4 codes with double-quantised
  // absmax (core/nf4_quantization.h) and dequantised in the matmul path (QLoRA).
  bool quantize_nf4 = false;
  double scaling() const { return alpha / static_cast<double>(rank); }
};

struct ExecConfig {
  ModelShape shape;               // a transformer (unused when network is set)
  LoraExecSettings lora;          // LoRA adapters on the transformer (off unless enabled)
  std::optional<NetworkShape> network;  // a layer list
  std::int64_t micro_batch = 1;  // B
  std::int64_t seq_len = 1024;   // T
  std::int64_t grad_accum = 1;
  ExecPrecision precision = ExecPrecision::bf16;
  ExecRecompute recompute = ExecRecompute::none;
  OptimizerSettings optimizer;
  LossScaleSettings loss_scale;
  ZeroSettings zero;
  std::uint64_t seed = 1337;     // parameter initialization
  // Keep each step's measured timeline (ZeroEngine::last_timeline: the collectives, the compute lane's waits, the
  // offload copies and, at stage 3, where each parameter unit's compute began): `zeroplan run --trace`.
  bool record_timeline = false;

  std::int64_t tokens_per_step() const { return micro_batch * seq_len * grad_accum; }
};

// Throws std::invalid_argument with a one-line message naming the field when the configuration cannot run
// (hidden not divisible by heads, seq_len > max_seq, ...).
void validate(const ExecConfig& config);

}  // namespace zeroplan::exec
