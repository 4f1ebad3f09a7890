// core/model_description: every bundled model's exact parameter count against its published figure, the
// per-layer structure the planner relies on (largest module, module counts, small parameters), the JSON forms,
// and bad model descriptions (each its own test, each error naming file and field).
#include <gtest/gtest.h>

#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "core/input_error.h"
#include "core/json_input.h"
#include "core/model_description.h"
#include "tests/core/input_error_expectations.h"

namespace zeroplan {
namespace {

const std::string kData = ZEROPLAN_TEST_DATA_DIR;

// Published parameter counts. Each was also derived by hand from the architecture (see models/NAME.json
// "reference"): GPT-2 V*h + 1024*h + L*(12h^2 + 13h) + 2h; Llama L*(h*(h + 2*kv_dim) + h^2 + 3*h*ffn + 2h) + h +
// 2*V*h (untied); BLOOM V*h + 2h + L*(12h^2 + 13h) + 2h.
const std::map<std::string, std::int64_t> kPublishedParams = {
    {"gpt2-124m", 124'439'808},        // HF openai-community/gpt2
    {"gpt2-355m", 354'823'168},        // HF openai-community/gpt2-medium
    {"gpt2-774m", 774'030'080},        // HF openai-community/gpt2-large
    {"gpt2-1.5b", 1'557'611'200},      // HF openai-community/gpt2-xl
    {"llama2-7b", 6'738'415'616},      // HF meta-llama/Llama-2-7b-hf
    {"llama2-13b", 13'015'864'320},    // HF meta-llama/Llama-2-13b-hf
    {"llama2-70b", 68'976'648'192},    // HF meta-llama/Llama-2-70b-hf
    {"llama3-8b", 8'030'261'248},      // HF meta-llama/Meta-Llama-3-8B
    {"llama3-70b", 70'553'706'496},    // HF meta-llama/Meta-Llama-3-70B
    {"mistral-7b", 7'241'732'096},     // HF mistralai/Mistral-7B-v0.1
    {"bloom-176b", 176'247'271'424},   // BLOOM paper (arXiv 2211.05100) Table 3
    {"gpt3-175b", 174'604'259'328},    // GPT-3 paper "175.0B" (arXiv 2005.14165 Table 2.1); exact count derived
    {"resnet101", 42'520'650},         // torchvision resnet101 44,549,160 - 2,049,000 + 20,490 (10 classes)
};

TEST(BundledModels, EveryBundledModelHasAPublishedCountHere) {
  std::set<std::string> bundled;
  for (const auto& name : bundled_model_names()) bundled.insert(name);
  std::set<std::string> checked;
  for (const auto& [name, params] : kPublishedParams) checked.insert(name);
  EXPECT_EQ(bundled, checked);
}

TEST(BundledModels, ExactParameterCounts) {
  for (const auto& [name, published] : kPublishedParams) {
    const ModelDescription model = load_model(name);
    EXPECT_EQ(model.params(), published) << name;
    EXPECT_EQ(model.name, name) << "the file's name field matches its file name";
    EXPECT_EQ(model.source, "bundled:" + name);
    EXPECT_FALSE(model.reference.empty()) << name << " needs a reference";
  }
}

TEST(BundledModels, Gpt3IsThePapers175B) {
  // The paper rounds to 175.0B; the exact count for its stated shape is within 0.3% of that.
  const double params = static_cast<double>(load_model("gpt3-175b").params());
  EXPECT_NEAR(params / 175.0e9, 1.0, 0.003);
}

TEST(ExpandTransformer, Gpt2SmallLayerByLayer) {
  const ModelDescription model = load_model("gpt2-124m");
  ASSERT_EQ(model.layers.size(), 14u);  // embedding, 12 blocks, final_norm; lm_head tied
  const LayerDescription& embedding = model.layers.front();
  EXPECT_EQ(embedding.kind, "embedding");
  EXPECT_EQ(embedding.params, 50257 * 768 + 1024 * 768);
  EXPECT_EQ(embedding.largest_module_params, 50257 * 768);  // wte
  EXPECT_EQ(embedding.module_count, 2);
  const LayerDescription& block = model.layers[1];
  EXPECT_EQ(block.name, "block.0");
  EXPECT_EQ(block.params, 12 * 768 * 768 + 13 * 768);
  EXPECT_EQ(block.largest_module_params, 768 * 3072 + 3072);  // c_fc weight + bias
  EXPECT_EQ(block.module_count, 6);                           // ln_1, c_attn, c_proj, ln_2, c_fc, c_proj
  EXPECT_EQ(block.small_module_params, 13 * 768);             // two LayerNorms 4h + biases 9h
  EXPECT_EQ(model.layers.back().name, "final_norm");
  EXPECT_EQ(model.layers.back().params, 2 * 768);
  EXPECT_EQ(model.largest_layer_params(), 50257 * 768);
}

TEST(ExpandTransformer, Llama2SevenBLayerByLayer) {
  const ModelDescription model = load_model("llama2-7b");
  ASSERT_EQ(model.layers.size(), 35u);  // embedding, 32 blocks, final_norm, lm_head
  const LayerDescription& block = model.layers[1];
  EXPECT_EQ(block.params, 4 * 4096LL * 4096 + 3 * 4096LL * 11008 + 2 * 4096);
  EXPECT_EQ(block.module_count, 9);  // q, k, v, o, gate, up, down, two RMSNorms
  EXPECT_EQ(block.largest_module_params, 4096LL * 11008);
  EXPECT_EQ(block.small_module_params, 2 * 4096);
  EXPECT_EQ(model.layers.back().kind, "lm_head");
  EXPECT_EQ(model.layers.back().params, 32000LL * 4096);
  EXPECT_EQ(model.largest_layer_params(), 32000LL * 4096);
}

TEST(ExpandTransformer, GroupedQueryAttentionShrinksKeyValueProjections) {
  const ModelDescription model = load_model("llama3-70b");
  const LayerDescription& block = model.layers[1];
  const std::int64_t h = 8192, kv_dim = 8 * 128, ffn = 28672;
  EXPECT_EQ(block.params, h * (h + 2 * kv_dim) + h * h + 3 * h * ffn + 2 * h);
}

TEST(ExpandTransformer, BloomHasAnEmbeddingNormAndNoPositionTable) {
  const ModelDescription model = load_model("bloom-176b");
  const LayerDescription& embedding = model.layers.front();
  EXPECT_EQ(embedding.params, 250880LL * 14336 + 2 * 14336);
  EXPECT_EQ(embedding.module_count, 2);  // word_embeddings, word_embeddings_layernorm
  EXPECT_EQ(embedding.small_module_params, 2 * 14336);
}

TEST(ExpandTransformer, QkvBiasWithoutOutputBias) {
  TransformerShape shape;
  shape.family = ModelFamily::llama;
  shape.vocab_size = 151936;
  shape.hidden = 896;
  shape.layers = 24;
  shape.heads = 14;
  shape.kv_heads = 2;
  shape.ffn_hidden = 4864;
  shape.max_seq = 131072;
  shape.norm = NormKind::rms_norm;
  shape.activation = ActivationKind::swiglu;
  shape.attention_bias = true;
  shape.attention_output_bias = false;
  shape.mlp_bias = false;
  shape.tied_embeddings = true;
  shape.learned_positions = false;
  const ModelDescription model = expand_transformer("qwen2-0.5b", shape, "test");
  EXPECT_EQ(model.params(), 494'032'768);  // Qwen2-0.5B (HF Qwen/Qwen2-0.5B)
  EXPECT_EQ(model.layers[1].small_module_params, 2 * 896 + 896 + 2 * 128);  // norms + q, k, v biases
}

TEST(GenericModel, ResNet101Layers) {
  const ModelDescription model = load_model("resnet101");
  EXPECT_EQ(model.family, ModelFamily::generic);
  EXPECT_FALSE(model.transformer.has_value());
  EXPECT_EQ(model.input_elements_per_sample, 3 * 32 * 32);
  ASSERT_EQ(model.layers.size(), 35u);  // stem, 3 + 4 + 23 + 3 bottlenecks, head
  // The largest module: layer4's 3x3 conv, 512 * 512 * 9.
  EXPECT_EQ(model.largest_layer_params(), 512 * 512 * 9);
  // layer1.0 at 8x8 (see models/resnet101.json notes): conv1 out + relu 2*64*64, conv2 out + relu 2*64*64,
  // conv3 out 256*64, block output 256*64, downsample conv out 256*64 = 65,536 elements per sample.
  EXPECT_EQ(model.layers[1].name, "layer1.0");
  EXPECT_EQ(model.layers[1].activation_elements_per_sample, 65536);
  // Its params: 64*64 + 9*64*64 + 64*256 + downsample 64*256, BatchNorms 2*(64 + 64 + 256 + 256).
  EXPECT_EQ(model.layers[1].params, 64 * 64 + 9 * 64 * 64 + 64 * 256 + 64 * 256 + 2 * (64 + 64 + 256 + 256));
  EXPECT_EQ(model.layers.back().params, 2048 * 10 + 10);
}

// DeepSpeed's stage-3 hooks run on every module call (parameterless modules and repeated calls included): the
// profile of ResNet-101 under ZeRO-3 on one H100 counts 353 PreBackwardFunctionForModule calls per step
// (bench/deepspeed/results-pending/resnet101_fp16_1gpu_a1_s3_t32_h100x1.profile.txt), where the 244 modules owning
// parameters plus one per layer undercount torchvision's Bottleneck (one ReLU module called three times).
TEST(GenericModel, ResNet101ModuleCallsAreTheHookCallsProfiled) {
  const ModelDescription model = load_model("resnet101");
  std::int64_t calls = 0;
  for (const LayerDescription& layer : model.layers) {
    EXPECT_GE(layer.module_calls, layer.module_count) << layer.name;
    calls += layer.module_calls;
  }
  EXPECT_EQ(calls, 353);
}

TEST(GenericModel, ModuleCallsDefaultToTheModulesAndTheLayer) {
  const ModelDescription gpt2 = load_model("gpt2-124m");
  EXPECT_EQ(gpt2.layers[1].module_calls, 7);  // the block, ln_1, c_attn, c_proj, ln_2, c_fc, c_proj
  nlohmann::json document = model_to_json(load_model("resnet101"));
  document["layers"][1].erase("module_calls");
  EXPECT_EQ(model_from_json(document, "edited.json").layers[1].module_calls, 8 + 1);
  document["layers"][1]["module_calls"] = 3;
  expect_input_error([&] { model_from_json(document, "edited.json"); },
                     {"edited.json", "module_calls", "3", "fewer than the layer's 8"});
}

TEST(ModelJson, RoundTripKeepsEveryLayer) {
  for (const std::string name : {"gpt2-124m", "llama3-8b", "resnet101", "bloom-176b"}) {
    const ModelDescription model = load_model(name);
    const nlohmann::json document = model_to_json(model);
    EXPECT_EQ(document.at("params").get<std::int64_t>(), model.params());
    EXPECT_EQ(document.at("largest_layer_params").get<std::int64_t>(), model.largest_layer_params());
    const ModelDescription again = model_from_json(document, "roundtrip.json");
    ASSERT_EQ(again.layers.size(), model.layers.size()) << name;
    for (std::size_t i = 0; i < model.layers.size(); ++i) {
      EXPECT_EQ(again.layers[i].name, model.layers[i].name);
      EXPECT_EQ(again.layers[i].params, model.layers[i].params);
      EXPECT_EQ(again.layers[i].largest_module_params, model.layers[i].largest_module_params);
      EXPECT_EQ(again.layers[i].module_count, model.layers[i].module_count);
      EXPECT_EQ(again.layers[i].module_calls, model.layers[i].module_calls);
      EXPECT_EQ(again.layers[i].small_module_params, model.layers[i].small_module_params);
      EXPECT_EQ(again.layers[i].activation_elements_per_sample, model.layers[i].activation_elements_per_sample);
    }
  }
}

TEST(ModelJson, StatedTotalMustAgree) {
  nlohmann::json document = model_to_json(load_model("gpt2-124m"));
  document["params"] = 124'000'000;
  expect_input_error([&] { model_from_json(document, "edited.json"); },
                     {"edited.json", "'params'", "124000000", "124439808"});
}

TEST(LoadModel, UnknownNameListsBundledModels) {
  expect_input_error([] { load_model("gpt5-10t"); }, {"--model", "gpt5-10t", "gpt2-124m", "llama3-70b", "resnet101"});
}

TEST(LoadModel, HuggingFaceConfigByPath) {
  const ModelDescription model = load_model(kData + "/hf/gpt2.json");
  EXPECT_EQ(model.params(), 124'439'808);
  EXPECT_NE(model.reference.find("Hugging Face"), std::string::npos);
}

// Bad model descriptions: one test each; the message names the file and the field.
TEST(BadModel, MalformedJson) {
  expect_input_error([] { load_model(kData + "/malformed.json"); }, {"malformed.json", "line 4, column 19"});
}

TEST(BadModel, MissingField) {
  expect_input_error([] { load_model(kData + "/model_missing_heads.json"); },
                     {"model_missing_heads.json", "transformer.heads", "missing"});
}

TEST(BadModel, NegativeField) {
  expect_input_error([] { load_model(kData + "/model_negative_hidden.json"); },
                     {"model_negative_hidden.json", "transformer.hidden", "-768"});
}

TEST(BadModel, NonIntegerField) {
  expect_input_error([] { load_model(kData + "/model_fractional_layers.json"); },
                     {"model_fractional_layers.json", "transformer.layers", "12.5"});
}

TEST(BadModel, ZeroHeads) {
  expect_input_error([] { load_model(kData + "/model_zero_heads.json"); },
                     {"model_zero_heads.json", "transformer.heads", "got 0"});
}

TEST(BadModel, HiddenNotDivisibleByHeads) {
  expect_input_error([] { load_model(kData + "/model_hidden_not_divisible.json"); },
                     {"model_hidden_not_divisible.json", "transformer.hidden", "770", "not divisible", "12"});
}

TEST(BadModel, ParameterCountOverflow) {
  expect_input_error([] { load_model(kData + "/model_overflow_params.json"); },
                     {"model_overflow_params.json", "transformer.hidden", "overflows"});
}

TEST(BadModel, AbsurdNumberOverflowsInt64) {
  expect_input_error([] { load_model(kData + "/model_absurd_vocab.json"); },
                     {"model_absurd_vocab.json", "transformer.vocab_size", "overflows a 64-bit integer"});
}

TEST(BadModel, UnknownKeyIsNotIgnored) {
  // "kv_head" (a typo of kv_heads) would otherwise silently mean multi-head attention.
  expect_input_error([] { load_model(kData + "/model_unknown_key.json"); },
                     {"model_unknown_key.json", "transformer.kv_head", "unknown key"});
}

TEST(BadModel, AbsurdLayerCountIsRefusedBeforeExpanding) {
  const auto document = nlohmann::json::parse(
      R"({"name": "deep", "transformer": {"family": "gpt2", "vocab_size": 10, "hidden": 8, "layers": 1000000000,
          "heads": 2, "max_seq": 16}})");
  expect_input_error([&] { model_from_json(document, "deep.json"); }, {"deep.json", "transformer.layers", "absurd"});
}

TEST(BadModel, KeyValueHeadsMustDivideHeads) {
  const auto document = nlohmann::json::parse(
      R"({"name": "gqa", "transformer": {"family": "llama", "vocab_size": 10, "hidden": 64, "layers": 2,
          "heads": 8, "kv_heads": 3, "ffn_hidden": 128, "max_seq": 16}})");
  expect_input_error([&] { model_from_json(document, "gqa.json"); }, {"gqa.json", "transformer.kv_heads"});
}

TEST(BadModel, GenericLayerLargerModuleThanLayer) {
  const auto document = nlohmann::json::parse(
      R"({"name": "g", "input_elements_per_sample": 4,
          "layers": [{"name": "a", "params": 10, "activation_elements_per_sample": 4, "largest_module_params": 11}]})");
  expect_input_error([&] { model_from_json(document, "g.json"); }, {"g.json", "layers[0].largest_module_params"});
}

TEST(BadModel, NeitherShapeNorLayers) {
  const auto document = nlohmann::json::parse(R"({"name": "empty"})");
  expect_input_error([&] { model_from_json(document, "e.json"); }, {"e.json", "transformer", "layers"});
}

}  // namespace
}  // namespace zeroplan
