// The margin the GPU verdict keeps above a predicted peak (sim/memory_margin.h, issue 13): a plan within the
// memory model's own error of the capacity is not recommended, the margin moves the verdict exactly at its edge,
// and a bad margin is refused.
#include <gtest/gtest.h>

#include <algorithm>

#include <limits>

#include "core/cluster_description.h"
#include "core/input_error.h"
#include "core/model_description.h"
#include "sim/memory_margin.h"
#include "sim/planner.h"
#include "sim/recommender.h"
#include "sim/simulator.h"

namespace zeroplan {
namespace {

// Issue 13: `zeroplan recommend --model llama2-13b --micro-batch 2 --seq 4096` on 4x H200 put first a stage-1
// plan at 139.60 of 139.80 GiB. With the default margin no recommended plan's peak plus margin exceeds the GPU,
// and that plan is among none of them.
TEST(MemoryMargin, RecommendKeepsTheMarginAboveEveryPlansPeak) {
  const ModelDescription model = load_model("llama2-13b");
  const ClusterDescription cluster = load_cluster("h200x4");
  TrainingConfig training;
  training.seq_len = 4096;
  RecommendOptions options;
  options.global_batch = 2 * cluster.total_gpus();
  const RecommendResult result = recommend_plans(model, cluster, training, options);
  const MemoryMargin margin = default_memory_margin(TrainingEngine::deepspeed);
  EXPECT_EQ(result.margin.fraction, margin.fraction);
  ASSERT_FALSE(result.plans.empty());
  for (const Recommendation& r : result.plans) {
    const double demand = static_cast<double>(timeline_gpu_demand(r.simulation));
    EXPECT_LE(demand * (1.0 + margin.fraction), static_cast<double>(cluster.gpu_memory_bytes)) << r.choice.label();
    EXPECT_GT(static_cast<double>(cluster.gpu_memory_bytes) - demand, 0.2 * kGiB) << r.choice.label();
  }
  // A GPU whose capacity lies inside the margin above the best plan's peak: without a margin that plan comes back,
  // with the default margin it does not (the margin is what removes it).
  RecommendOptions bare_options = options;
  bare_options.gpu_memory_margin = MemoryMargin{0.0, "test"};
  const Recommendation& best = result.plans.front();
  const Bytes peak = timeline_gpu_demand(best.simulation);
  ClusterDescription tight = cluster;
  tight.gpu_memory_bytes = peak + static_cast<Bytes>(static_cast<double>(peak) * margin.fraction / 2.0);
  const auto holds_best = [&](const RecommendResult& r) {
    return std::any_of(r.plans.begin(), r.plans.end(), [&](const Recommendation& p) {
      return p.choice == best.choice && p.training.micro_batch == best.training.micro_batch &&
             p.training.grad_accum == best.training.grad_accum && p.training.checkpointing == best.training.checkpointing;
    });
  };
  EXPECT_TRUE(holds_best(recommend_plans(model, tight, training, bare_options))) << best.choice.label();
  EXPECT_FALSE(holds_best(recommend_plans(model, tight, training, options))) << best.choice.label();
}

TEST(MemoryMargin, VerdictChangesExactlyAtPeakPlusMargin) {
  const ModelDescription model = load_model("gpt2-1.5b");
  ClusterDescription cluster = load_cluster("h200x4");
  TrainingConfig training;
  training.seq_len = 1024;
  training.micro_batch = 8;
  PlannerOptions options;
  options.search_max_micro_batch = false;
  options.gpu_memory_margin = 0.10;
  const PlanChoice choice{2};
  const PlanResult plan = evaluate_plan(model, cluster, training, choice, options);
  const Bytes peak = plan.memory.gpu.total;
  EXPECT_EQ(plan.gpu_margin_bytes, margin_bytes(peak, 0.10));
  cluster.gpu_memory_bytes = peak + margin_bytes(peak, 0.10);
  EXPECT_TRUE(evaluate_plan(model, cluster, training, choice, options).gpu_fits);
  cluster.gpu_memory_bytes -= 1;
  const PlanResult tight = evaluate_plan(model, cluster, training, choice, options);
  EXPECT_FALSE(tight.gpu_fits);
  EXPECT_GT(tight.gpu_headroom_bytes, 0);  // it would fit without the margin
  options.gpu_memory_margin = 0.0;
  EXPECT_TRUE(evaluate_plan(model, cluster, training, choice, options).gpu_fits);
}

TEST(MemoryMargin, DefaultsNameTheirSourceAndBadMarginsAreRefused) {
  for (TrainingEngine engine : {TrainingEngine::deepspeed, TrainingEngine::zeroplan}) {
    const MemoryMargin margin = default_memory_margin(engine);
    EXPECT_GE(margin.fraction, 0.0);
    EXPECT_LT(margin.fraction, 1.0);
    EXPECT_NE(margin.source.find("measure"), std::string::npos);
  }
  EXPECT_EQ(resolve_memory_margin(0.05, TrainingEngine::deepspeed).fraction, 0.05);
  for (double bad : {-0.01, 1.0, 2.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()})
    EXPECT_THROW(resolve_memory_margin(bad, TrainingEngine::deepspeed), InputError) << bad;
}

}  // namespace
}  // namespace zeroplan
