// Hugging Face config.json -> model description, exact to the parameter. GPT-2 (n_embd, n_layer, n_head,
// n_positions, n_inner), Llama 1/2/3, Mistral, Qwen2 and other llama-like configs (hidden_size,
// num_hidden_layers, num_attention_heads, num_key_value_heads, intermediate_size, vocab_size,
// tie_word_embeddings, attention_bias/mlp_bias), BLOOM (n_embed/hidden_size with ALiBi, no position table).
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "core/model_description.h"

namespace zeroplan {

// True when the document looks like a Hugging Face config (has "model_type" or "architectures").
bool is_hf_config(const nlohmann::json& document);
ModelDescription model_from_hf_config(const nlohmann::json& document, const std::string& source);

}  // namespace zeroplan
