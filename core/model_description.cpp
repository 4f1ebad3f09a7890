#include "core/model_description.h"

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/data_paths.h"
#include "core/hf_config_import.h"
#include "core/input_error.h"
#include "core/json_input.h"

namespace zeroplan {

std::string to_string(ModelFamily family) {
  switch (family) {
    case ModelFamily::gpt2: return "gpt2";
    case ModelFamily::llama: return "llama";
    case ModelFamily::generic: return "generic";
  }
  return "unknown";
}

std::string to_string(NormKind norm) { return norm == NormKind::layer_norm ? "layer_norm" : "rms_norm"; }

std::string to_string(ActivationKind activation) {
  switch (activation) {
    case ActivationKind::gelu: return "gelu";
    case ActivationKind::swiglu: return "swiglu";
    case ActivationKind::relu: return "relu";
  }
  return "unknown";
}

std::int64_t ModelDescription::params() const {
  std::int64_t total = 0;
  for (const auto& layer : layers) total += layer.params;  // bounded by kMaxModelParams when built
  return total;
}

std::int64_t ModelDescription::largest_layer_params() const {
  std::int64_t largest = 0;
  for (const auto& layer : layers) largest = std::max(largest, layer.largest_module_params);
  return largest;
}

namespace {

// Parameter arithmetic that refuses to overflow: an absurd shape is a bad input, not a wrapped-around count.
class CheckedCount {
 public:
  CheckedCount(std::string source, std::string field) : source_(std::move(source)), field_(std::move(field)) {}
  std::int64_t mul(std::int64_t a, std::int64_t b) const {
    std::int64_t result = 0;
    if (__builtin_mul_overflow(a, b, &result)) overflow();
    return result;
  }
  std::int64_t add(std::int64_t a, std::int64_t b) const {
    std::int64_t result = 0;
    if (__builtin_add_overflow(a, b, &result)) overflow();
    return result;
  }
  [[noreturn]] void overflow() const {
    throw InputError(source_, field_, "absurd size: the parameter count overflows a 64-bit integer");
  }

