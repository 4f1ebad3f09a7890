// core/hf_config_import: Hugging Face config.json fixtures (tests/core/data/hf/, copies of the published
// configs' fields) read into model descriptions equal, layer by layer, to the bundled ones, and exact to the
// parameter against the published counts.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/hf_config_import.h"
#include "core/input_error.h"
#include "core/json_input.h"
#include "core/model_description.h"
#include "tests/core/input_error_expectations.h"

namespace zeroplan {
namespace {

const std::string kHf = std::string(ZEROPLAN_TEST_DATA_DIR) + "/hf";

ModelDescription import(const std::string& file) {
  const std::string path = kHf + "/" + file;
  return model_from_hf_config(read_json_file(path), path);
}

void expect_same_shape_and_layers(const ModelDescription& imported, const ModelDescription& bundled) {
  ASSERT_TRUE(imported.transformer && bundled.transformer);
  const TransformerShape& a = *imported.transformer;
  const TransformerShape& b = *bundled.transformer;
  EXPECT_EQ(a.family, b.family);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.hidden, b.hidden);
  EXPECT_EQ(a.layers, b.layers);
  EXPECT_EQ(a.heads, b.heads);
  EXPECT_EQ(a.kv_heads, b.kv_heads);
  EXPECT_EQ(a.ffn_hidden, b.ffn_hidden);
  EXPECT_EQ(a.max_seq, b.max_seq);
  EXPECT_EQ(a.norm, b.norm);
  EXPECT_EQ(a.activation, b.activation);
  EXPECT_EQ(a.attention_bias, b.attention_bias);
  EXPECT_EQ(a.mlp_bias, b.mlp_bias);
  EXPECT_EQ(a.tied_embeddings, b.tied_embeddings);
  EXPECT_EQ(a.learned_positions, b.learned_positions);
  EXPECT_EQ(a.embedding_norm, b.embedding_norm);
  EXPECT_DOUBLE_EQ(a.dropout, b.dropout);
  ASSERT_EQ(imported.layers.size(), bundled.layers.size());
  for (std::size_t i = 0; i < bundled.layers.size(); ++i) {
    EXPECT_EQ(imported.layers[i].name, bundled.layers[i].name);
    EXPECT_EQ(imported.layers[i].params, bundled.layers[i].params);
    EXPECT_EQ(imported.layers[i].largest_module_params, bundled.layers[i].largest_module_params);
    EXPECT_EQ(imported.layers[i].module_count, bundled.layers[i].module_count);
    EXPECT_EQ(imported.layers[i].small_module_params, bundled.layers[i].small_module_params);
  }
}

struct Fixture {
  const char* file;
  const char* bundled;
  std::int64_t published;  // the model card / paper count
};

// Sources: HF model cards and safetensors totals (openai-community/gpt2*, meta-llama/*, mistralai/*), the BLOOM
// paper (arXiv 2211.05100) Table 3.
const Fixture kFixtures[] = {
    {"gpt2.json", "gpt2-124m", 124'439'808},
    {"gpt2-medium.json", "gpt2-355m", 354'823'168},
    {"gpt2-large.json", "gpt2-774m", 774'030'080},
    {"gpt2-xl.json", "gpt2-1.5b", 1'557'611'200},
    {"Llama-2-7b-hf.json", "llama2-7b", 6'738'415'616},
    {"Llama-2-13b-hf.json", "llama2-13b", 13'015'864'320},
    {"Llama-2-70b-hf.json", "llama2-70b", 68'976'648'192},
    {"Meta-Llama-3-8B.json", "llama3-8b", 8'030'261'248},
    {"Meta-Llama-3-70B.json", "llama3-70b", 70'553'706'496},
    {"Mistral-7B-v0.1.json", "mistral-7b", 7'241'732'096},
    {"bloom.json", "bloom-176b", 176'247'271'424},
};

TEST(HfImport, EveryFixtureEqualsItsBundledDescription) {
  for (const Fixture& fixture : kFixtures) {
    SCOPED_TRACE(fixture.file);
    const ModelDescription imported = import(fixture.file);
    EXPECT_EQ(imported.params(), fixture.published);
    expect_same_shape_and_layers(imported, load_model(fixture.bundled));
  }
}

TEST(HfImport, Qwen2HasQkvBiasesButNoOutputBiasAndTiedEmbeddings) {
  const ModelDescription model = import("Qwen2-0.5B.json");
  EXPECT_EQ(model.params(), 494'032'768);  // HF Qwen/Qwen2-0.5B model card (0.49B), safetensors total
  ASSERT_TRUE(model.transformer);
  EXPECT_TRUE(model.transformer->attention_bias);
  EXPECT_FALSE(model.transformer->attention_output_bias);
  EXPECT_TRUE(model.transformer->tied_embeddings);
  EXPECT_EQ(model.layers.back().name, "final_norm");  // no separate lm_head
}

TEST(HfImport, NamesComeFromNameOrPathOrTheFile) {
  EXPECT_EQ(import("gpt2.json").name, "openai-community/gpt2");
  EXPECT_EQ(import("Qwen2-0.5B.json").name, "Qwen2-0.5B");  // no _name_or_path: the file stem
}

TEST(HfImport, LlamaTiesOnlyWhenTheConfigSaysSo) {
  nlohmann::json config = read_json_file(kHf + "/Llama-2-7b-hf.json");
  config.erase("tie_word_embeddings");  // LlamaConfig's default is false
  EXPECT_EQ(model_from_hf_config(config, "llama.json").params(), 6'738'415'616);
  config["tie_word_embeddings"] = true;
  EXPECT_EQ(model_from_hf_config(config, "llama.json").params(), 6'738'415'616 - 32000LL * 4096);
}

TEST(HfImport, Gpt2TiesByDefaultAndUntiesOnRequest) {
  nlohmann::json config = read_json_file(kHf + "/gpt2.json");
  config["tie_word_embeddings"] = false;
  EXPECT_EQ(model_from_hf_config(config, "gpt2.json").params(), 124'439'808 + 50257LL * 768);
}

TEST(HfImport, Gpt2InnerSizeNullMeansFourTimesHidden) {
  nlohmann::json config = read_json_file(kHf + "/gpt2.json");
  config["n_inner"] = nullptr;
  EXPECT_EQ(model_from_hf_config(config, "gpt2.json").params(), 124'439'808);
  config["n_inner"] = 2048;
  const std::int64_t per_block_change = 2 * 768LL * (2048 - 3072) + (2048 - 3072);
  EXPECT_EQ(model_from_hf_config(config, "gpt2.json").params(), 124'439'808 + 12 * per_block_change);
}

TEST(HfImport, MissingKeyValueHeadsMeansMultiHead) {
  nlohmann::json config = read_json_file(kHf + "/Llama-2-7b-hf.json");
  config.erase("num_key_value_heads");  // Llama 1 configs
  EXPECT_EQ(model_from_hf_config(config, "llama1.json").transformer->kv_heads, 32);
}

TEST(HfImport, LlamaAttentionBiasCoversAllFourProjections) {
  nlohmann::json config = read_json_file(kHf + "/Llama-2-7b-hf.json");
  config["attention_bias"] = true;
  EXPECT_EQ(model_from_hf_config(config, "llama.json").params(), 6'738'415'616 + 32LL * 4 * 4096);
}

TEST(HfImport, ModelTypeFromArchitectures) {
  nlohmann::json config = read_json_file(kHf + "/Mistral-7B-v0.1.json");
  config.erase("model_type");
  EXPECT_EQ(model_from_hf_config(config, "mistral.json").params(), 7'241'732'096);
}

TEST(HfImport, RecognizesHfConfigs) {
  EXPECT_TRUE(is_hf_config(read_json_file(kHf + "/bloom.json")));
  EXPECT_TRUE(is_hf_config(nlohmann::json::parse(R"({"n_embd": 768})")));
  EXPECT_FALSE(is_hf_config(nlohmann::json::parse(R"({"name": "x", "transformer": {}})")));
  EXPECT_FALSE(is_hf_config(nlohmann::json::parse("[]")));
}

TEST(HfImportErrors, UnsupportedModelType) {
  const auto config = nlohmann::json::parse(R"({"model_type": "t5", "d_model": 512})");
  expect_input_error([&] { model_from_hf_config(config, "t5/config.json"); },
                     {"t5/config.json", "model_type", "\"t5\"", "gpt2, llama, mistral, qwen2, bloom"});
}

TEST(HfImportErrors, HeadsNotDividingHiddenNamesTheHfKeys) {
  nlohmann::json config = read_json_file(kHf + "/Llama-2-7b-hf.json");
  config["num_attention_heads"] = 30;
  config["num_key_value_heads"] = 30;
  expect_input_error([&] { model_from_hf_config(config, "bad/config.json"); },
                     {"bad/config.json", "hidden_size", "num_attention_heads"});
}

TEST(HfImportErrors, ZeroLayers) {
  nlohmann::json config = read_json_file(kHf + "/gpt2.json");
  config["n_layer"] = 0;
  expect_input_error([&] { model_from_hf_config(config, "gpt2.json"); }, {"gpt2.json", "n_layer", "got 0"});
}

TEST(HfImportErrors, MissingHiddenSize) {
  nlohmann::json config = read_json_file(kHf + "/bloom.json");
  config.erase("n_embed");
  expect_input_error([&] { model_from_hf_config(config, "bloom.json"); }, {"bloom.json", "hidden_size or n_embed"});
}

TEST(HfImportErrors, HeadDimIndependentOfHiddenIsRefused) {
  nlohmann::json config = read_json_file(kHf + "/Mistral-7B-v0.1.json");
  config["head_dim"] = 256;
  expect_input_error([&] { model_from_hf_config(config, "m.json"); }, {"m.json", "head_dim", "not supported"});
  config["head_dim"] = 128;  // equal to hidden / heads: fine
  EXPECT_EQ(model_from_hf_config(config, "m.json").params(), 7'241'732'096);
}

}  // namespace
}  // namespace zeroplan

namespace zeroplan {
namespace {

// What changes the math but not the sizes, as transformers 4 and 5 write it: the configs the GPU machine's
// transformers 5.17 wrote (bench/llama/configs/, rope under "rope_parameters") and the hub's transformers 4 form.
TEST(HfImport, RopeNormAndWindowFieldsInBothTransformersForms) {
  const ModelDescription l3 = load_model("bench/llama/configs/llama3-8b.json");
  ASSERT_TRUE(l3.transformer.has_value());
  EXPECT_EQ(l3.transformer->rope_theta, 500000.0);
  EXPECT_EQ(l3.transformer->rope_scaling_type, "llama3");
  EXPECT_EQ(l3.transformer->rope_scaling_factor, 8.0);
  EXPECT_EQ(l3.transformer->rope_low_freq_factor, 1.0);
  EXPECT_EQ(l3.transformer->rope_high_freq_factor, 4.0);
  EXPECT_EQ(l3.transformer->rope_original_max_position, 8192);
  EXPECT_EQ(l3.transformer->norm_eps, 1e-5);
  const ModelDescription tiny = load_model("bench/llama/configs/tinyllama-1.1b.json");  // rope_type "default"
  EXPECT_TRUE(tiny.transformer->rope_scaling_type.empty());
  EXPECT_EQ(tiny.transformer->rope_theta, 10000.0);
  // transformers 4's form, with Mistral's window and Qwen2's switch for it
  nlohmann::json v4 = {{"model_type", "mistral"}, {"vocab_size", 32000}, {"hidden_size", 4096},
                       {"num_hidden_layers", 32}, {"num_attention_heads", 32}, {"num_key_value_heads", 8},
                       {"intermediate_size", 14336}, {"max_position_embeddings", 32768}, {"rms_norm_eps", 1e-6},
                       {"rope_theta", 1000000.0}, {"sliding_window", 4096},
                       {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 32.0}, {"low_freq_factor", 1.0},
                                         {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}}}};
  const ModelDescription m = model_from_hf_config(v4, "mistral.json");
  EXPECT_EQ(m.transformer->rope_theta, 1000000.0);
  EXPECT_EQ(m.transformer->norm_eps, 1e-6);
  EXPECT_EQ(m.transformer->sliding_window, 4096);
  EXPECT_EQ(m.transformer->rope_scaling_factor, 32.0);
  v4["model_type"] = "qwen2";
  EXPECT_EQ(model_from_hf_config(v4, "qwen2.json").transformer->sliding_window, 0);  // use_sliding_window absent
  v4["use_sliding_window"] = true;
  EXPECT_EQ(model_from_hf_config(v4, "qwen2.json").transformer->sliding_window, 4096);
  v4["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_TRUE(model_from_hf_config(v4, "qwen2.json").transformer->rope_scaling_type.empty());
  v4["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};  // llama3 without its other numbers
  EXPECT_THROW(model_from_hf_config(v4, "qwen2.json"), InputError);
  v4.erase("rope_scaling");
  v4["num_local_experts"] = 8;
  try {
    model_from_hf_config(v4, "mixtral.json");
    ADD_FAILURE() << "a mixture-of-experts config was read as a dense model";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("num_local_experts"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zeroplan
