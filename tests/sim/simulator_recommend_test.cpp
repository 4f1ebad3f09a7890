// The recommender: every plan it returns fits and keeps the global batch, the list is ranked by tokens/s, each
// plan says why it beats the next, and bad search inputs are rejected.
#include <gtest/gtest.h>

#include "core/cluster_description.h"
#include "core/input_error.h"
#include "core/model_description.h"
#include "sim/recommender.h"

namespace zeroplan {
namespace {

TEST(SimulatorRecommend, RankedPlansFitAndKeepTheGlobalBatch) {
  const ModelDescription model = load_model("gpt2-774m");
  const ClusterDescription cluster = load_cluster("h200x4");
  TrainingConfig training;
  training.seq_len = 1024;
  RecommendOptions options;
  options.global_batch = 32;
  options.top = 6;
  const RecommendResult result = recommend_plans(model, cluster, training, options);
  ASSERT_EQ(result.plans.size(), 6u);
  EXPECT_GE(result.fitting, 6);
  EXPECT_GE(result.candidates, result.simulated);
  for (std::size_t i = 0; i < result.plans.size(); ++i) {
    const Recommendation& r = result.plans[i];
    EXPECT_EQ(r.training.micro_batch * r.training.grad_accum * r.gpus, 32);
    EXPECT_LE(r.simulation.peak_gpu_bytes, cluster.gpu_memory_bytes);
    if (i + 1 < result.plans.size()) {
      EXPECT_GE(r.simulation.tokens_per_second, result.plans[i + 1].simulation.tokens_per_second);
      EXPECT_FALSE(r.why.empty());
    } else {
      EXPECT_TRUE(r.why.empty());
    }
  }
}

TEST(SimulatorRecommend, MoreGpusWinForTheSameGlobalBatchWhenComputeDominates) {
  const ModelDescription model = load_model("gpt2-124m");
  const ClusterDescription cluster = load_cluster("h200x4");
  TrainingConfig training;
  training.seq_len = 1024;
  RecommendOptions options;
  options.global_batch = 64;
  options.top = 1;
  const RecommendResult result = recommend_plans(model, cluster, training, options);
  ASSERT_EQ(result.plans.size(), 1u);
  EXPECT_EQ(result.plans.front().gpus, 4);
}

TEST(SimulatorRecommend, DefaultGpuCountsArePowersOfTwoThenWholeNodes) {
  ClusterDescription cluster = load_cluster("h200x4");
  EXPECT_EQ(default_gpu_counts(cluster), (std::vector<int>{1, 2, 4}));
  cluster.gpus_per_node = 8;
  cluster.nodes = 16;
  EXPECT_EQ(default_gpu_counts(cluster), (std::vector<int>{1, 2, 4, 8, 16, 32, 64, 128}));
}

TEST(SimulatorRecommend, RejectsBadSearches) {
  const ModelDescription model = load_model("gpt2-124m");
  const ClusterDescription cluster = load_cluster("h200x4");
  RecommendOptions options;
  options.global_batch = 0;
  EXPECT_THROW(recommend_plans(model, cluster, TrainingConfig{}, options), InputError);
  options.global_batch = 8;
  options.gpu_counts = {8};
  EXPECT_THROW(recommend_plans(model, cluster, TrainingConfig{}, options), InputError);
  options.gpu_counts = {};
  options.top = 0;
  EXPECT_THROW(recommend_plans(model, cluster, TrainingConfig{}, options), InputError);
}

}  // namespace
}  // namespace zeroplan
