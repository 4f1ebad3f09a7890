#include "core/hf_config_import.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/input_error.h"
#include "core/json_input.h"
#include "core/model_description.h"

namespace zeroplan {

bool is_hf_config(const nlohmann::json& document) {
  if (!document.is_object()) return false;
  if (document.contains("model_type") || document.contains("architectures")) return true;
  // A config.json stripped of model_type still carries the HF size keys and none of ours.
  const bool hf_sizes = document.contains("n_embd") || document.contains("hidden_size") || document.contains("n_embed");
  return hf_sizes && !document.contains("transformer") && !document.contains("layers");
}

namespace {

// The first of several spellings the config uses (BLOOM writes n_embed or hidden_size, n_head or
// num_attention_heads); a missing field names every accepted spelling.
std::string present_key(const JsonFields& fields, const std::vector<std::string>& keys) {
  for (const auto& key : keys) {
    if (fields.has(key)) return key;
  }
  std::string list;
  for (const auto& key : keys) list += (list.empty() ? "" : " or ") + key;
  fields.fail(keys.front(), "missing (required; accepted spellings: " + list + ")");
}

std::string model_type_of(const JsonFields& fields) {
  if (fields.has("model_type")) return fields.string("model_type");
  // Older or hand-trimmed configs: the architecture class names the model type.
  if (fields.has("architectures")) {
    const nlohmann::json& architectures = fields.raw("architectures");
    if (architectures.is_array() && !architectures.empty() && architectures[0].is_string()) {
      const std::string architecture = architectures[0].get<std::string>();
      if (architecture.rfind("GPT2", 0) == 0) return "gpt2";
      if (architecture.rfind("Llama", 0) == 0) return "llama";
      if (architecture.rfind("Mistral", 0) == 0) return "mistral";
      if (architecture.rfind("Qwen2", 0) == 0) return "qwen2";
      if (architecture.rfind("Bloom", 0) == 0) return "bloom";
      return architecture;
    }
  }
  if (fields.has("n_embd")) return "gpt2";
  fields.fail("model_type", "missing, and neither \"architectures\" nor the keys tell the model type");
}

std::string model_name(const JsonFields& fields, const std::string& source) {
  if (fields.has("_name_or_path")) {
    const nlohmann::json& value = fields.raw("_name_or_path");
    if (value.is_string() && !value.get<std::string>().empty()) return value.get<std::string>();
  }
  const std::filesystem::path path(source);
  // ".../Llama-2-7b-hf/config.json" is named by its folder; "llama-2-7b.json" by its stem.
  if (path.stem() == "config" && path.has_parent_path() && !path.parent_path().filename().empty()) {
    return path.parent_path().filename().string();
  }
  return path.stem().string();
}

double dropout_or(const JsonFields& fields, const std::string& key, double fallback) {
  if (!fields.has(key) || fields.raw(key).is_null()) return fallback;
  return fields.non_negative_number(key);
}

// GPT-2 (transformers GPT2Config): n_embd, n_layer, n_head, n_positions, n_inner (null -> 4 * n_embd),
// vocab_size; GPT2LMHeadModel ties lm_head to wte (tie_word_embeddings default true, PretrainedConfig).
ModelDescription import_gpt2(const JsonFields& fields, const std::string& source) {
  TransformerShape shape;
  shape.family = ModelFamily::gpt2;
  shape.vocab_size = fields.positive_integer("vocab_size");
  shape.hidden = fields.positive_integer("n_embd");
  shape.layers = fields.positive_integer("n_layer");
  shape.heads = fields.positive_integer("n_head");
  shape.kv_heads = shape.heads;
  shape.max_seq = fields.positive_integer(present_key(fields, {"n_positions", "n_ctx"}));
  shape.ffn_hidden = (fields.has("n_inner") && !fields.raw("n_inner").is_null()) ? fields.positive_integer("n_inner")
                                                                                 : 4 * shape.hidden;
  shape.norm = NormKind::layer_norm;
  const std::string activation = fields.string_or("activation_function", "gelu_new");
  shape.activation = activation == "relu" ? ActivationKind::relu : ActivationKind::gelu;
  shape.attention_bias = true;
  shape.mlp_bias = true;
  shape.tied_embeddings = fields.boolean_or("tie_word_embeddings", true);
  shape.learned_positions = true;
  shape.embedding_norm = false;
  shape.dropout = dropout_or(fields, "resid_pdrop", 0.1);  // GPT2Config default 0.1

  TransformerFieldNames names;
  names.hidden = "n_embd";
  names.layers = "n_layer";
  names.heads = "n_head";
  names.kv_heads = "n_head";
  names.ffn_hidden = "n_inner";
  names.max_seq = fields.has("n_positions") ? "n_positions" : "n_ctx";
  names.dropout = "resid_pdrop";
  return expand_transformer(model_name(fields, source), shape, source, names);
}

// Llama and its kin (transformers LlamaConfig, MistralConfig, Qwen2Config): all three default
// tie_word_embeddings to false in their config classes; checkpoints that tie (Qwen2-0.5B) say so.
// Biases: Llama's attention_bias puts a bias on q, k, v and o_proj, mlp_bias on gate/up/down; Mistral has none;
// Qwen2 hard-codes biases on q/k/v and none on o_proj (modeling_qwen2.py), whatever the config says.
ModelDescription import_llama_like(const JsonFields& fields, const std::string& source, const std::string& model_type) {
  // Mixtral-style mixture-of-experts configs carry the Llama fields plus an expert count: a dense model of those
  // fields would be planned and run as something else entirely.
  for (const char* moe : {"num_local_experts", "num_experts"})
    if (fields.has(moe) && !fields.raw(moe).is_null())
      fields.fail(moe, "mixture-of-experts configs are not supported (zeroplan plans and trains dense models)");
  TransformerShape shape;
  shape.family = ModelFamily::llama;
  shape.vocab_size = fields.positive_integer("vocab_size");
  shape.hidden = fields.positive_integer("hidden_size");
  shape.layers = fields.positive_integer("num_hidden_layers");
  shape.heads = fields.positive_integer("num_attention_heads");
  // Absent (Llama 1 configs) or null: multi-head attention, as LlamaConfig does.
  shape.kv_heads = (fields.has("num_key_value_heads") && !fields.raw("num_key_value_heads").is_null())
                       ? fields.positive_integer("num_key_value_heads")
                       : shape.heads;
  shape.ffn_hidden = fields.positive_integer("intermediate_size");
  shape.max_seq = fields.positive_integer("max_position_embeddings");
  if (fields.has("head_dim") && !fields.raw("head_dim").is_null()) {
    const std::int64_t head_dim = fields.positive_integer("head_dim");
    if (shape.hidden % shape.heads == 0 && head_dim != shape.hidden / shape.heads) {
      fields.fail("head_dim", "is " + std::to_string(head_dim) + " but hidden_size / num_attention_heads is " +
                                  std::to_string(shape.hidden / shape.heads) +
                                  "; a head size independent of the hidden size is not supported");
    }
  }
  shape.norm = NormKind::rms_norm;
  shape.activation = ActivationKind::swiglu;  // gated MLP (gate, up, down) whatever hidden_act is
  if (model_type == "qwen2") {
    shape.attention_bias = true;
    shape.attention_output_bias = false;
    shape.mlp_bias = false;
  } else if (model_type == "mistral") {
    shape.attention_bias = false;
    shape.mlp_bias = false;
  } else {
    shape.attention_bias = fields.boolean_or("attention_bias", false);
    shape.mlp_bias = fields.boolean_or("mlp_bias", false);
  }
  shape.tied_embeddings = fields.boolean_or("tie_word_embeddings", false);
  shape.learned_positions = false;  // rotary
  shape.embedding_norm = false;
  shape.dropout = dropout_or(fields, "attention_dropout", 0.0);
  // LlamaConfig defaults: rms_norm_eps 1e-6, rope_theta 10000 (Qwen2Config: 1e-6, 10000; MistralConfig: 1e-6, 10000).
  shape.norm_eps = fields.has("rms_norm_eps") && !fields.raw("rms_norm_eps").is_null() ? fields.positive_number("rms_norm_eps") : 1e-6;
  shape.rope_theta = fields.has("rope_theta") && !fields.raw("rope_theta").is_null() ? fields.positive_number("rope_theta") : 10000.0;
  if (fields.has("rope_scaling") && !fields.raw("rope_scaling").is_null()) read_rope_scaling(fields, shape, "rope_scaling");
  // transformers 5 writes both into "rope_parameters" {"rope_theta", "rope_type" ("default": no scaling), and the
  // scaling's own fields} (configuration_utils.py, RotaryEmbeddingConfigMixin).
  if (fields.has("rope_parameters") && !fields.raw("rope_parameters").is_null()) {
    const JsonFields rope = fields.object("rope_parameters");
    if (rope.has("rope_theta")) shape.rope_theta = rope.positive_number("rope_theta");
    const std::string type = rope.string_or("rope_type", "default");
    if (type != "default") read_rope_scaling(fields, shape, "rope_parameters");
  }
  // Mistral's sliding_window (null: none); Qwen2 applies its sliding_window only with use_sliding_window true.
  const bool window_used = model_type != "qwen2" || fields.boolean_or("use_sliding_window", false);
  if (window_used && fields.has("sliding_window") && !fields.raw("sliding_window").is_null())
    shape.sliding_window = fields.positive_integer("sliding_window");

  TransformerFieldNames names;
  names.hidden = "hidden_size";
  names.layers = "num_hidden_layers";
  names.heads = "num_attention_heads";
  names.kv_heads = "num_key_value_heads";
  names.ffn_hidden = "intermediate_size";
  names.max_seq = "max_position_embeddings";
  names.dropout = "attention_dropout";
  return expand_transformer(model_name(fields, source), shape, source, names);
}

// BLOOM (transformers BloomConfig): hidden_size (n_embed in the published checkpoints), n_layer, n_head; ALiBi
// (no position parameters), word_embeddings_layernorm after the embedding, biases everywhere, 4h GELU MLP,
// lm_head tied. The config has no position limit; BLOOM was trained at 2048 tokens (arXiv 2211.05100 sec. 3),
// used as max_seq unless the config has "seq_length".
ModelDescription import_bloom(const JsonFields& fields, const std::string& source) {
  const std::string hidden_key = present_key(fields, {"hidden_size", "n_embed"});
  const std::string layers_key = present_key(fields, {"n_layer", "num_hidden_layers"});
  const std::string heads_key = present_key(fields, {"n_head", "num_attention_heads"});
  TransformerShape shape;
  shape.family = ModelFamily::gpt2;
  shape.vocab_size = fields.positive_integer("vocab_size");
  shape.hidden = fields.positive_integer(hidden_key);
  shape.layers = fields.positive_integer(layers_key);
  shape.heads = fields.positive_integer(heads_key);
  shape.kv_heads = shape.heads;
  shape.ffn_hidden = 4 * shape.hidden;
  shape.max_seq = fields.positive_integer_or("seq_length", 2048);
  shape.norm = NormKind::layer_norm;
  shape.activation = ActivationKind::gelu;
  shape.attention_bias = true;
  shape.mlp_bias = true;
  shape.tied_embeddings = fields.boolean_or("tie_word_embeddings", true);
  shape.learned_positions = false;
  shape.embedding_norm = true;
  shape.dropout = dropout_or(fields, "hidden_dropout", 0.0);

  TransformerFieldNames names;
  names.hidden = hidden_key;
  names.layers = layers_key;
  names.heads = heads_key;
  names.kv_heads = heads_key;
  names.ffn_hidden = hidden_key;
  names.max_seq = "seq_length";
  names.dropout = "hidden_dropout";
  ModelDescription model = expand_transformer(model_name(fields, source), shape, source, names);
  if (!fields.has("seq_length")) model.reference = "max_seq 2048: BLOOM's training sequence length (arXiv 2211.05100)";
  return model;
}

}  // namespace

ModelDescription model_from_hf_config(const nlohmann::json& document, const std::string& source) {
  const JsonFields fields(document, source);
  const std::string model_type = model_type_of(fields);
  ModelDescription model;
  if (model_type == "gpt2") {
    model = import_gpt2(fields, source);
  } else if (model_type == "llama" || model_type == "mistral" || model_type == "qwen2") {
    model = import_llama_like(fields, source, model_type);
  } else if (model_type == "bloom") {
    model = import_bloom(fields, source);
  } else {
    fields.fail("model_type", "unsupported model type \"" + model_type +
                                  "\"; supported: gpt2, llama, mistral, qwen2, bloom (or write a zeroplan model "
                                  "description with a \"transformer\" shape)");
  }
  const std::string imported = "Hugging Face config.json (model_type " + model_type + ") read from " + source;
  model.reference = model.reference.empty() ? imported : imported + "; " + model.reference;
  model.hf_config = true;
  return model;
}

}  // namespace zeroplan
