// core/plan_inputs and core/number_checks: the inputs every front end shares, resolved once (issue 9): the given
// values before the DeepSpeed config's "auto" (so its notes describe the run planned), a stage without offloads
// meaning no offload, bounds on every size, non-finite numbers refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/data_paths.h"
#include "core/number_checks.h"
#include "core/plan_inputs.h"
#include "tests/core/input_error_expectations.h"

namespace zeroplan {
namespace {

const std::string kData = ZEROPLAN_TEST_DATA_DIR;

std::string config(const std::string& name) { return (data_directory() / "configs" / "deepspeed" / name).string(); }

TEST(NumberChecks, RefuseNonFiniteAndNegative) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  expect_input_error([&] { require_finite(nan, "command line", "--lr"); }, {"command line", "--lr", "finite", "nan"});
  expect_input_error([&] { require_positive(inf, "command line", "--lr"); }, {"--lr", "finite", "inf"});
  expect_input_error([&] { require_positive(-1e-3, "command line", "--lr"); }, {"--lr", "positive", "-0.001"});
  expect_input_error([&] { require_positive(0.0, "f.json", "pcie_bandwidth"); }, {"f.json", "pcie_bandwidth", "> 0"});
  expect_input_error([&] { require_non_negative(-inf, "f.json", "weight_decay"); }, {"weight_decay", "finite"});
  expect_input_error([&] { require_non_negative(-0.5, "f.json", "weight_decay"); }, {"weight_decay", ">= 0"});
  EXPECT_EQ(require_positive(3e-4, "command line", "--lr"), 3e-4);
  EXPECT_EQ(require_non_negative(0.0, "command line", "--weight-decay"), 0.0);
  expect_input_error([&] { require_positive(std::int64_t{0}, "command line", "--steps"); }, {"--steps", ">= 1", "0"});
  expect_input_error([&] { require_count_at_most(11, 10, "command line", "--n", "ten at most"); },
                     {"--n", "at most 10", "ten at most"});
  EXPECT_EQ(require_count_at_most(10, 10, "command line", "--n", ""), 10);
  expect_input_error([&] { require_tokens_per_micro_step(kMaxMicroBatch, kMaxSeqLen, "command line", "--b * --s"); },
                     {"--b * --s", "absurd"});
}

TEST(PlanInputs, AbsurdSizesAreRefusedBeforeAnythingIsRead) {
  PlanInputs in;
  in.model = "gpt2-124m";
  in.grad_accum = std::numeric_limits<std::int64_t>::max();
  expect_input_error([&] { resolve_plan_inputs(in); }, {"command line", "--grad-accum", "absurd size", "at most 10,000"});
  in.grad_accum.reset();
  in.micro_batch = std::int64_t{1} << 40;
  expect_input_error([&] { resolve_plan_inputs(in); }, {"--micro-batch", "at most"});
  in.micro_batch = kMaxMicroBatch;
  in.model = "llama2-7b";  // no learned positions: only the bound stops a long sequence
  in.seq = kMaxSeqLen;
  expect_input_error([&] { resolve_plan_inputs(in); }, {"--micro-batch * --seq", "absurd"});
  in = PlanInputs{};
  in.model = "gpt2-124m";
  in.gpus = 1 << 30;
  expect_input_error([&] { resolve_plan_inputs(in); }, {"--gpus", "at most"});
  // A DeepSpeed config's sizes are bounded too, and named by their field.
  in.gpus.reset();
  in.ds_config = kData + "/ds_absurd_accumulation.json";
  expect_input_error([&] { resolve_plan_inputs(in); }, {"ds_absurd_accumulation.json", "gradient_accumulation_steps",
                                                        "at most 10,000"});
}

TEST(PlanInputs, NotesDescribeTheResolvedRun) {
  PlanInputs in;
  in.model = "gpt2-124m";
  ResolvedPlanInputs defaults = resolve_plan_inputs(in);
  EXPECT_EQ(defaults.training.seq_len, 1024);
  EXPECT_TRUE(any_contains(defaults.training.notes, "sequence length 1024 (the model's maximum"));

  in.seq = 64;
  const ResolvedPlanInputs given = resolve_plan_inputs(in);
  EXPECT_EQ(given.training.seq_len, 64);
  EXPECT_FALSE(any_contains(given.training.notes, "sequence length 1024")) << given.training.notes.front();

  // "auto" resolves to the given micro-batch, so the notes and the plan agree (issue 9: they said 1 and 4).
  PlanInputs hf;
  hf.model = "llama2-7b";
  hf.ds_config = config("zero3_hf_auto.json");
  hf.micro_batch = 2;
  const ResolvedPlanInputs resolved = resolve_plan_inputs(hf);
  EXPECT_EQ(resolved.training.micro_batch, 2);
  EXPECT_TRUE(any_contains(resolved.training.notes, "train_micro_batch_size_per_gpu auto -> 2"));
  EXPECT_TRUE(any_contains(resolved.training.notes, "train_batch_size auto -> 2 * 1 * 4 GPUs = 8"));
  EXPECT_FALSE(any_contains(resolved.training.notes, "train_micro_batch_size_per_gpu auto -> 1 "));
}

TEST(PlanInputs, GivenValuesReplacingTheConfigsAreNoted) {
  PlanInputs in;
  in.model = "gpt2-124m";
  in.ds_config = config("zero1_bf16.json");
  const ResolvedPlanInputs from_config = resolve_plan_inputs(in);
  in.micro_batch = from_config.training.micro_batch + 1;
  const ResolvedPlanInputs replaced = resolve_plan_inputs(in);
  EXPECT_EQ(replaced.training.micro_batch, *in.micro_batch);
  EXPECT_TRUE(any_contains(replaced.training.notes, "--micro-batch " + std::to_string(*in.micro_batch) +
                                                        " replaces micro-batch " +
                                                        std::to_string(from_config.training.micro_batch)));
}

TEST(PlanInputs, AStageWithoutOffloadsMeansNoOffload) {
  PlanInputs in;
  in.model = "gpt2-124m";
  in.stage = 3;
  const PlanChoiceFilter filter = resolve_plan_inputs(in).filter;
  EXPECT_EQ(filter.stage, 3);
  EXPECT_TRUE(filter.offload_optimizer_set);
  EXPECT_EQ(filter.offload_optimizer, OffloadDevice::none);
  EXPECT_TRUE(filter.offload_param_set);
  EXPECT_EQ(filter.offload_param, OffloadDevice::none);

  in.stage = kAllStages;
  EXPECT_EQ(resolve_plan_inputs(in).filter.stage, -1);
  EXPECT_FALSE(resolve_plan_inputs(in).filter.offload_optimizer_set);

  // A DeepSpeed config's offloads stay where the stage given allows them, and are dropped (with a note) elsewhere.
  in.ds_config = config("zero3_hf_auto.json");  // optimizer and parameters on the CPU
  in.stage = 3;
  const ResolvedPlanInputs kept = resolve_plan_inputs(in);
  EXPECT_EQ(kept.filter.offload_optimizer, OffloadDevice::cpu);
  EXPECT_EQ(kept.filter.offload_param, OffloadDevice::cpu);
  in.stage = 2;
  const ResolvedPlanInputs dropped = resolve_plan_inputs(in);
  EXPECT_EQ(dropped.filter.offload_optimizer, OffloadDevice::cpu);
  EXPECT_EQ(dropped.filter.offload_param, OffloadDevice::none);
  EXPECT_TRUE(any_contains(dropped.training.notes, "offload_param cpu from"));

  PlanInputs contradiction;
  contradiction.model = "gpt2-124m";
  contradiction.stage = 1;
  contradiction.offload_optimizer = OffloadDevice::nvme;
  expect_input_error([&] { resolve_plan_inputs(contradiction); }, {"--offload-optimizer", "stage 3"});
}

TEST(PlanInputs, ParameterOffloadAloneFromADeepSpeedConfig) {
  PlanInputs in;
  in.model = "gpt2-124m";
  in.ds_config = kData + "/ds_offload_param_nvme_only.json";
  const PlanChoiceFilter filter = resolve_plan_inputs(in).filter;
  EXPECT_EQ(filter.stage, 3);
  EXPECT_EQ(filter.offload_optimizer, OffloadDevice::none);
  EXPECT_EQ(filter.offload_param, OffloadDevice::nvme);
}

TEST(PlanInputs, ALayerListHasNoSequenceAndGuiNamesItsInputs) {
  PlanInputs in;
  in.model = "resnet101";
  const ResolvedPlanInputs resolved = resolve_plan_inputs(in);
  EXPECT_FALSE(any_contains(resolved.training.notes, "sequence"));
  in.seq = 128;
  expect_input_error([&] { resolve_plan_inputs(in); }, {"--seq", "layer list", "no sequence length"});

  PlanInputNames gui;
  gui.source = "GUI input";
  gui.micro_batch = "micro-batch";
  PlanInputs zero;
  zero.model = "gpt2-124m";
  zero.micro_batch = 0;
  expect_input_error([&] { resolve_plan_inputs(zero, gui); }, {"GUI input", "micro-batch", ">= 1"});
}

// The training host's speed: set for DeepSpeed's engine from a cluster that names the host its costs were
// measured on; refused with the input's own name where out of range or nothing scales from it; a note, not a
// silent no-op, where the engine has no DeepSpeed host costs.
TEST(PlanInputs, HostSpeedNeedsAMeasuredHostAndDeepSpeedsEngine) {
  PlanInputs in;
  in.model = "gpt2-124m";
  in.cluster = "h200x2";
  in.host_op_seconds = 1.4e-5;
  const ResolvedPlanInputs resolved = resolve_plan_inputs(in);
  EXPECT_DOUBLE_EQ(resolved.training.host_eager_op_seconds, 1.4e-5);
  // h200x2's two GPUs: the host its costs hold on at more than one rank; on one GPU, the one-rank host.
  EXPECT_TRUE(any_contains(resolved.training.notes,
                           "x 2.03 (--host-op-seconds against the cluster's host.multi_rank_eager_op_seconds)"));
  in.gpus = 1;
  EXPECT_TRUE(any_contains(resolve_plan_inputs(in).training.notes,
                           "x 1.61 (--host-op-seconds against the cluster's host.eager_op_seconds)"));
  in.gpus.reset();

  PlanInputNames gui;
  gui.source = "GUI input";
  gui.host_op_seconds = "host speed";
  for (double bad : {0.0, -7e-6, 7.0, 1e-9}) {
    in.host_op_seconds = bad;
    expect_input_error([&] { resolve_plan_inputs(in, gui); }, {"GUI input", "host speed", "between 1e-7 and 1e-3"});
  }
  in.host_op_seconds = 7e-6;
  in.cluster = "h100x8";  // no measured host (h200x4 carries h200x2's since its calibration)
  expect_input_error([&] { resolve_plan_inputs(in); },
                     {"--host-op-seconds", "h100x8", "host.multi_rank_eager_op_seconds"});

  in.cluster = "h200x2";
  in.engine = TrainingEngine::zeroplan;
  const ResolvedPlanInputs ours = resolve_plan_inputs(in);
  EXPECT_EQ(ours.training.host_eager_op_seconds, 0.0);
  EXPECT_TRUE(any_contains(ours.training.notes, "--host-op-seconds ignored"));
}

TEST(TrainingConfig, UseEngineZeroplanImpliesItsExecutor) {
  TrainingConfig training;
  training.fused_attention = false;
  use_engine(training, TrainingEngine::zeroplan);
  EXPECT_EQ(training.engine, TrainingEngine::zeroplan);
  EXPECT_TRUE(training.fused_attention);
  EXPECT_TRUE(training.fused_cross_entropy);
  EXPECT_FALSE(training.fp32_loss);
  EXPECT_TRUE(any_contains(training.notes, "engine zeroplan"));
  TrainingConfig deepspeed;
  use_engine(deepspeed, TrainingEngine::deepspeed);
  EXPECT_TRUE(deepspeed.fp32_loss);
  EXPECT_TRUE(deepspeed.notes.empty());
  expect_input_error([] { parse_engine("megatron", "command line", "--engine"); }, {"--engine", "deepspeed, zeroplan"});
}

}  // namespace
}  // namespace zeroplan
