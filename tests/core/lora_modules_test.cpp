// LoRA flags resolved against a model (core/lora_modules.h): PEFT's module names and defaults, and the one-line
// errors naming the flag for what PEFT or the planner cannot take.
#include <gtest/gtest.h>

#include "core/lora_modules.h"
#include "core/model_description.h"
#include "input_error_expectations.h"

namespace zeroplan {
namespace {

TrainingConfig resolved(const ModelDescription& model, LoraInputs inputs) {
  TrainingConfig training;
  resolve_lora(inputs, model, training);
  return training;
}

// peft/utils/constants.py TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING: llama/mistral/qwen2 -> q_proj,v_proj;
// gpt2 -> c_attn; bloom -> query_key_value. PEFT LoraConfig defaults r=8, lora_alpha=8.
TEST(LoraModules, PeftDefaultsPerModelType) {
  LoraInputs rank_only;
  rank_only.rank = 8;
  const TrainingConfig llama = resolved(load_model("llama2-7b"), rank_only);
  EXPECT_TRUE(llama.lora.enabled);
  EXPECT_EQ(llama.lora.targets, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_EQ(llama.lora.alpha, 8.0);
  EXPECT_EQ(resolved(load_model("mistral-7b"), rank_only).lora.targets, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_EQ(resolved(load_model("gpt2-124m"), rank_only).lora.targets, (std::vector<std::string>{"c_attn"}));
  EXPECT_EQ(resolved(load_model("bloom-176b"), rank_only).lora.targets,
            (std::vector<std::string>{"query_key_value"}));
  LoraInputs alpha_only;
  alpha_only.alpha = 16;
  EXPECT_EQ(resolved(load_model("llama2-7b"), alpha_only).lora.rank, 8);
}

TEST(LoraModules, TargetsMatchAsPeftDoes) {
  const ModelDescription llama = load_model("llama2-7b");
  EXPECT_EQ(adapted_modules(llama, {"all-linear"}).size(), 7u);
  EXPECT_EQ(adapted_modules(llama, {"self_attn.q_proj"}).size(), 1u);
  EXPECT_EQ(adapted_modules(load_model("gpt2-124m"), {"c_proj"}).size(), 2u);  // attn.c_proj and mlp.c_proj
}

TEST(LoraModules, NoLoraFlagsLeavesLoraOff) {
  const TrainingConfig training = resolved(load_model("llama2-7b"), LoraInputs{});
  EXPECT_FALSE(training.lora.enabled);
}

TEST(LoraModules, BadInputsNameTheFlag) {
  const ModelDescription llama = load_model("llama2-7b");
  LoraInputs zero_rank;
  zero_rank.rank = 0;
  expect_input_error([&] { resolved(llama, zero_rank); }, {"--lora-rank", "at least 1"});
  LoraInputs huge_rank;
  huge_rank.rank = 5000;
  expect_input_error([&] { resolved(llama, huge_rank); }, {"--lora-rank", "full rank 4096"});
  LoraInputs bad_alpha;
  bad_alpha.alpha = -1;
  expect_input_error([&] { resolved(llama, bad_alpha); }, {"--lora-alpha", "positive"});
  LoraInputs unknown;
  unknown.targets = "q_proj,c_attn";
  expect_input_error([&] { resolved(llama, unknown); }, {"--lora-targets", "c_attn", "llama", "q_proj, k_proj"});
  LoraInputs empty;
  empty.targets = " , ";
  expect_input_error([&] { resolved(llama, empty); }, {"--lora-targets", "empty"});
  LoraInputs quantize_alone;
  quantize_alone.quantize_base = "nf4";
  expect_input_error([&] { resolved(llama, quantize_alone); }, {"--quantize-base", "needs LoRA"});
  LoraInputs bad_quantize;
  bad_quantize.rank = 8;
  bad_quantize.quantize_base = "fp4";
  expect_input_error([&] { resolved(llama, bad_quantize); }, {"--quantize-base", "nf4, int8 or none"});
  LoraInputs on_resnet;
  on_resnet.rank = 8;
  expect_input_error([&] { resolved(load_model("resnet101"), on_resnet); }, {"--lora-rank", "layer list"});
}

}  // namespace
}  // namespace zeroplan
