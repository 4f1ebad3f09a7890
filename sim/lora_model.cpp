#include "sim/lora_model.h"

#include <algorithm>
#include <cstdio>

#include "core/lora_modules.h"
#include "sim/memory_inputs.h"
#include "sim/memory_model.h"
#include "sim/saturating.h"
#include "sim/term_format.h"
#include "sim/zero_schedule.h"

namespace zeroplan {

namespace {

// bitsandbytes functional.py quantize_4bit: blocksize 64 (the default, and what transformers' BitsAndBytesConfig
// uses); with compress_statistics the absmax go through quantize_blockwise(absmax, blocksize=256).
constexpr std::int64_t kNf4Block = 64;
constexpr std::int64_t kNf4AbsmaxBlock = 256;

constexpr const char* kPeftLayer = "PEFT 0.21 peft/tuners/lora/layer.py LoraLayer.update_layer (lora_A: r x in, "
                                   "lora_B: out x r, no bias)";
constexpr const char* kBnb4bit = "bitsandbytes functional.py quantize_4bit (blocksize 64, compress_statistics: "
                                 "quantize_blockwise(absmax, blocksize=256) + offset); QLoRA arXiv 2305.14314 sec. 3";
constexpr const char* kBnbInt8 = "bitsandbytes nn/modules.py Int8Params (CB int8, SCB fp32 per row); "
                                 "LLM.int8() arXiv 2208.07339";
constexpr const char* kZero12Groups = "DeepSpeed 0.19.8 zero/stage_1_and_2.py __init__ (only the optimizer's "
                                      "param groups, requires_grad, are flattened and partitioned)";
constexpr const char* kZero3Partition = "DeepSpeed 0.19.8 zero/partition_parameters.py Init / "
                                        "_convert_to_zero_parameters (every parameter partitioned, frozen too)";

bool quantized(const TrainingConfig& training) { return training.lora.quantize_base != BaseQuantization::none; }

std::int64_t tokens_of(const TrainingConfig& training) { return sat_mul(training.micro_batch, training.seq_len); }

}  // namespace

Bytes nf4_double_quant_bytes(std::int64_t elements) {
  return sat_add(ceil_div(elements, 2), nf4_constant_bytes(elements));
}

Bytes nf4_constant_bytes(std::int64_t elements) {
  const std::int64_t blocks = ceil_div(elements, kNf4Block);
  // One 8-bit absmax per block; an fp32 absmax per 256 of those (state2.absmax); the fp32 offset (absmax.mean()).
  return sat_add(sat_add(blocks, sat_mul(4, ceil_div(blocks, kNf4AbsmaxBlock))), 4);
}

Bytes int8_weight_bytes(std::int64_t elements, std::int64_t rows) { return sat_add(elements, sat_mul(4, rows)); }

std::vector<std::int64_t> lora_adapter_tensor_sizes_per_block(const ModelDescription& model,
                                                               const TrainingConfig& training) {
  std::vector<std::int64_t> sizes;
  if (!training.lora.enabled) return sizes;
  const std::int64_t r = training.lora.rank;
  for (const BlockLinear& module : adapted_modules(model, training.lora.targets)) {
    sizes.push_back(sat_mul(r, module.in_features));   // lora_A.weight: r x in
    sizes.push_back(sat_mul(r, module.out_features));  // lora_B.weight: out x r
  }
  return sizes;
}

LoraFigures lora_figures(const ModelDescription& model, const TrainingConfig& training) {
  LoraFigures f;
  f.base_params = model.params();
  if (!training.lora.enabled || !model.transformer) return f;
  const std::int64_t L = model.transformer->layers;
  const std::int64_t r = training.lora.rank;
  f.blocks = L;
  std::int64_t per_block = 0;
  double flops_per_block = 0.0;
  for (const BlockLinear& module : adapted_modules(model, training.lora.targets)) {
    ++f.adapted_per_block;
    per_block = sat_add(per_block, sat_mul(r, sat_add(module.in_features, module.out_features)));
    f.rank_sum_per_block = sat_add(f.rank_sum_per_block, r);
    f.largest_adapter_tensor = std::max({f.largest_adapter_tensor, sat_mul(r, module.in_features),
                                         sat_mul(r, module.out_features)});
    flops_per_block += 2.0 * static_cast<double>(r) * static_cast<double>(module.in_features + module.out_features);
  }
  f.adapter_tensors_per_block = 2 * f.adapted_per_block;
  f.adapted_modules = sat_mul(L, f.adapted_per_block);
  f.trainable_params = sat_mul(L, per_block);
  f.adapter_gemm_flops_per_token = flops_per_block * static_cast<double>(L);

  // PEFT counts every parameter once (named_parameters), the adapters included; a Params4bit as numel * 2 for its
  // uint8 storage (numel = the packed ceil(n/2)), so an odd-sized weight counts one more.
  std::int64_t counted_base = f.base_params;
  if (quantized(training)) {
    for (const BlockLinear& module : block_linear_modules(model)) {
      const std::int64_t n = sat_mul(module.in_features, module.out_features);
      f.quantized_elements = sat_add(f.quantized_elements, sat_mul(L, n));
      f.quantized_tensors = sat_add(f.quantized_tensors, L);
      f.largest_quantized_elements = std::max(f.largest_quantized_elements, n);
      if (training.lora.quantize_base == BaseQuantization::nf4) {
        f.quantized_code_bytes = sat_add(f.quantized_code_bytes, sat_mul(L, ceil_div(n, 2)));
        f.quantized_constant_bytes = sat_add(f.quantized_constant_bytes, sat_mul(L, nf4_constant_bytes(n)));
        counted_base = sat_add(counted_base, sat_mul(L, 2 * ceil_div(n, 2) - n));
      } else {
        f.quantized_code_bytes = sat_add(f.quantized_code_bytes, sat_mul(L, n));
        f.quantized_constant_bytes = sat_add(f.quantized_constant_bytes, sat_mul(L, sat_mul(4, module.out_features)));
      }
    }
  }
  f.peft_all_params = sat_add(counted_base, f.trainable_params);
  return f;
}

std::string peft_trainable_parameters_line(const LoraFigures& f) {
  // peft_model.py: f"trainable params: {trainable_params:,d} || all params: {all_param:,d} || "
  // f"trainable%: {100 * trainable_params / all_param:.4f}"
  char percent[32];
  const double share = f.peft_all_params > 0 ? 100.0 * static_cast<double>(f.trainable_params) /
                                                   static_cast<double>(f.peft_all_params)
                                             : 0.0;
  std::snprintf(percent, sizeof percent, "%.4f", share);
  return "trainable params: " + num(f.trainable_params) + " || all params: " + num(f.peft_all_params) +
         " || trainable%: " + percent;
}

nlohmann::json lora_to_json(const ModelDescription& model, const TrainingConfig& training) {
  if (!training.lora.enabled) return nullptr;
  const LoraFigures f = lora_figures(model, training);
  return {{"rank", training.lora.rank},
          {"alpha", training.lora.alpha},
          {"targets", training.lora.targets},
          {"quantize_base", to_string(training.lora.quantize_base)},
          {"adapted_modules", f.adapted_modules},
          {"trainable_params", f.trainable_params},
          {"all_params", f.peft_all_params},
          {"print_trainable_parameters", peft_trainable_parameters_line(f)}};
}

Bytes LoraBaseBytes::total() const {
  return sat_add(sat_add(sat_add(unquantized, codes), sat_add(constants, dequantized_weight)), adapter_activations);
}

LoraBaseBytes lora_base_bytes(const LoraFigures& f, const TrainingConfig& training, int stage,
                              std::int64_t world_size, bool params_offloaded, std::int64_t tokens) {
  LoraBaseBytes b;
  if (!training.lora.enabled) return b;
  const int e = precision_bytes(training.precision);
  const std::int64_t n = std::max<std::int64_t>(1, world_size);
  const std::int64_t unquantized = f.base_params - f.quantized_elements;
  // Stages 0-2 hold the frozen base whole; stage 3 a 1/N partition of every parameter (none on the GPU with
  // offload_param), the quantisation constants whole (quant_state is no parameter).
  const auto held = [&](Bytes bytes) -> Bytes {
    if (stage < 3) return bytes;
    return params_offloaded ? 0 : ceil_div(bytes, n);
  };
  b.unquantized = held(sat_mul(e, unquantized));
  b.codes = held(f.quantized_code_bytes);
  b.constants = f.quantized_constant_bytes;
  b.dequantized_weight = quantized(training) ? sat_mul(e, f.largest_quantized_elements) : 0;
  // lora_B saves its input x*A (tokens x r) for its weight gradient; lora_A's input is the adapted linear's own
  // input, already saved (lora_dropout 0, PEFT's default, is nn.Identity: no copy, no mask). Under full
  // checkpointing only the block being recomputed holds them.
  const std::int64_t blocks = training.checkpointing == Checkpointing::full ? 1 : f.blocks;
  b.adapter_activations = sat_mul(sat_mul(tokens, f.rank_sum_per_block), sat_mul(e, blocks));
  return b;
}

namespace {
// A block's gathered elements at stage 3 and their bytes with a quantised base: the quantised linears' codes (their
// constants live in quant_state, not gathered), the rest of the non-persistent elements at the precision's bytes.
struct BlockGather {
  std::int64_t elements = 0;
  double bytes = 0.0;
};
BlockGather block_gather(const ModelDescription& model, const TrainingConfig& training, const LayerDescription& layer) {
  BlockGather g;
  const int e = precision_bytes(training.precision);
  g.elements = layer.params - persistent_params(layer, training.zero);  // DeepSpeed keeps the persistent whole
  std::int64_t quantized = 0;
  double codes = 0.0;
  for (const BlockLinear& module : block_linear_modules(model)) {
    const std::int64_t n = sat_mul(module.in_features, module.out_features);
    quantized = sat_add(quantized, n);
    codes += training.lora.quantize_base == BaseQuantization::nf4 ? static_cast<double>(ceil_div(n, 2))
                                                                   : static_cast<double>(n);
  }
  g.bytes = codes + static_cast<double>(e) * static_cast<double>(std::max<std::int64_t>(0, g.elements - quantized));
  return g;
}
}  // namespace

std::vector<double> lora_gather_bytes_per_element(const ModelDescription& model, const TrainingConfig& training) {
  std::vector<double> factors;
  if (!training.lora.enabled || !quantized(training) || !model.transformer) return factors;
  const double e = precision_bytes(training.precision);
  for (const LayerDescription& layer : model.layers) {
    if (layer.kind != "transformer_block") {
      factors.push_back(e);
      continue;
    }
    const BlockGather g = block_gather(model, training, layer);
    factors.push_back(g.elements > 0 ? g.bytes / static_cast<double>(g.elements) : e);
  }
  return factors;
}

double lora_model_gather_bytes_per_element(const ModelDescription& model, const TrainingConfig& training) {
  const double e = precision_bytes(training.precision);
  if (!training.lora.enabled || !quantized(training) || !model.transformer) return e;
  double bytes = 0.0, elements = 0.0;
  for (const LayerDescription& layer : model.layers) {
    if (layer.kind == "transformer_block") {
      const BlockGather g = block_gather(model, training, layer);
      bytes += g.bytes;
      elements += static_cast<double>(g.elements);
    } else {
      bytes += e * static_cast<double>(layer.params);
      elements += static_cast<double>(layer.params);
    }
  }
  return elements > 0.0 ? bytes / elements : e;
}

void apply_lora_to_memory_inputs(const LoraFigures& f, MemoryInputs& in) {
  in.lora_frozen_params = f.base_params;
  in.params = f.trainable_params;
  in.partition_params = ceil_div(std::max<std::int64_t>(1, f.trainable_params), in.world_size);
  // Stages 1-2's offload staging buffer is sized by the largest trainable parameter
  // (stage_1_and_2.py temp_grad_buffer_for_gpu_offload); stage 3 keeps the whole model's largest module, which its
  // coordinator gathers.
  if (in.stage < 3) in.largest_module_params = f.largest_adapter_tensor;
}

void explain_lora_memory(const LoraFigures& f, const LoraBaseBytes& b, const TrainingConfig& training, int stage,
                         std::int64_t world_size, std::int64_t tokens, std::vector<MemoryTerm>& terms) {
  const int e = precision_bytes(training.precision);
  const std::string N = num(world_size);
  const std::string where = stage < 3 ? " (whole on every GPU: frozen, in no optimizer group)" : " (partition)";
  const char* partitioning = stage < 3 ? kZero12Groups : kZero3Partition;
  const std::int64_t unquantized = f.base_params - f.quantized_elements;
  const std::string part = stage < 3 ? "" : " / " + N;
  terms.push_back({"params", "LoRA adapters (trainable; their 16-bit copies, fp32 master, states and gradients are "
                             "the engine's terms above, P = " + num(f.trainable_params) + ")",
                   0,
                   "r * sum(in + out) over " + num(f.adapted_modules) + " adapted modules = " +
                       num(f.trainable_params) + " parameters",
                   kPeftLayer});
  terms.push_back({"params",
                   std::string("frozen base, ") + (quantized(training) ? "unquantised tensors (embeddings, norms, "
                                                                         "biases, head)"
                                                                       : to_string(training.precision) + " weights") +
                       where,
                   b.unquantized, num(e) + " * " + num(unquantized) + part, partitioning});
  if (quantized(training)) {
    const bool nf4 = training.lora.quantize_base == BaseQuantization::nf4;
    terms.push_back({"params",
                     std::string("frozen base, ") + (nf4 ? "NF4 codes (two per byte)" : "int8 codes") + " of " +
                         num(f.quantized_tensors) + " linear weights" + where,
                     b.codes,
                     (nf4 ? "sum ceil(n/2) = " : "sum n = ") + num(f.quantized_code_bytes) + part,
                     nf4 ? kBnb4bit : kBnbInt8});
    terms.push_back({"params",
                     nf4 ? "NF4 constants: 8-bit absmax per 64 values, fp32 absmax per 256 blocks, fp32 offset "
                           "(quant_state, whole on every GPU)"
                         : "int8 row scales SCB (fp32 per output row, whole on every GPU)",
                     b.constants,
                     nf4 ? "sum (ceil(n/64) + 4 * ceil(ceil(n/64)/256) + 4) = " + num(f.quantized_constant_bytes)
                         : "sum 4 * rows = " + num(f.quantized_constant_bytes),
                     nf4 ? kBnb4bit : kBnbInt8});
    terms.push_back({"params", "one dequantised 16-bit weight of the largest quantised linear, live during its GEMM",
                     b.dequantized_weight, num(e) + " * " + num(f.largest_quantized_elements),
                     nf4 ? "bitsandbytes autograd/_functions.py MatMul4Bit (F.dequantize_4bit before the GEMM)"
                         : "bitsandbytes autograd/_functions.py MatMul8bitLt (int8 weight dequantised for the "
                           "16-bit GEMM)"});
  }
  terms.push_back({"activations", "LoRA: x*A saved by each adapted module's lora_B", b.adapter_activations,
                   num(tokens) + " tokens * " + num(f.rank_sum_per_block) + " (r per adapted module of a block) * " +
                       num(e) + " B * " +
                       (training.checkpointing == Checkpointing::full ? std::string("1 block (full checkpointing)")
                                                                      : num(f.blocks) + " blocks"),
                   "PEFT peft/tuners/lora/layer.py Linear.forward (lora_B(lora_A(dropout(x))) * scaling; dropout 0 "
                   "is nn.Identity)"});
}

namespace {

struct LoraKernelSeconds {
  double forward = 0.0;
  double backward_input = 0.0;
  double backward_weight = 0.0;
  double dequantize = 0.0;  // one pass over the block's quantised weights
  double forward_flops = 0.0;
  double backward_flops = 0.0;
};

// One block's adapter work and dequantisation.
LoraKernelSeconds block_kernels(const ModelDescription& model, const ClusterDescription& cluster,
                                const TrainingConfig& training) {
  LoraKernelSeconds k;
  const ComputeTimer timer(cluster, training.precision, training.engine);
  const double T = static_cast<double>(tokens_of(training));
  const double r = static_cast<double>(training.lora.rank);
  const double e = precision_bytes(training.precision);
  // PEFT scales lora_B's output and adds it to the base output in two more kernels, and scales the incoming
  // gradient in one; zeroplan's executor folds both into the GEMMs (exec/cuda/cuda_trainer.cu lora_forward: lora_B's
  // GEMM accumulates into the base output, beta 1, alpha = scaling; lora_backward_weights: alpha = scaling).
  const bool separate_scale_kernels = training.engine != TrainingEngine::zeroplan;
  for (const BlockLinear& module : adapted_modules(model, training.lora.targets)) {
    const double in = static_cast<double>(module.in_features), out = static_cast<double>(module.out_features);
    const double a = 2.0 * T * in * r, b = 2.0 * T * r * out;  // x*A, (xA)*B
    k.forward += timer.gemm_seconds(a) + timer.gemm_seconds(b);
    // Backward: dX of B then of A; dW of B and of A.
    k.backward_input += timer.gemm_seconds(b) + timer.gemm_seconds(a);
    if (separate_scale_kernels) {
      // lora_B's output times scaling (read and write T x out), then added to the base output (read two, write
      // one); in backward the scaling's gradient (read, write).
      k.forward += timer.streaming_seconds(5.0 * T * out * e, 2.0);
      k.backward_input += timer.streaming_seconds(2.0 * T * out * e, 1.0);
    }
    k.backward_weight += timer.gemm_seconds(b) + timer.gemm_seconds(a);
    k.forward_flops += a + b;
    k.backward_flops += 2.0 * (a + b);
  }
  if (training.lora.quantize_base != BaseQuantization::none) {
    const bool nf4 = training.lora.quantize_base == BaseQuantization::nf4;
    double bytes = 0.0, kernels = 0.0;
    for (const BlockLinear& module : block_linear_modules(model)) {
      const std::int64_t n = sat_mul(module.in_features, module.out_features);
      // Read the codes and constants, write the 16-bit weight; NF4 first dequantises its absmax (one more kernel,
      // quant_state.nested: dequantize_blockwise).
      const double read =
          static_cast<double>(nf4 ? nf4_double_quant_bytes(n) : int8_weight_bytes(n, module.out_features));
      bytes += read + e * static_cast<double>(n);
      kernels += nf4 ? 2.0 : 1.0;
    }
    k.dequantize = timer.streaming_seconds(bytes, kernels);
  }
  return k;
}

}  // namespace

void apply_lora_to_layer_compute(const ModelDescription& model, const ClusterDescription& cluster,
                                 const TrainingConfig& training, std::vector<LayerCompute>& compute) {
  if (!training.lora.enabled || !model.transformer) return;
  const LoraKernelSeconds k = block_kernels(model, cluster, training);
  const double T = static_cast<double>(tokens_of(training));
  double block_linear_params = 0.0;
  for (const BlockLinear& module : block_linear_modules(model))
    block_linear_params += static_cast<double>(module.in_features) * static_cast<double>(module.out_features);
  const bool recompute = training.checkpointing == Checkpointing::full;
  for (std::size_t i = 0; i < compute.size() && i < model.layers.size(); ++i) {
    LayerCompute& c = compute[i];
    c.backward_weight_seconds = 0.0;  // every base parameter is frozen
    if (model.layers[i].kind != "transformer_block") continue;
    // The frozen linears' weight-gradient GEMMs are not run: 2 FLOPs per weight per token.
    c.backward_flops = std::max(0.0, c.backward_flops - 2.0 * T * block_linear_params);
    c.forward_seconds += k.forward + k.dequantize;
    c.backward_input_seconds += k.backward_input + k.dequantize;
    c.backward_weight_seconds = k.backward_weight;
    c.forward_flops += k.forward_flops;
    c.backward_flops += k.backward_flops;
    if (recompute && c.recompute_seconds > 0.0) {
      c.recompute_seconds += k.forward + k.dequantize;
      c.recompute_flops += k.forward_flops;
    }
  }
}

double lora_dequantization_seconds(const ModelDescription& model, const ClusterDescription& cluster,
                                   const TrainingConfig& training) {
  if (!training.lora.enabled || !model.transformer) return 0.0;
  const double passes = training.checkpointing == Checkpointing::full ? 3.0 : 2.0;
  return passes * static_cast<double>(model.transformer->layers) * block_kernels(model, cluster, training).dequantize;
}

}  // namespace zeroplan
