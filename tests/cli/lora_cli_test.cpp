// LoRA and QLoRA plans from the command line: every plan prints PEFT's trainable-parameter line, --explain shows
// the LoRA terms, recommend --finetune ranks LoRA/QLoRA beside full fine-tuning, bad LoRA inputs end in one line
// naming the flag with exit status 2.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

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

// Under zeroplan's own engine recommend ranks only what its executor runs: LoRA without offload, NF4 below stage 3.
TEST(LoraCli, RecommendFinetuneUnderZeroplanKeepsToWhatTheExecutorRuns) {
  const CommandResult result = run("recommend --model llama2-7b --gpus 1 --only-given-gpus --seq 1024 "
                                   "--global-batch 4 --checkpointing full --finetune --engine zeroplan --top 200 "
                                   "--format json");
  ASSERT_EQ(result.status, 0) << result.output << result.errors;
  const nlohmann::json document = nlohmann::json::parse(result.output);
  int adapters = 0;
  for (const auto& plan : document["plans"]) {
    const std::string method = plan["method"].get<std::string>();
    if (method == "full") continue;
    ++adapters;
    EXPECT_EQ(plan["offload_optimizer"].get<std::string>(), "none") << method << " stage " << plan["stage"];
    EXPECT_EQ(plan["offload_param"].get<std::string>(), "none") << method << " stage " << plan["stage"];
    if (method == "qlora-nf4") EXPECT_NE(plan["stage"].get<int>(), 3);
  }
  EXPECT_GT(adapters, 0) << result.output;
}

TEST(LoraCli, BadLoraInputsAreOneLineExitTwo) {
  expect_one_line_error(run("plan --model llama2-7b --lora-rank 0"), {"--lora-rank", "at least 1"});
  expect_one_line_error(run("plan --model llama2-7b --lora-rank -4"), {"--lora-rank"});
  expect_one_line_error(run("plan --model llama2-7b --lora-targets q_proj,c_attn"), {"--lora-targets", "c_attn"});
  expect_one_line_error(run("plan --model llama2-7b --quantize-base nf4"), {"--quantize-base", "needs LoRA"});
  expect_one_line_error(run("plan --model llama2-7b --lora-rank 8 --quantize-base fp4"), {"--quantize-base"});
  expect_one_line_error(run("plan --model llama2-7b --lora-alpha 0"), {"--lora-alpha"});
  expect_one_line_error(run("plan --model resnet101 --lora-rank 8"), {"--lora-rank", "layer list"});
  expect_one_line_error(run("plan --model llama2-7b --lora-rank 8 --engine ideal"), {"--lora-rank", "DeepSpeed"});
  // zeroplan's engine plans what its executor runs: no int8 base, no offload with LoRA.
  expect_one_line_error(run("plan --model llama2-7b --lora-rank 8 --engine zeroplan --quantize-base int8"),
                        {"--quantize-base", "int8"});
  expect_one_line_error(run("plan --model llama2-7b --lora-rank 8 --engine zeroplan --offload-optimizer cpu"),
                        {"--offload-optimizer"});
  expect_one_line_error(run("plan --model llama2-7b --lora-rank 8 --engine zeroplan --stage 3 --offload-param cpu"),
                        {"--offload-param"});
}

// A LoRA plan of zeroplan's own engine: PEFT's line as DeepSpeed's plan prints it (the golden line is the same
// whatever the engine), only plans without offload, and --explain names every allocation of both engines and
// LoRA's own buffers under its component.
TEST(LoraCli, ZeroplanEnginePlanNamesTheComponents) {
  const CommandResult result = run("plan --model llama2-7b --engine zeroplan --lora-rank 8 --micro-batch 2 --seq 2048 "
                                   "--stage 2 --explain");
  ASSERT_LE(result.status, 1) << result.errors;
  EXPECT_NE(result.output.find("trainable params: 4,194,304 || all params: 6,742,609,920 || trainable%: 0.0622"),
            std::string::npos)
      << result.output;
  EXPECT_EQ(result.output.find("opt:cpu"), std::string::npos) << result.output;
  for (const char* name : {"frozen base: parameters", "adapters: gradient partition", "adapters: fp32 master weights",
                           "adapters: AdamW momentum", "adapters: AdamW variance", "adapters: gradient bucket buffer",
                           "LoRA x A^T", "LoRA d(x A^T) of one block weight", "block inputs (residual stream)",
                           "logits / dlogits (in place)"})
    EXPECT_NE(result.output.find(name), std::string::npos) << name << "\n" << result.output;
  const CommandResult qlora = run("plan --model llama2-7b --engine zeroplan --lora-rank 8 --quantize-base nf4 "
                                  "--micro-batch 2 --seq 2048 --stage 2 --explain");
  ASSERT_LE(qlora.status, 1) << qlora.errors;
  for (const char* name : {"frozen base (unquantised tensors): parameters", "frozen base: NF4 codes and constants",
                           "frozen base: dequantised scratch weight"})
    EXPECT_NE(qlora.output.find(name), std::string::npos) << name << "\n" << qlora.output;
}

