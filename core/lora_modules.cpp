#include "core/lora_modules.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/input_error.h"

namespace zeroplan {

namespace {

constexpr const char* kAllLinear = "all-linear";

std::vector<std::string> split_targets(const std::string& text) {
  std::vector<std::string> targets;
  std::string current;
  const auto flush = [&] {
    const auto first = current.find_first_not_of(" \t");
    const auto last = current.find_last_not_of(" \t");
    if (first != std::string::npos) targets.push_back(current.substr(first, last - first + 1));
    current.clear();
  };
  for (char c : text) {
    if (c == ',') flush();
    else current += c;
  }
  flush();
  return targets;
}

// PEFT's match of one target against a module path: equal, or the path ends with "." + target.
bool matches(const BlockLinear& module, const std::string& target) {
  if (module.path == target || module.name == target) return true;
  const std::string suffix = "." + target;
  return module.path.size() > suffix.size() &&
         module.path.compare(module.path.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string joined(const std::vector<std::string>& names) {
  std::vector<std::string> seen;  // c_proj appears twice in a GPT-2 block
  std::string text;
  for (const std::string& name : names) {
    if (std::find(seen.begin(), seen.end(), name) != seen.end()) continue;
    seen.push_back(name);
    text += (text.empty() ? "" : ", ") + name;
  }
  return text;
}

}  // namespace

std::string peft_model_type(const ModelDescription& model) {
  if (!model.transformer) return "";
  const TransformerShape& s = *model.transformer;
  if (s.family == ModelFamily::llama) return "llama";
  // core/hf_config_import.cpp import_bloom: the gpt2 family with ALiBi (no position table) and the embedding norm.
  if (!s.learned_positions && s.embedding_norm) return "bloom";
  return "gpt2";
}

std::vector<BlockLinear> block_linear_modules(const ModelDescription& model) {
  if (!model.transformer) return {};
  const TransformerShape& s = *model.transformer;
  const std::int64_t h = s.hidden, kv = s.kv_dim(), f = s.ffn_hidden;
  const std::string type = peft_model_type(model);
  if (type == "llama") {
    // modeling_llama.py: LlamaAttention q/k/v/o_proj (k and v of kv_heads * head_dim), LlamaMLP gate/up/down_proj
    // (the gated MLP this repository's llama family always has).
    std::vector<BlockLinear> modules = {{"q_proj", "self_attn.q_proj", h, h},
                                        {"k_proj", "self_attn.k_proj", h, kv},
                                        {"v_proj", "self_attn.v_proj", h, kv},
                                        {"o_proj", "self_attn.o_proj", h, h}};
    if (s.activation == ActivationKind::swiglu) modules.push_back({"gate_proj", "mlp.gate_proj", h, f});
    modules.push_back({"up_proj", "mlp.up_proj", h, f});
    modules.push_back({"down_proj", "mlp.down_proj", f, h});
    return modules;
  }
  if (type == "bloom") {
    // modeling_bloom.py: BloomAttention query_key_value (h -> 3h) and dense; BloomMLP dense_h_to_4h, dense_4h_to_h.
    return {{"query_key_value", "self_attention.query_key_value", h, h + 2 * kv},
            {"dense", "self_attention.dense", h, h},
            {"dense_h_to_4h", "mlp.dense_h_to_4h", h, f},
            {"dense_4h_to_h", "mlp.dense_4h_to_h", f, h}};
  }
  // modeling_gpt2.py: GPT2Attention c_attn (Conv1D h -> 3h) and c_proj; GPT2MLP c_fc and c_proj. PEFT adapts
  // transformers' Conv1D as a linear layer (peft/tuners/lora/layer.py dispatch_default, fan_in_fan_out).
  return {{"c_attn", "attn.c_attn", h, h + 2 * kv},
          {"c_proj", "attn.c_proj", h, h},
          {"c_fc", "mlp.c_fc", h, f},
          {"c_proj", "mlp.c_proj", f, h}};
}

std::vector<std::string> peft_default_targets(const ModelDescription& model) {
  // peft/utils/constants.py TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING (PEFT 0.21): "llama", "mistral" and
  // "qwen2" -> ["q_proj", "v_proj"]; "gpt2" -> ["c_attn"]; "bloom" -> ["query_key_value"].
  const std::string type = peft_model_type(model);
  if (type == "llama") return {"q_proj", "v_proj"};
  if (type == "bloom") return {"query_key_value"};
  if (type == "gpt2") return {"c_attn"};
  return {};
}

std::vector<BlockLinear> adapted_modules(const ModelDescription& model, const std::vector<std::string>& targets) {
  std::vector<BlockLinear> adapted;
  const bool all = std::find(targets.begin(), targets.end(), kAllLinear) != targets.end();
  for (const BlockLinear& module : block_linear_modules(model)) {
    const bool hit = all || std::any_of(targets.begin(), targets.end(),
                                        [&](const std::string& target) { return matches(module, target); });
    if (hit) adapted.push_back(module);
  }
  return adapted;
}

void resolve_lora(const LoraInputs& in, const ModelDescription& model, TrainingConfig& training,
                  const std::string& source) {
  LoraSettings& lora = training.lora;
  BaseQuantization quantize = BaseQuantization::none;
  if (in.quantize_base) {
    if (*in.quantize_base == "nf4") quantize = BaseQuantization::nf4;
    else if (*in.quantize_base == "int8") quantize = BaseQuantization::int8;
    else if (*in.quantize_base != "none")
      throw InputError(source, "--quantize-base",
                       "unknown value '" + *in.quantize_base + "': expected nf4, int8 or none");
  }
  const bool lora_given = in.rank || in.alpha || in.targets;
  if (!lora_given) {
    if (quantize != BaseQuantization::none)
      throw InputError(source, "--quantize-base",
                       "quantises the frozen base of a LoRA plan (QLoRA) and needs LoRA: give --lora-rank (PEFT's "
                       "default r is 8) or --lora-targets");
    return;
  }
  const std::string flag = in.rank ? "--lora-rank" : in.alpha ? "--lora-alpha" : "--lora-targets";
  if (!model.transformer)
    throw InputError(source, flag,
                     "model \"" + model.name + "\" is a layer list: it names no linear modules for LoRA to adapt; "
                     "expected a transformer (a Hugging Face config.json or a bundled transformer)");
  if (in.rank && *in.rank < 1)
    throw InputError(source, "--lora-rank", "is " + std::to_string(*in.rank) + "; expected a rank of at least 1");
  if (in.alpha && !(std::isfinite(*in.alpha) && *in.alpha > 0.0)) {
    char given[32];
    std::snprintf(given, sizeof given, "%g", *in.alpha);
    throw InputError(source, "--lora-alpha", std::string("is ") + given + "; expected a positive number");
  }
  std::vector<std::string> targets = in.targets ? split_targets(*in.targets) : peft_default_targets(model);
  if (targets.empty())
    throw InputError(source, "--lora-targets", "is empty; expected module names such as q_proj,v_proj or all-linear");
  const std::vector<BlockLinear> modules = block_linear_modules(model);
  std::vector<std::string> names;
  for (const BlockLinear& module : modules) names.push_back(module.name);
  for (const std::string& target : targets) {
    if (target == kAllLinear) continue;
    const bool known = std::any_of(modules.begin(), modules.end(),
                                   [&](const BlockLinear& module) { return matches(module, target); });
    if (!known)
      throw InputError(source, "--lora-targets",
                       "unknown module '" + target + "' for model type " + peft_model_type(model) + "; expected " +
                           joined(names) + " or all-linear");
  }
  const std::vector<BlockLinear> adapted = adapted_modules(model, targets);
  lora.rank = in.rank.value_or(8);  // PEFT LoraConfig r = 8
  // A rank beyond a module's full rank (min(in, out)) adds nothing the update can use: PEFT accepts it, the planner
  // refuses it as a mistake (and it bounds every adapter's size by the model's own).
  for (const BlockLinear& module : adapted) {
    const std::int64_t full = std::min(module.in_features, module.out_features);
    if (lora.rank > full)
      throw InputError(source, "--lora-rank",
                       "is " + std::to_string(lora.rank) + ", above the full rank " + std::to_string(full) + " of " +
                           module.path + " (" + std::to_string(module.in_features) + " -> " +
                           std::to_string(module.out_features) + "); expected 1.." + std::to_string(full));
  }
  lora.enabled = true;
  lora.alpha = in.alpha.value_or(8.0);  // PEFT LoraConfig lora_alpha = 8
  lora.targets = targets;
  lora.quantize_base = quantize;
  std::string list;
  for (const std::string& target : targets) list += (list.empty() ? "" : ",") + target;
  char alpha[32];
  std::snprintf(alpha, sizeof alpha, "%g", lora.alpha);
  training.notes.push_back("LoRA r " + std::to_string(lora.rank) + ", alpha " + alpha + " on " + list +
                           (in.targets ? "" : " (PEFT's default targets for " + peft_model_type(model) + ")") +
                           (quantize == BaseQuantization::none ? std::string(", base frozen in ") +
                                                                     to_string(training.precision)
                                                               : ", base quantised to " + to_string(quantize) +
                                                                     " (bitsandbytes), compute in " +
                                                                     to_string(training.precision)));
}

}  // namespace zeroplan
