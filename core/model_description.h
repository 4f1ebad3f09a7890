// The model description: one shared answer to "what is being trained", read by the planner, the simulator,
// the executor and the GUI. Two forms (models/*.json):
//   - a transformer form (family gpt2 or llama) that expand_transformer() turns into its layers with exact
//     parameter counts;
//   - a generic layer-list form (per layer: parameters and activation elements per sample) for other networks.
// A Hugging Face config.json is read into the same structure (core/hf_config_import.h).
#pragma once

#include <cstdint>
#include <climits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/layer_ops.h"

namespace zeroplan {

enum class ModelFamily { gpt2, llama, generic };
enum class NormKind { layer_norm, rms_norm };
enum class ActivationKind { gelu, swiglu, relu };

std::string to_string(ModelFamily family);
std::string to_string(NormKind norm);
std::string to_string(ActivationKind activation);

// The shape of a decoder-only transformer. gpt2: learned positions, LayerNorm, GELU, biases, 4h MLP.
// llama: rotary positions (no position parameters), RMSNorm, SwiGLU (gate, up, down), grouped-query attention.
struct TransformerShape {
  ModelFamily family = ModelFamily::gpt2;
  std::int64_t vocab_size = 0;
  std::int64_t hidden = 0;       // h
  std::int64_t layers = 0;       // L
  std::int64_t heads = 0;        // a
  std::int64_t kv_heads = 0;     // key/value heads (== heads without grouped-query attention)
  std::int64_t ffn_hidden = 0;   // MLP inner size (4h for gpt2)
  std::int64_t max_seq = 0;      // maximum sequence length (gpt2: size of the learned position table)
  NormKind norm = NormKind::layer_norm;
  ActivationKind activation = ActivationKind::gelu;
  bool attention_bias = true;    // biases on the q/k/v and output projections
  bool attention_output_bias = true;  // with attention_bias: a bias on the output projection too (Qwen2 has
                                      //   q/k/v biases but none on o_proj: attention_bias true, this false)
  bool mlp_bias = true;          // biases on the MLP projections
  bool tied_embeddings = true;   // output projection shares the token embedding
  bool learned_positions = true; // a max_seq x h position embedding table (gpt2)
  bool embedding_norm = false;   // a norm right after the embedding (BLOOM's word_embeddings_layernorm)
  double dropout = 0.0;          // dropout probability (adds 1-byte masks to the activations when > 0)
  // What changes the math but not the sizes (the executor reads them; the planner needs none):
  double norm_eps = 1e-5;        // LayerNorm eps / rms_norm_eps
  double rope_theta = 10000.0;   // rotary base (rope_theta)
  // rope_scaling: empty (none), or its rope_type as written ("llama3" is the one the executor implements:
  // transformers modeling_rope_utils.py _compute_llama3_parameters, with the four numbers below).
  std::string rope_scaling_type;
  double rope_scaling_factor = 8.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  std::int64_t rope_original_max_position = 8192;
  std::int64_t sliding_window = 0;  // Mistral's sliding-window attention span in tokens (0: full causal attention)

