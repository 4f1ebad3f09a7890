// LoRA and QLoRA plans (training.lora, core/lora_modules.h): what PEFT 0.21 and bitsandbytes build, and what each
// ZeRO stage of DeepSpeed 0.19.8 does with it.
// - Trainable: the adapters only, A (r x in) and B (out x r) per adapted module, no bias (peft/tuners/lora/layer.py
//   LoraLayer.update_layer: nn.Linear(in, r, bias=False), nn.Linear(r, out, bias=False)); every other parameter is
//   frozen (peft/tuners/lora/model.py _mark_only_adapters_as_trainable, bias "none").
// - Their dtype: PEFT upcasts 16-bit adapters to fp32 (get_peft_model's autocast_adapter_dtype=True,
//   peft/tuners/tuners_utils.py BaseTuner._cast_adapter_dtype), but deepspeed.initialize casts the module's floating
//   parameters to the 16-bit training dtype (engine.py _configure_distributed_model) and keeps the fp32 master in
//   its optimizer, so under DeepSpeed the adapters are 16-bit parameters with an fp32 master, like any model's.
//   The integer codes of a quantised base are not floating point and are left alone.
// - Which of them each stage partitions: ZeRO stages 1-2 partition what the optimizer holds, the parameter groups
//   the client passes (stage_1_and_2.py DeepSpeedZeroOptimizer.__init__: only params with requires_grad are
//   flattened into bit16_groups, then partitioned): the adapters' fp32 master, states and (stage 2) gradients. The
//   frozen base is never in a group and stays whole on every GPU. Stage 3 partitions every parameter of the module,
//   frozen or not (partition_parameters.py Init / _convert_to_zero_parameters: every nn.Parameter becomes a
//   partitioned ds_tensor), so the base is partitioned too and gathered for each forward and backward, while the
//   optimizer holds the adapters' partitions only (stage3.py _get_trainable_parameter_groups).
// - The base's bytes: 16-bit, or each quantised linear weight as bitsandbytes stores it: NF4 with double
//   quantisation (functional.py quantize_4bit with compress_statistics: 4-bit codes packed two per byte, one
//   absmax per block of 64, those absmax quantised to 8 bits per block of 256 with an fp32 absmax each and one fp32
//   offset per tensor), or LLM.int8 (nn/modules.py Int8Params: int8 codes and an fp32 scale per output row, SCB).
//   transformers quantises every linear layer but the output head (integrations/bitsandbytes.py
//   replace_with_bnb_linear, get_keys_to_not_convert keeps lm_head); embeddings, norms and biases stay 16-bit. At
//   stage 3 the codes are partitioned as a 16-bit-storage parameter (bnb_4bit_quant_storage, transformers'
//   DeepSpeed ZeRO-3 QLoRA recipe); the quantisation constants live in quant_state, not in a parameter, and stay
//   whole on every GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/cluster_description.h"
#include "core/model_description.h"
#include "core/training_config.h"
#include "core/units.h"
#include "sim/compute_time.h"
#include "sim/parameter_tensors.h"

