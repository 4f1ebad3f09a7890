// LoRA and QLoRA plans from the command line: every plan prints PEFT's trainable-parameter line, --explain shows
// the LoRA terms, recommend --finetune ranks LoRA/QLoRA beside full fine-tuning, bad LoRA inputs end in one line
// naming the flag with exit status 2.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_test_support.h"

namespace zeroplan_test {
namespace {

TEST(LoraCli, PlanPrintsPeftTrainableParameters) {
  const CommandResult result = run("plan --model llama2-7b --gpus 1 --stage 0 --seq 1024 --lora-rank 8");
  ASSERT_LE(result.status, 1) << result.errors;
  EXPECT_NE(result.output.find("trainable params: 4,194,304 || all params: 6,742,609,920 || trainable%: 0.0622"),
            std::string::npos)
      << result.output;
}

TEST(LoraCli, SimulateAndJsonCarryTheLoraFigures) {
  const CommandResult simulate =
      run("simulate --model llama2-7b --gpus 1 --stage 0 --seq 1024 --lora-rank 16 --lora-targets all-linear "
          "--quantize-base nf4 --optimizer paged_adamw_8bit");
  ASSERT_LE(simulate.status, 1) << simulate.errors;
  EXPECT_NE(simulate.output.find("trainable params: 39,976,960 || all params: 6,778,392,576 || trainable%: 0.5898"),
            std::string::npos)
      << simulate.output;
  const CommandResult json =
      run("plan --model gpt2-124m --gpus 1 --stage 0 --lora-targets c_attn --format json");
  ASSERT_LE(json.status, 1) << json.errors;
  const nlohmann::json document = nlohmann::json::parse(json.output);
  EXPECT_EQ(document["lora"]["trainable_params"], 294912);
  EXPECT_EQ(document["lora"]["print_trainable_parameters"],
            "trainable params: 294,912 || all params: 124,734,720 || trainable%: 0.2364");
}

TEST(LoraCli, ExplainShowsTheQuantisedBase) {
  const CommandResult result =
      run("plan --model llama2-7b --gpus 1 --stage 0 --seq 1024 --lora-rank 8 --quantize-base nf4 --explain");
  ASSERT_LE(result.status, 1) << result.errors;
  EXPECT_NE(result.output.find("NF4 codes"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("quantize_4bit"), std::string::npos);
  EXPECT_NE(result.output.find("x*A saved"), std::string::npos);
}

TEST(LoraCli, RecommendFinetuneRanksMethodsTogether) {
  const CommandResult result = run("recommend --model llama2-7b --gpus 1 --only-given-gpus --seq 1024 "
                                   "--global-batch 4 --checkpointing full --finetune --format json");
  ASSERT_EQ(result.status, 0) << result.output << result.errors;
  const nlohmann::json document = nlohmann::json::parse(result.output);
  std::set<std::string> methods;
  for (const auto& plan : document["plans"]) methods.insert(plan["method"].get<std::string>());
  // Full fine-tuning of 7B fits one 141 GB H200 only barely, if at all; LoRA and QLoRA do.
  EXPECT_TRUE(methods.count("lora")) << result.output;
  EXPECT_TRUE(methods.count("qlora-nf4")) << result.output;
}

TEST(LoraCli, BadLoraInputsAreOneLineExitTwo) {
  expect_one_line_error(run("plan --model llama2-7b --lora-rank 0"), {"--lora-rank", "at least 1"});
  expect_one_line_error(run("plan --model llama2-7b --lora-rank -4"), {"--lora-rank"});
  expect_one_line_error(run("plan --model llama2-7b --lora-targets q_proj,c_attn"), {"--lora-targets", "c_attn"});
  expect_one_line_error(run("plan --model llama2-7b --quantize-base nf4"), {"--quantize-base", "needs LoRA"});
  expect_one_line_error(run("plan --model llama2-7b --lora-rank 8 --quantize-base fp4"), {"--quantize-base"});
  expect_one_line_error(run("plan --model llama2-7b --lora-alpha 0"), {"--lora-alpha"});
  expect_one_line_error(run("plan --model resnet101 --lora-rank 8"), {"--lora-rank", "layer list"});
  expect_one_line_error(run("plan --model llama2-7b --lora-rank 8 --engine zeroplan"), {"--lora-rank", "DeepSpeed"});
}

}  // namespace
}  // namespace zeroplan_test
