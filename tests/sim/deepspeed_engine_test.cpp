// The paths DeepSpeed 0.19.8's engine takes (sim/deepspeed_engine.h), case by case as engine.py
// _do_optimizer_sanity_check / _configure_optimizer and stage_1_and_2.py average_tensor decide them, and the
// overlap_comm default each plan gets.
#include <gtest/gtest.h>

#include "core/input_error.h"
#include "sim/deepspeed_engine.h"
#include "sim/plan_choice.h"

namespace zeroplan {
namespace {

DeepSpeedEnginePath path_for(Precision precision, int stage, std::optional<Precision> accumulation = std::nullopt,
                             AdamImplementation adam = AdamImplementation::deepspeed_fused,
                             OffloadDevice offload = OffloadDevice::none) {
  TrainingConfig training;
  training.precision = precision;
  training.grad_accum_dtype = accumulation;
  training.adam_implementation = adam;
  return deepspeed_engine_path(apply_choice(training, PlanChoice{stage, offload, OffloadDevice::none}));
}

TEST(DeepSpeedEngine, OptimizerWrappersAsEnginePyChoosesThem) {
  // bf16 without ZeRO: DDP_BFLOAT16 -> _configure_fp16_optimizer: FP16_Optimizer only around FusedAdam.
  EXPECT_EQ(path_for(Precision::bf16, 0).wrapper, DeepSpeedOptimizerWrapper::fp16_fused);
  EXPECT_EQ(path_for(Precision::bf16, 0, std::nullopt, AdamImplementation::torch_foreach).wrapper,
            DeepSpeedOptimizerWrapper::fp16_unfused);
  EXPECT_EQ(path_for(Precision::fp16, 0, std::nullopt, AdamImplementation::torch_fused).wrapper,
            DeepSpeedOptimizerWrapper::fp16_unfused);
  EXPECT_EQ(path_for(Precision::fp32, 0).wrapper, DeepSpeedOptimizerWrapper::plain);
  // bf16 at stage 1 with fp32 accumulation and no offload: BFLOAT16 -> BF16_Optimizer; with offload, ZeRO.
  EXPECT_EQ(path_for(Precision::bf16, 1, Precision::fp32).wrapper, DeepSpeedOptimizerWrapper::bf16_optimizer);
  EXPECT_EQ(path_for(Precision::bf16, 1, Precision::fp32, AdamImplementation::deepspeed_fused, OffloadDevice::cpu)
                .wrapper,
            DeepSpeedOptimizerWrapper::zero_1_2);
  EXPECT_EQ(path_for(Precision::bf16, 2, Precision::fp32).wrapper, DeepSpeedOptimizerWrapper::zero_1_2);
  EXPECT_EQ(path_for(Precision::bf16, 3).wrapper, DeepSpeedOptimizerWrapper::zero_3);
  // Without ZeRO another accumulation dtype is refused (NotImplementedError in DeepSpeed).
  EXPECT_THROW(path_for(Precision::bf16, 0, Precision::fp32), InputError);
  TrainingConfig training;
  training.grad_accum_dtype = Precision::fp32;
  std::string why;
  EXPECT_FALSE(deepspeed_runs(training, PlanChoice{0}, &why));
  EXPECT_NE(why.find("NotImplementedError"), std::string::npos);
  EXPECT_TRUE(deepspeed_runs(training, PlanChoice{2}));
}

TEST(DeepSpeedEngine, GradientReductionsAsDeepSpeedRunsThem) {
  // Stage 0 and BF16_Optimizer: engine.py allreduce_gradients after backward, buckets of MEMORY_OPT_ALLREDUCE_SIZE.
  const DeepSpeedEnginePath stage0 = path_for(Precision::bf16, 0);
  EXPECT_EQ(stage0.gradient_collective, CollectiveKind::all_reduce);
  EXPECT_TRUE(stage0.reduces_after_backward);
  EXPECT_EQ(stage0.reduction_bucket_elements, 500'000'000);
  // Stages 1-2: all-reduce of whole buckets by default (use_multi_rank_bucket_allreduce); stage 1 without
  // overlap_comm reduces after backward, stage 2 in the backward hooks.
  EXPECT_EQ(path_for(Precision::bf16, 1).gradient_collective, CollectiveKind::all_reduce);
  EXPECT_TRUE(path_for(Precision::bf16, 1).reduces_after_backward);
  EXPECT_FALSE(path_for(Precision::bf16, 2).reduces_after_backward);
  TrainingConfig per_rank;
  per_rank.zero.use_multi_rank_bucket_allreduce = false;
  EXPECT_EQ(deepspeed_engine_path(apply_choice(per_rank, PlanChoice{2})).gradient_collective,
            CollectiveKind::reduce_scatter);
  // Stage 3: reduce_scatter_coalesced.
  EXPECT_EQ(path_for(Precision::bf16, 3).gradient_collective, CollectiveKind::reduce_scatter);
  // communication_data_type and grad_accum_dtype change the bytes, not the model's.
  TrainingConfig fp32_comm;
  fp32_comm.communication_dtype = Precision::fp32;
  const DeepSpeedEnginePath comm = deepspeed_engine_path(apply_choice(fp32_comm, PlanChoice{2}));
  EXPECT_EQ(comm.communication_bytes, 4);
  EXPECT_EQ(comm.model_bytes, 2);
}

TEST(DeepSpeedEngine, OverlapCommNotGivenIsTheStagesDefault) {
  TrainingConfig training;  // nobody gave overlap_comm
  EXPECT_TRUE(apply_choice(training, PlanChoice{3}).zero.overlap_comm);
  EXPECT_FALSE(apply_choice(training, PlanChoice{2}).zero.overlap_comm);
  training.zero.overlap_comm = false;
  training.zero.overlap_comm_given = true;
  EXPECT_FALSE(apply_choice(training, PlanChoice{3}).zero.overlap_comm);
  // zeroplan's executor keeps what its caller set.
  TrainingConfig executor;
  executor.engine = TrainingEngine::zeroplan;
  executor.zero.overlap_comm = true;
  EXPECT_TRUE(apply_choice(executor, PlanChoice{2}).zero.overlap_comm);
}

}  // namespace
}  // namespace zeroplan
