// The training configuration: micro-batch, sequence, precision, optimizer, ZeRO stage and offload,
// activation checkpointing, bucket and prefetch sizes. Built from defaults, a DeepSpeed config file
// (core/deepspeed_config.h) and command-line flags (flags win).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace zeroplan {

enum class Precision { fp32, fp16, bf16 };
enum class OptimizerKind { adamw, sgd_momentum, adam_8bit };
enum class OffloadDevice { none, cpu, nvme };
enum class Checkpointing { none, selective, full };
// Whose training engine the memory model describes: DeepSpeed's (the default: what users run, its code paths in
// sim/deepspeed_engine.h), zeroplan's own executor (exec/), which keeps 16-bit gradients only (AdamW upcasts them in
// registers), reduces in place over its flat gradient buffer (no bucket copies) and allocates exact sizes through
// one tagged allocator (no caching reserve), or an ideal engine: the ZeRO paper's schedule (reduce-scatter, 2P/3P
// traffic, reductions overlapped as their buckets fill) with DeepSpeed's buffer sizes and no framework's overheads,
// the bound any engine can reach (the PyTorch peers are timed against it). `zeroplan run` predicts with the zeroplan
// engine, so measured and predicted describe the same program.
enum class TrainingEngine { deepspeed, zeroplan, ideal };
// Which Adam DeepSpeed builds (deepspeed/runtime/engine.py get_optimizer_configuration and
// _configure_basic_optimizer): its own FusedAdam (multi_tensor_apply kernels over chunks of the parameters) unless
// the optimizer params say "torch_adam": true, which builds torch.optim.AdamW, torch's foreach implementation by
// default and its fused one with "fused": true. Under ZeRO-Offload the CPU Adam (DeepSpeedCPUAdam) runs instead.
enum class AdamImplementation { deepspeed_fused, torch_foreach, torch_fused };
// How the frozen base of a LoRA plan holds its linear weights (--quantize-base): 16-bit as trained; bitsandbytes'
// NF4 with double quantisation (QLoRA, Dettmers et al. 2023, arXiv 2305.14314; bitsandbytes functional.py
// quantize_4bit with compress_statistics); or LLM.int8 weights (bitsandbytes Int8Params: int8 codes and one fp32
// scale per output row, arXiv 2208.07339).
enum class BaseQuantization { none, nf4, int8 };
// Whose modules the training script builds the model from, under the DeepSpeed engine: the harness's own PyTorch
// model (bench/exec/pytorch_peer.py's GPT-2, which bench/deepspeed/ds_peer.py trains from a zeroplan description:
// nn.LayerNorm, fused GELU, one QKV linear) or transformers' (AutoModelForCausalLM.from_config from a Hugging Face
// config.json, as a script with the Trainer or accelerate builds it: modeling_llama.py's eager RMSNorm, SwiGLU MLP
// and attention glue save more per token, sim/activation_memory.h). The default follows where the model came
// from (ModelDescription::hf_config); --model-code sets it.
enum class ModelCode { harness, transformers };

std::string to_string(Precision precision);
std::string to_string(OptimizerKind optimizer);
std::string to_string(OffloadDevice device);
std::string to_string(Checkpointing checkpointing);
std::string to_string(TrainingEngine engine);
std::string to_string(AdamImplementation implementation);
std::string to_string(BaseQuantization quantization);
std::string to_string(ModelCode code);
// Parse the names above; throw InputError(source, field, "expected one of ...") on anything else.
Precision parse_precision(const std::string& text, const std::string& source, const std::string& field);
OptimizerKind parse_optimizer(const std::string& text, const std::string& source, const std::string& field);
OffloadDevice parse_offload_device(const std::string& text, const std::string& source, const std::string& field);
Checkpointing parse_checkpointing(const std::string& text, const std::string& source, const std::string& field);
TrainingEngine parse_engine(const std::string& text, const std::string& source, const std::string& field);
ModelCode parse_model_code(const std::string& text, const std::string& source, const std::string& field);

// Bytes per element of a 16/32-bit training precision's model weights and gradients.
int precision_bytes(Precision precision);
// Optimizer state bytes per parameter, excluding the fp32 master copy: AdamW 8 (momentum + variance fp32),
// SGD with momentum 4, 8-bit Adam 2 (two 1-byte states; block-wise quantization constants are added by sim).
int optimizer_state_bytes_per_param(OptimizerKind optimizer);