namespace zeroplan {

struct MemoryInputs;
struct MemoryTerm;

// bitsandbytes' bytes for one quantised weight of `elements` values: NF4 with double quantisation,
// ceil(n/2) codes + ceil(n/64) 8-bit absmax + 4 * ceil(ceil(n/64)/256) fp32 second-level absmax + 4 (the offset);
// LLM.int8, n int8 codes + 4 * rows fp32 scales.
Bytes nf4_double_quant_bytes(std::int64_t elements);
Bytes nf4_constant_bytes(std::int64_t elements);  // the constants alone (all but the codes)
Bytes int8_weight_bytes(std::int64_t elements, std::int64_t rows);

struct LoraFigures {
  std::int64_t blocks = 0;                   // transformer blocks (L)
  std::int64_t adapted_per_block = 0;        // adapted linear modules in one block
  std::int64_t adapted_modules = 0;          // in the model
  std::int64_t trainable_params = 0;         // sum of r * (in + out) over adapted modules
  std::int64_t rank_sum_per_block = 0;       // r per adapted module of a block: x*A's width summed
  std::int64_t largest_adapter_tensor = 0;   // max of r*in, r*out
  std::int64_t adapter_tensors_per_block = 0;
  std::int64_t base_params = 0;              // the frozen model (model.params())
  std::int64_t quantized_elements = 0;       // base weights held quantised (0 without --quantize-base)
  std::int64_t quantized_tensors = 0;
  Bytes quantized_code_bytes = 0;            // packed codes (partitioned at stage 3)
  Bytes quantized_constant_bytes = 0;        // absmax / scales (whole on every GPU)
  std::int64_t largest_quantized_elements = 0;
  std::int64_t peft_all_params = 0;          // print_trainable_parameters' "all params"
  double adapter_gemm_flops_per_token = 0.0; // forward FLOPs of the adapters, per token, whole model
};

LoraFigures lora_figures(const ModelDescription& model, const TrainingConfig& training);

// PEFT's print_trainable_parameters line (peft_model.py PeftModel.print_trainable_parameters over
// get_nb_trainable_parameters): "trainable params: 4,194,304 || all params: 6,742,609,920 || trainable%: 0.0622".
// get_nb_trainable_parameters counts a bitsandbytes Params4bit as numel() * 2 * its storage's bytes (its numel is
// the packed storage's), so a 4-bit base counts as its unquantised elements; an Int8Params counts its int8 numel.
std::string peft_trainable_parameters_line(const LoraFigures& figures);

// The "lora" object of the plan documents (null without LoRA): rank, alpha, targets, quantisation, PEFT's counts
// and its print_trainable_parameters line.
nlohmann::json lora_to_json(const ModelDescription& model, const TrainingConfig& training);

// The frozen base's device bytes at a stage on `world_size` ranks: 16-bit elements and quantised codes whole at
// stages 0-2, partitioned (ceil(./N)) at stage 3 (none with offload_param); constants whole.
struct LoraBaseBytes {
  Bytes unquantized = 0;  // embeddings, norms, biases, output head (and every weight without quantisation)
  Bytes codes = 0;
  Bytes constants = 0;
  Bytes dequantized_weight = 0;  // one 16-bit weight of the largest quantised layer, live during its GEMM
  Bytes adapter_activations = 0; // x*A saved per adapted module (tokens * r * bytes)
  Bytes total() const;
};
LoraBaseBytes lora_base_bytes(const LoraFigures& figures, const TrainingConfig& training, int stage,
                              std::int64_t world_size, bool params_offloaded, std::int64_t tokens);

// The memory inputs of a LoRA plan: the trainable parameters are the adapters (P, its partition and its largest
// tensor below stage 3), so every optimizer, gradient and bucket term of the engine is the adapters'; stage 3's
// gathered-parameter figures stay the whole model's, which its coordinator gathers.
void apply_lora_to_memory_inputs(const LoraFigures& figures, MemoryInputs& in);

// Stage 3 with a quantised base gathers the codes, not 16-bit weights: the bytes a gathered (non-persistent) element
// of each layer carries (a block's quantised linears at their codes' bytes, everything else at the training
// precision's), and over the whole model's gathered parameters. Empty / the precision's bytes without quantisation.
std::vector<double> lora_gather_bytes_per_element(const ModelDescription& model, const TrainingConfig& training);
double lora_model_gather_bytes_per_element(const ModelDescription& model, const TrainingConfig& training);

// For DeepSpeed's flat-buffer replay (deepspeed_memory.cpp): the trainable tensors deepspeed.initialize moves to
// the device and flattens, the adapters' A and B.
template <typename Tensor>
void for_each_adapter_tensor(const ModelDescription& model, const TrainingConfig& training, Tensor&& tensor);

// The tensors DeepSpeed's optimizer flattens and updates, in the model's parameter order: a LoRA plan's adapters (its
// frozen base keeps tensors of its own, which nothing frees), else every layer's parameter tensors
// (sim/parameter_tensors.h).
template <typename Tensor>
void for_each_trainable_tensor(const ModelDescription& model, const TrainingConfig& training, Tensor&& tensor);

void explain_lora_memory(const LoraFigures& figures, const LoraBaseBytes& base, const TrainingConfig& training,
                         int stage, std::int64_t world_size, std::int64_t tokens, std::vector<MemoryTerm>& terms);

// Per-layer compute of a LoRA plan (in place over layer_compute_times' result):
// - no weight gradients for frozen weights, norms, biases or embeddings: autograd computes a gradient only for
//   what requires one (torch/csrc/autograd: a frozen leaf gets no AccumulateGrad; derivatives.yaml's mm weight
//   gradient runs only for inputs that need it), so every layer's backward_weight_seconds is dropped;
// - the adapters' GEMMs per adapted module (x*A, then (xA)*B; backward the same two for the inputs' gradients and
//   two for A's and B's weight gradients), each timed on the GEMM curve, and for PEFT (the DeepSpeed and ideal
//   engines) the scale-and-add of their output (result + lora_B(lora_A(x)) * scaling, peft/tuners/lora/layer.py
//   Linear.forward) as streaming kernels; zeroplan's executor folds the scale and the add into the GEMMs;
// - QLoRA: each quantised weight dequantised to 16 bits at every forward (bitsandbytes MatMul4Bit.forward:
//   F.dequantize_4bit then the GEMM) and again in backward for the input gradient (MatMul4Bit.backward), and at the
//   recompute under checkpointing: a memory-bound pass reading the codes and constants and writing the 16-bit
//   weight, at the cluster's streaming bandwidth like the other elementwise kernels (ComputeTimer). An int8 base is
//   timed the same way (bitsandbytes MatMul8bitLt's backward dequantises CB * SCB for the input gradient; its
//   forward's int8 GEMM with the outlier decomposition is taken as dequantise + 16-bit GEMM, not measured here).
void apply_lora_to_layer_compute(const ModelDescription& model, const ClusterDescription& cluster,
                                 const TrainingConfig& training, std::vector<LayerCompute>& compute);

// The seconds of one micro-step's dequantisation (forward + backward + recompute), for --explain and tests.
double lora_dequantization_seconds(const ModelDescription& model, const ClusterDescription& cluster,
                                   const TrainingConfig& training);

// ---- template implementation ----
std::vector<std::int64_t> lora_adapter_tensor_sizes_per_block(const ModelDescription& model,
                                                               const TrainingConfig& training);

template <typename Tensor>
void for_each_adapter_tensor(const ModelDescription& model, const TrainingConfig& training, Tensor&& tensor) {
  if (!training.lora.enabled || !model.transformer) return;
  const std::vector<std::int64_t> sizes = lora_adapter_tensor_sizes_per_block(model, training);
  for (std::int64_t block = 0; block < model.transformer->layers; ++block)
    for (std::int64_t numel : sizes) tensor(numel);
}

template <typename Tensor>
void for_each_trainable_tensor(const ModelDescription& model, const TrainingConfig& training, Tensor&& tensor) {
  if (training.lora.enabled) {
    for_each_adapter_tensor(model, training, tensor);
    return;
  }
  for (const LayerDescription& layer : model.layers) for_each_parameter_tensor(model, layer, tensor);
}

}  // namespace zeroplan
