// Stage 3's sub-groups and reduce-bucket fills as the DeepSpeed allocator replay cuts them
// (sim/deepspeed_allocator_replay.h), against the sizes DeepSpeed 0.19.8 allocated for them in Llama-2 7B's two-rank
// allocator history (bench/deepspeed/results-pending/memtrace-2026-11-30-l7-x2/hf_l7_s3.memtrace.json.gz, read with
// bench/deepspeed/memtrace_best_fit.py's loader): events 710-727, stage3.py _create_fp32_partitions' fp32 temporaries
// and masters, 4 bytes an element; events 6295, 6923, 7490 and 8175, the first four reduce-scatter torch.cat copies of
// a bf16 backward (coalesced_collectives.py reduce_scatter_coalesced), 2 bytes an element.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/data_paths.h"
#include "core/plan_inputs.h"
#include "sim/deepspeed_allocator_replay.h"
#include "sim/memory_inputs.h"

namespace zeroplan {
namespace {

ResolvedPlanInputs llama2_7b_two_ranks_stage3() {
  PlanInputs inputs;
  inputs.model = (data_directory() / "bench" / "llama" / "configs" / "llama2-7b.json").string();
  inputs.cluster = "h200x2";
  inputs.gpus = 2;
  inputs.micro_batch = 4;
  inputs.seq = 2048;
  inputs.precision = Precision::bf16;
  inputs.stage = 3;
  return resolve_plan_inputs(inputs);
}

// transformers registers a decoder layer's two RMSNorm weights after its projections (LlamaDecoderLayer: self_attn,
// mlp, input_layernorm, post_attention_layernorm); the replay walks them before (sim/parameter_tensors.h), so a
// sub-group that closes inside a block may hold one block's norms more or fewer: 4,096 elements at two ranks.
constexpr std::int64_t kOneBlocksNorms = 2 * 4096 / 2;

TEST(DeepSpeedStage3SubGroups, Llama2SevenBOnTwoRanksAsItsAllocatorHistory) {
  const ResolvedPlanInputs in = llama2_7b_two_ranks_stage3();
  const MemoryInputs memory = gather_memory_inputs(in.model, in.cluster, in.training, {3});
  const std::vector<std::int64_t> groups = deepspeed_stage3_sub_groups(in.model, in.training, memory);
  // The allocations' bytes / 4: 4,005,707,776, 4,014,112,768 (twice) and 1,442,897,920.
  const std::vector<std::int64_t> traced = {1'001'426'944, 1'003'528'192, 1'003'528'192, 360'724'480};
  ASSERT_EQ(groups.size(), traced.size());
  std::int64_t sum = 0;
  for (std::size_t i = 0; i < traced.size(); ++i) {
    EXPECT_LE(std::abs(groups[i] - traced[i]), kOneBlocksNorms) << "sub-group " << i << ": " << groups[i];
    sum += groups[i];
  }
  EXPECT_EQ(sum, memory.partition_params) << "the sub-groups cut the whole partition";
}

TEST(DeepSpeedStage3SubGroups, OneSubGroupWhereThePartitionFits) {
  ResolvedPlanInputs in = llama2_7b_two_ranks_stage3();
  in.training.zero.sub_group_size = 4'000'000'000;
  const MemoryInputs memory = gather_memory_inputs(in.model, in.cluster, in.training, {3});
  EXPECT_EQ(deepspeed_stage3_sub_groups(in.model, in.training, memory),
            std::vector<std::int64_t>{memory.partition_params});
}

TEST(DeepSpeedStage3ReduceBucketFills, Llama2SevenBsFirstReductionsAsItsAllocatorHistory) {
  const ResolvedPlanInputs in = llama2_7b_two_ranks_stage3();
  const std::vector<std::int64_t> fills = deepspeed_stage3_reduce_bucket_fills(in.model, in.training);
  ASSERT_GE(fills.size(), 4u);
  // 971,014,144, 910,204,928, 989,888,512 and 966,828,032 bytes of bf16. The first holds the LM head, the last block,
  // and the MLP, a norm and o_proj of the one before: a gradient joins the bucket unless it would take it past
  // reduce_bucket_size. Each fill may differ from the trace's by the norms the replay orders differently.
  const std::vector<std::int64_t> traced = {485'507'072, 455'102'464, 494'944'256, 483'414'016};
  for (std::size_t i = 0; i < traced.size(); ++i)
    EXPECT_LE(std::abs(fills[i] - traced[i]), 2 * kOneBlocksNorms) << "reduction " << i << ": " << fills[i];
  std::int64_t sum = 0;
  for (std::int64_t n : fills) {
    EXPECT_LE(n, in.training.zero.reduce_bucket_size);
    sum += n;
  }
  EXPECT_EQ(sum, in.model.params()) << "every gradient is reduced once a backward";
}

}  // namespace
}  // namespace zeroplan