// DeepSpeed's zero_optimization section, with DeepSpeed's code defaults (zero-formulas.md section 3).
struct ZeroConfig {
  int stage = 0;                                   // 0, 1, 2 or 3
  OffloadDevice offload_optimizer = OffloadDevice::none;
  OffloadDevice offload_param = OffloadDevice::none;  // stage 3 only
  // overlap_comm: DeepSpeed defaults it to true for stage 3 only (runtime/zero/config.py overlap_comm_valid). When
  // no one gave it (overlap_comm_given false), a plan takes the default of its own stage (sim/plan_choice.cpp).
  bool overlap_comm = false;
  bool overlap_comm_given = false;
  // Stages 1-2 reduce each gradient bucket with one all-reduce over every rank and keep their own slices
  // (stage_1_and_2.py average_tensor, "use_multi_rank_bucket_allreduce", default true); false reduces each rank's
  // slices to it ("reduce" collectives). reduce_scatter false makes stages 1-3 all-reduce whole buckets.
  bool use_multi_rank_bucket_allreduce = true;
  bool reduce_scatter = true;
  bool contiguous_gradients = true;
  std::int64_t reduce_bucket_size = 500'000'000;   // elements
  std::int64_t allgather_bucket_size = 500'000'000;  // elements (stage 1/2 parameter all-gather)
  std::int64_t prefetch_bucket_size = 50'000'000;  // elements (stage3_prefetch_bucket_size)
  std::int64_t max_live_parameters = 1'000'000'000;  // elements (stage3_max_live_parameters)
  std::int64_t max_reuse_distance = 1'000'000'000;   // elements (stage3_max_reuse_distance)
  std::int64_t param_persistence_threshold = 100'000;  // elements (stage3_param_persistence_threshold)
  std::int64_t sub_group_size = 1'000'000'000;     // elements (optimizer step granularity)
  bool zero_init = true;                           // stage 3: model built partitioned (deepspeed.zero.Init, as HF
                                                   //   from_pretrained does); false: materialized whole first
  bool pin_memory = true;                          // offload buffers pinned
  // NVMe staging buffers (offload_param / offload_optimizer "buffer_count" and "buffer_size").
  std::int64_t param_buffer_count = 5;
  std::int64_t param_buffer_size = 100'000'000;    // elements
  std::int64_t optimizer_buffer_count = 4;
  // offload_param.max_in_cpu: partition elements kept in pinned host memory with device nvme, the rest in the
  // swap files. DeepSpeed's default, 1e9 (runtime/zero/offload_config.py), read by stage3.py
  // _create_param_groups_fp16_flat_cpu_memory: a pinned flat buffer of up to max_params_in_cpu elements, and
  // the sub-groups that fit in it, in order, never go to NVMe (_create_fp16_partitions_with_defragmentation).
  std::int64_t param_max_in_cpu = 1'000'000'000;
  // DeepSpeed's "aio" section (deepspeed/runtime/swap_tensor/aio_config.py defaults): the NVMe swappers' I/O.
  std::int64_t aio_block_size = 1'048'576;  // bytes per request
  std::int64_t aio_queue_depth = 8;         // requests in flight
  bool aio_overlap_events = true;           // submit as requests complete (false: in batches of queue_depth)
  // Where NVMe offload swaps (offload_optimizer / offload_param "nvme_path"); DeepSpeed's docs use /local_nvme.
  std::string nvme_path = "/local_nvme";
};

// LoRA (Hu et al. 2021, arXiv 2106.09685) as PEFT 0.21 builds it (peft/tuners/lora/config.py LoraConfig): rank-r
// adapters A (r x in) and B (out x r) beside each targeted linear, everything else frozen (bias "none").
// Defaults are PEFT's: r 8, lora_alpha 8, and the targets PEFT picks for the model type when target_modules is None
// (core/lora_modules.h). Off unless --lora-rank, --lora-alpha or --lora-targets is given.
struct LoraSettings {
  bool enabled = false;
  std::int64_t rank = 8;
  double alpha = 8.0;
  std::vector<std::string> targets;  // PEFT module names, resolved against the model (core/lora_modules.h)
  BaseQuantization quantize_base = BaseQuantization::none;
};

// fp16 dynamic loss scaling, DeepSpeed semantics (deepspeed/runtime/fp16/loss_scaler.py).
struct LossScaleConfig {
  double initial_scale_power = 16;   // initial scale 2^16
  std::int64_t loss_scale_window = 1000;
  std::int64_t hysteresis = 2;
  double min_loss_scale = 1.0;
  double static_loss_scale = 0.0;    // "loss_scale" > 0 fixes the scale
  bool consecutive_hysteresis = false;  // a step without overflow restores the hysteresis budget
};

