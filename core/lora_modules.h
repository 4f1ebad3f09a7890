// The linear modules LoRA can adapt in a transformer, by the names PEFT matches them by (the Hugging Face module
// names of the model type), and the LoRA flags' resolution against them: --lora-rank, --lora-alpha, --lora-targets,
// --quantize-base. PEFT 0.21 (peft/tuners/tuners_utils.py check_target_module_exists) adapts a module when a target
// equals its name or its dotted path ends with "." + the target; "all-linear" takes every linear layer but the
// output layer (peft/tuners/tuners_utils.py _maybe_include_all_linear_layers). With no targets given PEFT takes the
// model type's entry of TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING (peft/utils/constants.py): llama, mistral,
// qwen2 -> q_proj, v_proj; gpt2 -> c_attn; bloom -> query_key_value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/model_description.h"
#include "core/training_config.h"

namespace zeroplan {

// One linear module of a transformer block (every block has the same ones).
struct BlockLinear {
  std::string name;  // the module's own name ("q_proj", "c_proj")
  std::string path;  // its path inside the block ("self_attn.q_proj", "mlp.c_proj"), for PEFT's suffix match
  std::int64_t in_features = 0;
  std::int64_t out_features = 0;
};

// The model type whose names and PEFT defaults apply: "llama" (Llama, Mistral and Qwen2 share the module names
// and the default targets), "gpt2" or "bloom" (this repository's gpt2 family with BLOOM's embedding norm and no
// learned positions). Empty for a layer-list model, which names no modules.
std::string peft_model_type(const ModelDescription& model);

// The block's linear modules in transformers' modeling code (modeling_llama.py LlamaAttention / LlamaMLP,
// modeling_gpt2.py GPT2Attention / GPT2MLP (Conv1D), modeling_bloom.py BloomAttention / BloomMLP).
std::vector<BlockLinear> block_linear_modules(const ModelDescription& model);

// PEFT's default targets for the model type (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING).
std::vector<std::string> peft_default_targets(const ModelDescription& model);

// The block modules a target list adapts (PEFT's match), in block order.
std::vector<BlockLinear> adapted_modules(const ModelDescription& model, const std::vector<std::string>& targets);

// What the user gave for LoRA; unset means not given.
struct LoraInputs {
  std::optional<std::int64_t> rank;
  std::optional<double> alpha;
  std::optional<std::string> targets;        // comma-separated PEFT module names, or "all-linear"
  std::optional<std::string> quantize_base;  // nf4, int8 or none
  bool any() const { return rank || alpha || targets || quantize_base; }
};

// Resolves the LoRA inputs against the model into training.lora (and a note naming what was taken), or leaves LoRA
// off when none is given. Throws InputError naming the flag: a rank below 1 or above the narrowest adapted module,
// an alpha that is not a positive finite number, a target the model does not have (listing those it has), an
// empty target list, a quantisation other than nf4/int8/none, --quantize-base without LoRA, a layer-list model.
void resolve_lora(const LoraInputs& inputs, const ModelDescription& model, TrainingConfig& training,
                  const std::string& source = "command line");

}  // namespace zeroplan
