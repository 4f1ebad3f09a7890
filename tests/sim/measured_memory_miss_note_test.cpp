// The verdict's note on plans of a kind whose device used was measured above the plan by more than the margin
// (sim/measured_memory_miss_note.h): named for DeepSpeed's stage 3 of transformers' modules on several GPUs with
// nothing offloaded, and for nothing else.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/data_paths.h"
#include "core/plan_inputs.h"
#include "sim/measured_memory_miss_note.h"

namespace zeroplan {
namespace {

ResolvedPlanInputs tinyllama(TrainingEngine engine) {
  PlanInputs inputs;
  inputs.model = (data_directory() / "bench" / "llama" / "configs" / "tinyllama-1.1b.json").string();
  inputs.cluster = "h200x2";
  inputs.gpus = 2;
  inputs.micro_batch = 4;
  inputs.seq = 2048;
  inputs.precision = Precision::bf16;
  inputs.engine = engine;
  return resolve_plan_inputs(inputs);
}

const PlanChoice kStage3{3, OffloadDevice::none, OffloadDevice::none};
const PlanChoice kStage3OptimizerOnCpu{3, OffloadDevice::cpu, OffloadDevice::none};
const PlanChoice kStage3ParametersOnCpu{3, OffloadDevice::none, OffloadDevice::cpu};
const PlanChoice kStage2{2, OffloadDevice::none, OffloadDevice::none};

TEST(MeasuredMemoryMissNote, NamesStageThreeOnSeveralGpusAndTheMarginThatCoversIt) {
  const ResolvedPlanInputs in = tinyllama(TrainingEngine::deepspeed);
  const MemoryMargin margin = default_memory_margin(TrainingEngine::deepspeed);
  const std::vector<std::string> notes = measured_memory_miss_notes(
      in.model, in.training, {kStage2, kStage3, kStage3OptimizerOnCpu, kStage3ParametersOnCpu}, 2, margin, "--margin");
  ASSERT_EQ(notes.size(), 1u);
  const std::string& note = notes.front();
  EXPECT_NE(note.find("device used of stage 3 (stage 3 of transformers' modules on 2 GPUs"), std::string::npos) << note;
  EXPECT_NE(note.find("--margin 7 does"), std::string::npos) << note;
  // Only the kind measured: not the offloaded plans, not stage 2.
  EXPECT_EQ(note.find("opt:cpu"), std::string::npos) << note;
  EXPECT_EQ(note.find("param:cpu"), std::string::npos) << note;
  EXPECT_EQ(note.find("stage 2"), std::string::npos) << note;
}

TEST(MeasuredMemoryMissNote, NoneWhereNothingOfThatKindIsPlanned) {
  const ResolvedPlanInputs in = tinyllama(TrainingEngine::deepspeed);
  const MemoryMargin margin = default_memory_margin(TrainingEngine::deepspeed);
  EXPECT_TRUE(measured_memory_miss_notes(in.model, in.training, {kStage3}, 1, margin, "--margin").empty())
      << "one GPU: met within 5%";
  EXPECT_TRUE(measured_memory_miss_notes(in.model, in.training, {kStage2, kStage3OptimizerOnCpu}, 2, margin,
                                         "--margin").empty());
  EXPECT_TRUE(measured_memory_miss_notes(in.model, in.training, {kStage3}, 2, {0.07, "--margin"}, "--margin").empty())
      << "a margin that covers the misses";
  const ResolvedPlanInputs ours = tinyllama(TrainingEngine::zeroplan);
  EXPECT_TRUE(measured_memory_miss_notes(ours.model, ours.training, {kStage3}, 2,
                                         default_memory_margin(TrainingEngine::zeroplan), "--margin")
                  .empty())
      << "zeroplan's executor is planned within 0.4%";
  PlanInputs gpt2;
  gpt2.model = "gpt2-1.5b";
  gpt2.cluster = "h200x2";
  gpt2.gpus = 2;
  const ResolvedPlanInputs harness = resolve_plan_inputs(gpt2);
  EXPECT_TRUE(measured_memory_miss_notes(harness.model, harness.training, {kStage3}, 2, margin, "--margin").empty())
      << "the harness's GPT-2 at stage 3 on two H200 is met";
}

}  // namespace
}  // namespace zeroplan
