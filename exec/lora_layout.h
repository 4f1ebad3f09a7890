// LoRA's adapters on the executor's transformer pipeline: which rows of which fused block weight each adapted
// module is (PEFT adapts transformers' modules, q_proj / k_proj / v_proj and gate_proj / up_proj, which our layout
// fuses into qkv and gate_up: exec/param_layout.h), the adapters' own flat layout (the trainable parameters the
// ZeRO engine trains), and their names as PEFT saves them.
// - Shapes and init: PEFT 0.21 peft/tuners/lora/layer.py LoraLayer.update_layer makes lora_A = nn.Linear(in, r,
//   bias=False) and lora_B = nn.Linear(r, out, bias=False); reset_lora_parameters (init_lora_weights=True) draws A
//   by nn.init.kaiming_uniform_(a=sqrt(5)), i.e. U(-1/sqrt(in), 1/sqrt(in)) (gain sqrt(2/(1+5)), bound
//   gain*sqrt(3/in)), and zeroes B, so the adapted model starts equal to the base. Our draw is the executor's
//   counter-based one (exec/init_rng.h) from the run's seed: the same distribution, not torch's numbers.
// - Names: get_peft_model_state_dict drops the adapter name ("default"), so a saved tensor is
//   "base_model.model." + the module's path in the transformers model + ".lora_A.weight": Llama's
//   "base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight", GPT-2's (GPT2LMHeadModel)
//   "base_model.model.transformer.h.3.attn.c_attn.lora_B.weight".
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/nf4_quantization.h"
#include "exec/exec_config.h"
#include "exec/param_layout.h"

namespace zeroplan::exec {

// One adapted module of a block: the rows [row_offset, row_offset + out) of the block tensor `base` (in = its
// columns).
struct AdaptedLinear {
  std::string path;       // "self_attn.q_proj"
  BlockTensor base = kQkvW;
  std::int64_t row_offset = 0;
  std::int64_t out = 0, in = 0;
};

// Every linear module of a transformers block on this shape (Llama: q_proj, k_proj, v_proj, o_proj, gate_proj,
// up_proj, down_proj; GPT-2: c_attn, c_proj, c_fc, c_proj), each as the rows of the block tensor holding it.
std::vector<AdaptedLinear> transformers_linears(const ModelShape& shape);

// The adapted modules of lora.modules on this shape, in that order. Throws std::invalid_argument naming a module
// the shape has not (a path of another model type).
std::vector<AdaptedLinear> adapted_linears(const ModelShape& shape, const LoraExecSettings& lora);

// "base_model.model.model.layers.3." (Llama names) or "base_model.model.transformer.h.3." (GPT-2's).
std::string peft_block_prefix(const ModelShape& shape, std::int64_t layer);

// The adapters' flat layout: one unit per block, per adapted module A (rank x in, kaiming-uniform) then B
// (out x rank, zeros), under PEFT's saved names; aligned for the ZeRO engine (zero_alignment(world)).
ParamLayout lora_adapter_layout(const ModelShape& shape, const LoraExecSettings& lora, std::int64_t align);

// The adapters' parameters (sum of rank * (in + out) over the adapted modules of every block).
std::int64_t lora_adapter_params(const ModelShape& shape, const LoraExecSettings& lora);

// What a transformer trainer's ZeRO engine trains at `world` ranks: the model's layout, or with LoRA its adapters'
// (both backends, so that their engines hold the same flat ranges).
ParamLayout trained_layout(const ExecConfig& config, int world);

// The adapters draw from their own stream of the run's seed, so that A is not a function of the base's draws at
// the same indices (exec/init_rng.h hashes (seed, index)); both backends initialise them from it.
std::uint64_t lora_adapter_seed(std::uint64_t seed);

// QLoRA: the element counts of the transformers modules block weight `which` fuses, in element order, each of
// which bitsandbytes quantises as its own Params4bit (core/nf4_quantization.h Nf4ModuleTensors): Llama's qkv
// {q_proj, k_proj, v_proj} and gate_up {gate_proj, up_proj}; one module for o_proj, down_proj and every GPT-2 weight
// (c_attn and c_fc are single Conv1D modules in transformers).
std::vector<std::int64_t> nf4_module_elements(const ModelShape& shape, BlockTensor which);

// QLoRA quantises every linear layer of a block: these four block weights, held in this order per layer (the slot
// of layer l's weight w is l * 4 + nf4_weight_slot(w); std::logic_error for another tensor).
inline constexpr BlockTensor kNf4BlockWeights[4] = {kQkvW, kAttProjW, kFcW, kFcProjW};
int nf4_weight_slot(BlockTensor which);

// The frozen base's block weights quantised (--quantize-base nf4), what both trainers hold: for each layer and each
// of kNf4BlockWeights, the weight's values read(begin, n, out) at its offsets in source_layout, each mapped by
// `round` (to the model's 16-bit dtype and back, as the 16-bit model bitsandbytes quantises holds it; empty in
// fp32), quantised module by module (nf4_module_elements), handed to consume(slot, tensors) in slot order. The work
// is shared among `threads` threads (a 7B base is 6.5e9 values: over four minutes on one); `read` is called from
// several threads at once only when read_in_parallel (a pure function such as the initialisation; not a file
// reader), and the result is the same for any thread count.
void quantize_frozen_block_weights(const ModelShape& shape, const ParamLayout& source_layout,
                                   const std::function<void(std::int64_t begin, std::int64_t n, float* out)>& read,
                                   bool read_in_parallel, const std::function<float(float)>& round, int threads,
                                   const std::function<void(std::int64_t slot, Nf4ModuleTensors&&)>& consume);

// The most adapted modules of one block weight (3 for q, k and v on the fused qkv weight): the trainers keep each
// one's d(x A^T) until the base's input gradient has been written.
std::int64_t lora_adapters_per_weight(const std::vector<AdaptedLinear>& modules);

}  // namespace zeroplan::exec