// LoRA runs on the CPU backend against `zeroplan plan --engine zeroplan` of the same inputs: the bytes per collective
// kind the two engines issued (counted where issued, on every rank) equal the plan's, at stages 0-3 on 1 and 2 MPI
// ranks, with and without an NF4 base (nf4 runs at stages 0-2), with gradient accumulation. The engines' components
// the CPU backend allocates as the CUDA one does (fp32: the same element bytes) equal the plan's too; gradients at
// stages 0-1 (the CPU kernels accumulate, so it keeps micro-step gradients the CUDA engine does not), buckets
// (sized by the run's overlap_comm) and activations (the CPU trainer's own fp32 buffers) are left out.
// The run's MFU counts a LoRA step's FLOPs as the simulator does (no weight gradients for the frozen base: 4N,
// not 6N): before, the run counted PaLM's full 6N and printed TinyLlama's LoRA step at 70% MFU on an H200.
TEST(LoraCli, RunCountsTheFlopsTheSimulatorCounts) {
  const std::string model = std::string(ZEROPLAN_SOURCE_DIR) + "/bench/llama/configs/tiny-ci.json";
  const std::string inputs = "--model " + model + " --micro-batch 2 --seq 32 --precision fp32 --lora-rank 4 "
                             "--lora-targets q_proj,v_proj --gpus 1 --stage 0";
  const std::filesystem::path report = fresh("lora_flops_report.json");
  const CommandResult r = run("run --backend cpu " + inputs + " --steps 1 --warmup-steps 0 --report " + report.string());
  ASSERT_EQ(r.status, 0) << r.output << r.errors;
  const CommandResult s = run("simulate --engine zeroplan " + inputs + " --format json");
  ASSERT_LE(s.status, 1) << s.errors;
  const nlohmann::json simulated = nlohmann::json::parse(s.output).at("plans").at(0);
  const nlohmann::json measured = nlohmann::json::parse(read_file(report)).at("measured");
  EXPECT_EQ(measured.at("model_flops_per_token"), simulated.at("model_flops_per_token"));
  EXPECT_EQ(measured.at("flop_convention"), simulated.at("flop_convention"));
  EXPECT_NE(measured.at("flop_convention").get<std::string>().find("4N"), std::string::npos);
  EXPECT_NE(r.output.find("4N + 6 N_adapters"), std::string::npos) << r.output;
}

TEST(LoraCli, CpuRunCommunicatesWhatTheZeroplanPlanSays) {
  const std::string model = std::string(ZEROPLAN_SOURCE_DIR) + "/bench/llama/configs/tiny-ci.json";
  for (const char* quantize : {"none", "nf4"})
    for (int ranks : {1, 2})
      for (int stage = 0; stage <= 3; ++stage) {
        if (std::string(quantize) == "nf4" && stage == 3) continue;  // refused by the run (codes not partitioned)
        SCOPED_TRACE(std::string(quantize) + ", " + std::to_string(ranks) + " ranks, stage " + std::to_string(stage));
        const std::string inputs = "--model " + model + " --micro-batch 2 --seq 32 --precision fp32 --grad-accum 2 "
                                   "--lora-rank 4 --lora-targets q_proj,v_proj,down_proj --quantize-base " +
                                   quantize + " --gpus " + std::to_string(ranks) + " --stage " + std::to_string(stage);
        const std::filesystem::path report = temp_dir() / "lora_plan_report.json";
        std::filesystem::remove(report);
        const CommandResult r =
            run("run --backend cpu " + inputs + " --steps 1 --warmup-steps 0 --report " + report.string());
        ASSERT_EQ(r.status, 0) << r.output << r.errors;
        const CommandResult p = run("plan --engine zeroplan " + inputs + " --format json");
        ASSERT_LE(p.status, 1) << p.errors;
        const nlohmann::json plan = nlohmann::json::parse(p.output).at("plans").at(0);
        const nlohmann::json measured = nlohmann::json::parse(read_file(report)).at("measured");
        std::int64_t issued = 0;
        for (const char* kind : {"all_reduce", "reduce_scatter", "all_gather"}) {
          const std::int64_t predicted = plan.at("comm_bytes_per_step").at(kind).get<std::int64_t>();
          EXPECT_EQ(predicted, measured.at("comm_bytes_per_step").at(kind).get<std::int64_t>()) << kind;
          for (const nlohmann::json& rank : measured.at("ranks"))
            EXPECT_EQ(predicted, rank.at("comm_bytes_per_step").at(kind).get<std::int64_t>())
                << kind << " of rank " << rank.at("rank");
          issued += predicted;
        }
        EXPECT_EQ(issued > 0, ranks > 1);
        std::vector<const char*> components = {"params", "master_params", "optimizer_states", "gathered_params"};
        if (stage >= 2) components.push_back("grads");
        for (const char* component : components)
          EXPECT_EQ(plan.at("gpu_bytes").value(component, std::int64_t{0}),
                    measured.at("gpu_bytes").value(component, std::int64_t{0}))
              << component;
        std::filesystem::remove(report);
      }
}

}  // namespace
}  // namespace zeroplan_test