 private:
  std::string source_;
  std::string field_;
};

// One parameter-owning module of a layer: its weight and its 1-D parameters (bias, norm scale/shift).
struct Module {
  std::int64_t weight = 0;  // matrix (or embedding table) elements
  std::int64_t vector = 0;  // bias and norm elements: small tensors a stage-3 persistence threshold keeps whole
};

LayerDescription layer_from_modules(std::string name, std::string kind, const std::vector<Module>& modules,
                                    const CheckedCount& count) {
  LayerDescription layer;
  layer.name = std::move(name);
  layer.kind = std::move(kind);
  for (const Module& module : modules) {
    const std::int64_t owned = count.add(module.weight, module.vector);
    layer.params = count.add(layer.params, owned);
    layer.largest_module_params = std::max(layer.largest_module_params, owned);
    layer.small_module_params = count.add(layer.small_module_params, module.vector);
    ++layer.module_count;
  }
  layer.module_calls = layer.module_count + 1;
  return layer;
}

void check_total(const ModelDescription& model, const std::string& source, const std::string& field) {
  std::int64_t total = 0;
  const CheckedCount count(source, field);
  for (const auto& layer : model.layers) total = count.add(total, layer.params);
  if (total > kMaxModelParams) {
    throw InputError(source, field,
                     "absurd size: " + std::to_string(total) + " parameters exceeds the supported maximum " +
                         std::to_string(kMaxModelParams) + " (byte counts would overflow 64-bit integers)");
  }
}

}  // namespace

ModelDescription expand_transformer(const std::string& name, const TransformerShape& shape,
                                    const std::string& source) {
  return expand_transformer(name, shape, source, TransformerFieldNames{});
}

ModelDescription expand_transformer(const std::string& name, const TransformerShape& shape,
                                    const std::string& source, const TransformerFieldNames& fields) {
  auto require_positive = [&](std::int64_t value, const std::string& field) {
    if (value < 1) throw InputError(source, field, "expected a positive integer (>= 1), got " + std::to_string(value));
  };
  if (shape.family == ModelFamily::generic) {
    throw InputError(source, "family", "a transformer shape needs family gpt2 or llama, got generic");
  }
  require_positive(shape.vocab_size, fields.vocab_size);
  require_positive(shape.hidden, fields.hidden);
  require_positive(shape.layers, fields.layers);
  require_positive(shape.heads, fields.heads);
  require_positive(shape.kv_heads, fields.kv_heads);
  require_positive(shape.ffn_hidden, fields.ffn_hidden);
  require_positive(shape.max_seq, fields.max_seq);
  if (shape.layers > kMaxTransformerLayers) {
    throw InputError(source, fields.layers,
                     "absurd size: " + std::to_string(shape.layers) + " layers; at most " +
                         std::to_string(kMaxTransformerLayers) + " are supported");
  }
  if (shape.hidden % shape.heads != 0) {
    throw InputError(source, fields.hidden,
                     "hidden size " + std::to_string(shape.hidden) + " is not divisible by the " +
                         std::to_string(shape.heads) + " attention heads (" + fields.heads +
                         "); expected a multiple of the head count");
  }
  if (shape.kv_heads > shape.heads || shape.heads % shape.kv_heads != 0) {
    throw InputError(source, fields.kv_heads,
                     std::to_string(shape.kv_heads) + " key/value heads do not divide the " +
                         std::to_string(shape.heads) + " attention heads; expected a divisor of " + fields.heads);
  }
  if (!(shape.dropout >= 0.0 && shape.dropout < 1.0)) {
    throw InputError(source, fields.dropout, "expected a probability in [0, 1), got " + std::to_string(shape.dropout));
  }

  const CheckedCount count(source, fields.hidden);
  const std::int64_t h = shape.hidden;
  const std::int64_t ffn = shape.ffn_hidden;
  const std::int64_t kv_dim = shape.kv_dim();
  // LayerNorm has a scale and a shift per channel (2h); RMSNorm only a scale (h).
  const std::int64_t norm_params = shape.norm == NormKind::layer_norm ? count.mul(2, h) : h;

  ModelDescription model;
  model.name = name;
  model.source = source;
  model.family = shape.family;
  model.transformer = shape;

  // Embedding: token table V*h, the learned position table max_seq*h (GPT-2), BLOOM's word_embeddings_layernorm.
  {
    std::vector<Module> modules{{count.mul(shape.vocab_size, h), 0}};
    if (shape.learned_positions) modules.push_back({count.mul(shape.max_seq, h), 0});
    if (shape.embedding_norm) modules.push_back({0, norm_params});
    model.layers.push_back(layer_from_modules("embedding", "embedding", modules, count));
  }

  // One block (zero-formulas.md sec. 4): GPT-2 12h^2 + 13h; Llama attention h*(h + 2*kv_dim) + h^2, MLP 3*h*ffn,
  // two RMSNorms 2h. The q/k/v projections are one fused module in GPT-2/BLOOM (c_attn, query_key_value) and
  // three modules in Llama-style code (q_proj, k_proj, v_proj); that matters for DeepSpeed's largest module.
  std::vector<Module> block;
  block.push_back({0, norm_params});  // ln_1 / input_layernorm
  const bool qkv_bias = shape.attention_bias;
  const bool output_bias = shape.attention_bias && shape.attention_output_bias;
  if (shape.family == ModelFamily::gpt2) {
    const std::int64_t qkv_out = count.add(h, count.mul(2, kv_dim));
    block.push_back({count.mul(h, qkv_out), qkv_bias ? qkv_out : 0});  // c_attn
  } else {
    block.push_back({count.mul(h, h), qkv_bias ? h : 0});            // q_proj
    block.push_back({count.mul(h, kv_dim), qkv_bias ? kv_dim : 0});  // k_proj
    block.push_back({count.mul(h, kv_dim), qkv_bias ? kv_dim : 0});  // v_proj
  }
  block.push_back({count.mul(h, h), output_bias ? h : 0});  // attention output projection (c_proj / o_proj)
  block.push_back({0, norm_params});                       // ln_2 / post_attention_layernorm
  const std::int64_t mlp_weight = count.mul(h, ffn);
  if (shape.activation == ActivationKind::swiglu) {
    block.push_back({mlp_weight, shape.mlp_bias ? ffn : 0});  // gate_proj
    block.push_back({mlp_weight, shape.mlp_bias ? ffn : 0});  // up_proj
  } else {
    block.push_back({mlp_weight, shape.mlp_bias ? ffn : 0});  // c_fc / dense_h_to_4h
  }
  block.push_back({mlp_weight, shape.mlp_bias ? h : 0});  // down_proj / c_proj / dense_4h_to_h
  for (std::int64_t i = 0; i < shape.layers; ++i) {
    model.layers.push_back(layer_from_modules("block." + std::to_string(i), "transformer_block", block, count));
  }

  model.layers.push_back(layer_from_modules("final_norm", "norm", {{0, norm_params}}, count));
  if (!shape.tied_embeddings) {
    // Untied output projection V*h without bias (Llama lm_head); tied heads reuse the embedding's table.
    model.layers.push_back(layer_from_modules("lm_head", "lm_head", {{count.mul(shape.vocab_size, h), 0}}, count));
  }
  check_total(model, source, fields.hidden);
  return model;
}

namespace {

const std::vector<std::string> kTransformerKeys = {
    "family",          "vocab_size",     "hidden",          "layers",           "heads",
    "kv_heads",        "ffn_hidden",     "max_seq",         "norm",             "activation",
    "attention_bias",  "attention_output_bias", "mlp_bias", "tied_embeddings",  "learned_positions",
    "embedding_norm",  "dropout",        "norm_eps",        "rope_theta",       "rope_scaling",
    "sliding_window"};

const std::vector<std::string> kModelKeys = {"name",   "source", "reference", "notes", "family",
                                             "params", "largest_layer_params",  "transformer",
                                             "input_elements_per_sample",       "layers", "input_shape"};

const std::vector<std::string> kLayerKeys = {"name",          "kind",  "params", "largest_module_params",
                                             "module_count",  "module_calls", "small_module_params",
                                             "activation_elements_per_sample", "forward_flops_per_sample", "ops"};

void refuse_unknown_keys(const JsonFields& fields, const std::vector<std::string>& known, const std::string& where) {
  const auto unknown = fields.unknown_keys(known);
  if (unknown.empty()) return;
  std::string list;
  for (const auto& key : known) list += (list.empty() ? "" : ", ") + key;
  fields.fail(unknown.front(), "unknown key in " + where + "; expected one of " + list);
}

}  // namespace

void read_rope_scaling(const JsonFields& fields, TransformerShape& shape, const std::string& key_name) {
  const JsonFields scaling = key_name.empty() ? fields : fields.object(key_name);
  // transformers writes "rope_type" (older configs "type").
  const std::string key = scaling.has("rope_type") ? "rope_type" : "type";
  shape.rope_scaling_type = scaling.string(key);
  if (shape.rope_scaling_type == "default") {  // transformers' name for no scaling
    shape.rope_scaling_type.clear();
    return;
  }
  if (shape.rope_scaling_type == "llama3") {
    shape.rope_scaling_factor = scaling.positive_number("factor");
    shape.rope_low_freq_factor = scaling.positive_number("low_freq_factor");
    shape.rope_high_freq_factor = scaling.positive_number("high_freq_factor");
    shape.rope_original_max_position = scaling.positive_integer("original_max_position_embeddings");
    if (!(shape.rope_high_freq_factor > shape.rope_low_freq_factor))
      scaling.fail("high_freq_factor", "expected more than low_freq_factor (" +
                                           std::to_string(shape.rope_low_freq_factor) + ")");
  } else if (scaling.has("factor")) {
    shape.rope_scaling_factor = scaling.positive_number("factor");
  }
}

namespace {

TransformerShape shape_from_json(const JsonFields& fields) {
  refuse_unknown_keys(fields, kTransformerKeys, "the transformer shape");
  TransformerShape shape;
  const std::string family = fields.one_of("family", {"gpt2", "llama"});
  shape.family = family == "gpt2" ? ModelFamily::gpt2 : ModelFamily::llama;
  const bool gpt2 = shape.family == ModelFamily::gpt2;
  shape.vocab_size = fields.positive_integer("vocab_size");
  shape.hidden = fields.positive_integer("hidden");
  shape.layers = fields.positive_integer("layers");
  shape.heads = fields.positive_integer("heads");
  shape.kv_heads = fields.positive_integer_or("kv_heads", shape.heads);  // no grouped-query attention
  // The family defines the rest (documented in the header): GPT-2 4h GELU MLP with biases, LayerNorm, learned
  // positions, tied; Llama SwiGLU without biases, RMSNorm, rotary positions, untied. Llama's MLP width has no
  // rule of thumb (11008, 14336, 28672...), so it is required.
  if (gpt2) {
    shape.ffn_hidden = fields.has("ffn_hidden") ? fields.positive_integer("ffn_hidden") : 4 * shape.hidden;
  } else {
    shape.ffn_hidden = fields.positive_integer("ffn_hidden");
  }
  shape.max_seq = fields.positive_integer("max_seq");
  const std::string norm = fields.has("norm") ? fields.one_of("norm", {"layer_norm", "rms_norm"})
                                              : (gpt2 ? "layer_norm" : "rms_norm");
  shape.norm = norm == "layer_norm" ? NormKind::layer_norm : NormKind::rms_norm;
  const std::string activation = fields.has("activation") ? fields.one_of("activation", {"gelu", "swiglu", "relu"})
                                                          : (gpt2 ? "gelu" : "swiglu");
  shape.activation = activation == "gelu" ? ActivationKind::gelu
                     : activation == "swiglu" ? ActivationKind::swiglu
                                              : ActivationKind::relu;
  shape.attention_bias = fields.boolean_or("attention_bias", gpt2);
  shape.attention_output_bias = fields.boolean_or("attention_output_bias", true);
  shape.mlp_bias = fields.boolean_or("mlp_bias", gpt2);
  shape.tied_embeddings = fields.boolean_or("tied_embeddings", gpt2);
  shape.learned_positions = fields.boolean_or("learned_positions", gpt2);
  shape.embedding_norm = fields.boolean_or("embedding_norm", false);
  shape.dropout = fields.non_negative_number_or("dropout", 0.0);
  shape.norm_eps = fields.positive_number_or("norm_eps", 1e-5);
  shape.rope_theta = fields.positive_number_or("rope_theta", 10000.0);
  if (fields.has("rope_scaling") && !fields.raw("rope_scaling").is_null()) read_rope_scaling(fields, shape, "rope_scaling");
  shape.sliding_window = fields.non_negative_integer_or("sliding_window", 0);
  return shape;
}

LayerDescription layer_from_json(const JsonFields& fields) {
  refuse_unknown_keys(fields, kLayerKeys, "a layer");
  LayerDescription layer;
  layer.name = fields.string("name");
  if (layer.name.empty()) fields.fail("name", "expected a non-empty layer name");
  layer.kind = fields.string_or("kind", "generic");
  layer.params = fields.non_negative_integer("params");
  layer.activation_elements_per_sample = fields.non_negative_integer("activation_elements_per_sample");
  if (fields.has("ops")) layer.ops = layer_ops_from_json(fields.raw("ops"), fields.source(), fields.field_path("ops"));
  layer.forward_flops_per_sample = fields.non_negative_number_or("forward_flops_per_sample", 0.0);
  // A layer given as one block of parameters is one module unless the file says otherwise.
  layer.largest_module_params = fields.non_negative_integer_or("largest_module_params", layer.params);
  layer.module_count = fields.non_negative_integer_or("module_count", layer.params > 0 ? 1 : 0);
  layer.small_module_params = fields.non_negative_integer_or("small_module_params", 0);
  if (layer.largest_module_params > layer.params) {
    fields.fail("largest_module_params", "is " + std::to_string(layer.largest_module_params) +
                                             ", more than the layer's " + std::to_string(layer.params) + " params");
  }
  if (layer.small_module_params > layer.params) {
    fields.fail("small_module_params", "is " + std::to_string(layer.small_module_params) +
                                           ", more than the layer's " + std::to_string(layer.params) + " params");
  }
  if (layer.params > 0 && layer.module_count < 1) {
    fields.fail("module_count", "is 0 but the layer has " + std::to_string(layer.params) + " params");
  }
  layer.module_calls = fields.non_negative_integer_or("module_calls", layer.module_count + 1);
  if (layer.module_calls < layer.module_count) {
    fields.fail("module_calls", "is " + std::to_string(layer.module_calls) + ", fewer than the layer's " +
                                    std::to_string(layer.module_count) +
                                    " modules owning parameters (module_count), each called at least once");
  }
  return layer;
}

// A stated total (model_to_json writes them) must agree with the layers: a hand-edited file that disagrees
// with itself is an error, not a choice between two numbers.
void check_stated(const JsonFields& fields, const std::string& key, std::int64_t computed) {
  if (!fields.has(key)) return;
  const std::int64_t stated = fields.non_negative_integer(key);
  if (stated != computed) {
    fields.fail(key, "states " + std::to_string(stated) + " but the description gives " + std::to_string(computed));
  }
}

}  // namespace

namespace {

// A layer list that says what it computes: every layer has ops, the input's shape is given and agrees with
// input_elements_per_sample, and the network checks out (core/layer_ops.h check_layer_ops).
void read_layer_ops(const JsonFields& fields, ModelDescription& model) {
  std::size_t with_ops = 0;
  for (const LayerDescription& layer : model.layers) with_ops += !layer.ops.empty();
  if (with_ops == 0) {
    if (fields.has("input_shape")) fields.fail("input_shape", "is read with the layers' \"ops\", which no layer has");
    return;
  }
  for (std::size_t i = 0; i < model.layers.size(); ++i)
    if (model.layers[i].ops.empty())
      fields.fail("layers[" + std::to_string(i) + "].ops",
                  "missing: layer " + model.layers[i].name + " has no ops while others do (every layer or none)");
  const nlohmann::json& shape = fields.raw("input_shape");
  if (!shape.is_array() || shape.size() != 3 || !shape[0].is_number_integer() || !shape[1].is_number_integer() ||
      !shape[2].is_number_integer() || shape[0].get<std::int64_t>() < 1 || shape[1].get<std::int64_t>() < 1 ||
      shape[2].get<std::int64_t>() < 1 || shape[0].get<std::int64_t>() > (1 << 20) ||
      shape[1].get<std::int64_t>() > (1 << 20) || shape[2].get<std::int64_t>() > (1 << 20))
    fields.fail("input_shape", "expected [channels, height, width] of one sample, positive integers up to 2^20");
  const TensorShape input{shape[0].get<std::int64_t>(), shape[1].get<std::int64_t>(), shape[2].get<std::int64_t>()};
  if (input.elements() != model.input_elements_per_sample)
    fields.fail("input_shape", "holds " + std::to_string(input.elements()) + " elements but input_elements_per_sample "
                               "says " + std::to_string(model.input_elements_per_sample));
  model.input_shape = input;
  model.classes = check_layer_ops(model.layers, input, fields.source());
}

}  // namespace

ModelDescription model_from_json(const nlohmann::json& document, const std::string& source) {
  const JsonFields fields(document, source);
  refuse_unknown_keys(fields, kModelKeys, "a model description");
  const std::string name = fields.string("name");
  if (name.empty()) fields.fail("name", "expected a non-empty model name");
  const std::string reference = fields.string_or("reference", "");

  ModelDescription model;
  if (fields.has("transformer")) {
    const JsonFields transformer = fields.object("transformer");
    TransformerFieldNames names;
    names.vocab_size = transformer.field_path("vocab_size");
    names.hidden = transformer.field_path("hidden");
    names.layers = transformer.field_path("layers");
    names.heads = transformer.field_path("heads");
    names.kv_heads = transformer.field_path("kv_heads");
    names.ffn_hidden = transformer.field_path("ffn_hidden");
    names.max_seq = transformer.field_path("max_seq");
    names.dropout = transformer.field_path("dropout");
    model = expand_transformer(name, shape_from_json(transformer), source, names);
  } else if (fields.has("layers")) {
    const nlohmann::json& layers = fields.raw("layers");
    if (!layers.is_array() || layers.empty()) fields.fail("layers", "expected a non-empty array of layers");
    model.name = name;
    model.source = source;
    model.family = ModelFamily::generic;
    model.input_elements_per_sample = fields.positive_integer("input_elements_per_sample");
    for (std::size_t i = 0; i < layers.size(); ++i) {
      model.layers.push_back(layer_from_json(JsonFields(layers[i], source, "layers[" + std::to_string(i) + "]")));
    }
    check_total(model, source, "layers");
    read_layer_ops(fields, model);
  } else {
    fields.fail("transformer", "missing: a model description needs \"transformer\" (a shape) or \"layers\"");
  }
  if (fields.has("family") && fields.string("family") != to_string(model.family)) {
    fields.fail("family", "states \"" + fields.string("family") + "\" but the description is " + to_string(model.family));
  }
  check_stated(fields, "params", model.params());
  check_stated(fields, "largest_layer_params", model.largest_layer_params());
  model.reference = reference;
  return model;
}

nlohmann::json model_to_json(const ModelDescription& model) {
  nlohmann::json document;
  document["name"] = model.name;
  document["source"] = model.source;
  document["reference"] = model.reference;
  document["family"] = to_string(model.family);
  document["params"] = model.params();
  document["largest_layer_params"] = model.largest_layer_params();
  if (model.transformer) {
    const TransformerShape& shape = *model.transformer;
    document["transformer"] = {
        {"family", to_string(shape.family)},
        {"vocab_size", shape.vocab_size},
        {"hidden", shape.hidden},
        {"layers", shape.layers},
        {"heads", shape.heads},
        {"kv_heads", shape.kv_heads},
        {"ffn_hidden", shape.ffn_hidden},
        {"max_seq", shape.max_seq},
        {"norm", to_string(shape.norm)},
        {"activation", to_string(shape.activation)},
        {"attention_bias", shape.attention_bias},
        {"attention_output_bias", shape.attention_output_bias},
        {"mlp_bias", shape.mlp_bias},
        {"tied_embeddings", shape.tied_embeddings},
        {"learned_positions", shape.learned_positions},
        {"embedding_norm", shape.embedding_norm},
        {"dropout", shape.dropout},
        {"norm_eps", shape.norm_eps},
        {"rope_theta", shape.rope_theta},
        {"sliding_window", shape.sliding_window},
    };
    if (!shape.rope_scaling_type.empty()) {
      nlohmann::json scaling = {{"rope_type", shape.rope_scaling_type}, {"factor", shape.rope_scaling_factor}};
      if (shape.rope_scaling_type == "llama3") {
        scaling["low_freq_factor"] = shape.rope_low_freq_factor;
        scaling["high_freq_factor"] = shape.rope_high_freq_factor;
        scaling["original_max_position_embeddings"] = shape.rope_original_max_position;
      }
      document["transformer"]["rope_scaling"] = scaling;
    }
  } else {
    document["input_elements_per_sample"] = model.input_elements_per_sample;
    if (model.input_shape)
      document["input_shape"] = {model.input_shape->channels, model.input_shape->height, model.input_shape->width};
  }
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& layer : model.layers) {
    layers.push_back({{"name", layer.name},
                      {"kind", layer.kind},
                      {"params", layer.params},
                      {"largest_module_params", layer.largest_module_params},
                      {"module_count", layer.module_count},
                      {"module_calls", layer.module_calls},
                      {"small_module_params", layer.small_module_params},
                      {"activation_elements_per_sample", layer.activation_elements_per_sample},
                      {"forward_flops_per_sample", layer.forward_flops_per_sample}});
    if (!layer.ops.empty()) layers.back()["ops"] = layer_ops_to_json(layer.ops);
  }
  document["layers"] = std::move(layers);
  return document;
}