struct TrainingConfig {
  std::int64_t micro_batch = 1;        // samples per GPU per micro-step
  std::int64_t seq_len = 1024;         // tokens per sample (transformers)
  std::int64_t grad_accum = 1;         // micro-steps per optimizer step
  Precision precision = Precision::bf16;
  OptimizerKind optimizer = OptimizerKind::adamw;
  ZeroConfig zero;
  Checkpointing checkpointing = Checkpointing::none;
  TrainingEngine engine = TrainingEngine::deepspeed;
  ModelCode model_code = ModelCode::harness;  // the DeepSpeed engine's model: whose modules build it
  // DeepSpeed activation_checkpointing (ZeRO-R Pa / Pa+cpu): checkpoints partitioned across model-parallel
  // ranks, or kept in host memory. They take effect only with checkpointing on.
  bool partition_activations = false;
  bool cpu_checkpointing = false;
  bool fused_attention = true;         // flash-style attention: no s x s score matrix stored
  bool fused_cross_entropy = false;    // loss gradient written in place over the 16-bit logits
  bool fp32_loss = true;               // logits upcast to fp32 for the loss (HF/DeepSpeed default)
  // torch.autocast over fp32 parameters (plain PyTorch DDP / ZeroRedundancyOptimizer training) instead of a
  // 16-bit model with an fp32 master copy (DeepSpeed, FSDP mixed precision): the residual stream and the norms
  // stay fp32, activations are cast to 16-bit before each GEMM, weights are cast every step, and gradients and
  // parameters are communicated in fp32. Used by the simulator's compute and communication times only.
  bool autocast_fp32_params = false;
  double gradient_clipping = 1.0;      // 0: off
  // DeepSpeed's data_types.grad_accum_dtype and communication_data_type (runtime/engine.py get_data_types and the
  // communication_data_type property): unset means the model's precision.
  std::optional<Precision> grad_accum_dtype;
  std::optional<Precision> communication_dtype;
  AdamImplementation adam_implementation = AdamImplementation::deepspeed_fused;
  // OpenMP threads each rank's CPU Adam runs on (--cpu-threads-per-rank); 0: the node's cores divided among its
  // ranks (torchrun's own default is one thread per process, OMP_NUM_THREADS=1).
  std::int64_t cpu_threads_per_rank = 0;
  // The training host's speed at DeepSpeed's Python (--host-op-seconds: seconds per small eager CUDA operation,
  // bench/deepspeed/ds_peer.py host_probe); 0: the cluster's own host (ClusterDescription::eager_op_seconds).
  double host_eager_op_seconds = 0.0;
  // Whether the training script calls torch.cuda.empty_cache() after deepspeed.initialize (--ds-empty-cache-after-init):
  // a script does not, and the caching allocator then keeps the blocks initialize freed (sim/deepspeed_memory.h
  // deepspeed_flat_buffer_segments); bench/deepspeed/ds_peer.py's rows before 2026-11-28 did.
  bool deepspeed_empty_cache_after_init = false;
  // zeroplan's executor under `zeroplan run --deterministic`: reductions in a fixed order, and its own attention
  // kernels in place of cuDNN's fused attention, whose workspace it then does not allocate
  // (exec/activation_accounting.h cudnn_attention_offered).
  bool deterministic = false;
  LossScaleConfig loss_scale;
  LoraSettings lora;
  double learning_rate = 3e-4;
  double weight_decay = 0.1;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.95;
  double adam_epsilon = 1e-8;

  // What was resolved or assumed while reading the inputs ("auto" resolutions, derived values), printed
  // with the plan so nothing is silent; and warnings (unknown DeepSpeed keys).
  std::vector<std::string> notes;
  std::vector<std::string> warnings;

  std::int64_t tokens_per_micro_step() const { return micro_batch * seq_len; }
};

// Sets whose engine the memory model describes. The zeroplan engine (exec/) implies what its executor stores:
// flash attention, dlogits written in place over the 16-bit logits, no fp32 copy of the logits; a note says so.
// `plan`, the GUI and `run` all call this, so the executor and its prediction describe the same program.
void use_engine(TrainingConfig& training, TrainingEngine engine);

nlohmann::json training_to_json(const TrainingConfig& training);

}  // namespace zeroplan