  std::int64_t head_dim() const { return hidden / heads; }
  std::int64_t kv_dim() const { return head_dim() * kv_heads; }
};

// One layer as the planner and simulator see it: a unit of parameters, activations and compute, in execution
// order. For a transformer: the embedding, each block, the final norm, the output head (when untied).
struct LayerDescription {
  std::string name;                            // "embedding", "block.0", ..., "final_norm", "lm_head"
  std::string kind;                            // "embedding" | "transformer_block" | "norm" | "lm_head" | "generic"
  std::int64_t params = 0;                     // exact parameter count of the layer
  std::int64_t largest_module_params = 0;      // largest parameter count owned directly by one module in it
  std::int64_t module_count = 0;               // modules owning parameters (stage-3 gathers one per module)
  // Module calls in one forward pass of the layer, counting what owns no parameters (an activation, a pooling, a
  // container) and each call of a module used twice: DeepSpeed's stage-3 hooks run on every call
  // (parameter_offload.py _register_deepspeed_module: forward pre/post hooks and the backward functions on every
  // submodule, whatever it owns). Default: module_count + 1, the modules owning parameters and the layer itself,
  // which is what a transformer block's calls are.
  std::int64_t module_calls = 0;
  std::int64_t small_module_params = 0;        // params in modules whose size is < every persistence threshold
                                               //   we care about (norms, biases); see sim for its use
  // Generic form only (transformer layers derive these from the shape, the sequence and the micro-batch):
  std::int64_t activation_elements_per_sample = 0;  // elements saved for backward, per sample
  double forward_flops_per_sample = 0.0;            // forward FLOPs per sample (0: 2 * params, a dense layer)
  // Generic form, optional: what the layer computes (core/layer_ops.h), so that the executor can run it. Either
  // every layer has ops or none does.
  std::vector<LayerOp> ops;
};

struct ModelDescription {
  std::string name;
  std::string source;  // file it came from, or "bundled:NAME"
  bool hf_config = false;  // read from a Hugging Face config.json (core/hf_config_import.h)
  std::string reference;  // where its parameter count is published (paper, model card)
  ModelFamily family = ModelFamily::generic;
  std::optional<TransformerShape> transformer;
  std::vector<LayerDescription> layers;
  std::int64_t input_elements_per_sample = 0;  // generic form: size of one input sample (e.g. 3*32*32)
  // Generic form with ops: one sample's (channels, height, width) ("input_shape") and the logits' size.
  std::optional<TensorShape> input_shape;
  std::int64_t classes = 0;
  bool has_ops() const { return !layers.empty() && !layers.front().ops.empty(); }

  std::int64_t params() const;
  // DeepSpeed's largest_layer_params: the largest sum of parameters owned directly by one module
  // (deepspeed/runtime/zero/stage3.py estimate_zero3_model_states_mem_needs_all_live).
  std::int64_t largest_layer_params() const;
};

// Expands a transformer shape into its layers with exact parameter counts. Throws InputError (naming `source`)
// when the shape is inconsistent (hidden not divisible by heads, heads not divisible by kv_heads, ...).
ModelDescription expand_transformer(const std::string& name, const TransformerShape& shape,
                                    const std::string& source);

// The keys a shape's fields were read from, so that expand_transformer's errors name the field as the user
// wrote it ("transformer.hidden" in a model description, "n_embd" in a GPT-2 config.json).
struct TransformerFieldNames {
  std::string vocab_size = "vocab_size";
  std::string hidden = "hidden";
  std::string layers = "layers";
  std::string heads = "heads";
  std::string kv_heads = "kv_heads";
  std::string ffn_hidden = "ffn_hidden";
  std::string max_seq = "max_seq";
  std::string dropout = "dropout";
};
ModelDescription expand_transformer(const std::string& name, const TransformerShape& shape,
                                    const std::string& source, const TransformerFieldNames& fields);

// Limits that keep every later byte computation inside int64: at most kMaxModelParams parameters (so that
// 64 bytes per parameter still fits) and kMaxTransformerLayers layers (a description, not a hang).
inline constexpr std::int64_t kMaxModelParams = INT64_MAX / 64;
inline constexpr std::int64_t kMaxTransformerLayers = 100'000;

// Reads a rope_scaling object ({"rope_type": ..., "factor": ...}; llama3's four numbers required) into shape:
// fields' member `key` ("rope_scaling", or transformers 5's "rope_parameters"), or fields itself when key is empty.
class JsonFields;
void read_rope_scaling(const JsonFields& fields, TransformerShape& shape, const std::string& key);

// Reads a zeroplan model description (JSON object with "transformer" or "layers").
ModelDescription model_from_json(const nlohmann::json& document, const std::string& source);
nlohmann::json model_to_json(const ModelDescription& model);

// Resolves --model: a bundled name (models/NAME.json), a zeroplan model description file, or a Hugging Face
// config.json (told apart by its keys: "model_type"/"architectures"/"n_embd"/"hidden_size").
ModelDescription load_model(const std::string& name_or_path);

// Throws InputError(source, field) when seq_len exceeds a learned position table (gpt2's wpe): such a model
// cannot run longer sequences. Rotary/ALiBi models accept any length.
void check_sequence_length(const ModelDescription& model, std::int64_t seq_len, const std::string& source,
                           const std::string& field);

// Names of the bundled model descriptions (the files in models/), sorted.
std::vector<std::string> bundled_model_names();

}  // namespace zeroplan