std::vector<std::string> bundled_model_names() {
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(bundled_models_directory(), error)) {
    if (entry.is_regular_file() && entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

ModelDescription load_model(const std::string& name_or_path) {
  const auto names = bundled_model_names();
  if (std::find(names.begin(), names.end(), name_or_path) != names.end()) {
    const auto path = bundled_models_directory() / (name_or_path + ".json");
    ModelDescription model = model_from_json(read_json_file(path, /*allow_comments=*/true), path.string());
    model.source = "bundled:" + name_or_path;
    return model;
  }
  std::error_code error;
  if (!name_or_path.empty() && std::filesystem::exists(name_or_path, error)) {
    const nlohmann::json document = read_json_file(name_or_path, /*allow_comments=*/true);
    if (is_hf_config(document)) return model_from_hf_config(document, name_or_path);
    return model_from_json(document, name_or_path);
  }
  std::string list;
  for (const auto& name : names) list += (list.empty() ? "" : ", ") + name;
  throw InputError("--model", "",
                   "unknown model \"" + name_or_path + "\": not a bundled model (" +
                       (list.empty() ? std::string("none found in ") + bundled_models_directory().string() : list) +
                       ") and no such file");
}

void check_sequence_length(const ModelDescription& model, std::int64_t seq_len, const std::string& source,
                           const std::string& field) {
  if (model.transformer && model.transformer->learned_positions && seq_len > model.transformer->max_seq) {
    throw InputError(source, field,
                     std::to_string(seq_len) + " exceeds the model's learned position table (" +
                         std::to_string(model.transformer->max_seq) + " positions)");
  }
}

}  // namespace zeroplan
