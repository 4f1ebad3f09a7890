// sim/plan_timing recommended_plan and sim/plan_json timed_plan_to_json: the one recommendation and the one JSON
// schema the CLI and the GUI share (issue 9), and the one-GPU communication volume.
#include <gtest/gtest.h>

#include "core/model_description.h"
#include "sim/comm_model.h"
#include "sim/plan_json.h"
#include "sim/plan_timing.h"
#include "tests/sim/sim_test_fixtures.h"

namespace zeroplan {
namespace {

TimedPlan timed(bool fits, std::optional<double> rate) {
  TimedPlan plan;
  plan.plan.fits = fits;
  if (rate) {
    plan.simulation = StepSimulation{};
    plan.simulation->tokens_per_second = *rate;
  }
  return plan;
}

TEST(RecommendedPlan, FastestThatFitsWithTiesToTheEarlier) {
  EXPECT_EQ(recommended_plan({}), -1);
  EXPECT_EQ(recommended_plan({timed(false, 100.0), timed(false, 50.0)}), -1);
  EXPECT_EQ(recommended_plan({timed(false, 900.0), timed(true, 100.0), timed(true, 300.0)}), 2);
  EXPECT_EQ(recommended_plan({timed(true, 300.0), timed(true, 300.0)}), 0);
  // A plan the cluster cannot time is still a plan that fits, behind every timed one.
  EXPECT_EQ(recommended_plan({timed(true, std::nullopt), timed(false, 10.0)}), 0);
  EXPECT_EQ(recommended_plan({timed(true, std::nullopt), timed(true, 10.0)}), 1);
}

TEST(TimedPlanJson, ThroughputNamedByWhatTheModelCounts) {
  const ModelDescription resnet = load_model("resnet101");
  const ClusterDescription cluster = load_cluster("h200x4");
  TrainingConfig training;
  training.seq_len = 1;
  PlannerOptions options;
  options.search_max_micro_batch = false;
  const std::vector<TimedPlan> plans = evaluate_timed_plans(resnet, cluster, training, {PlanChoice{0}}, options);
  const nlohmann::json json = timed_plan_to_json(plans.at(0), resnet, cluster);
  EXPECT_TRUE(json.contains("samples_per_second"));
  EXPECT_FALSE(json.contains("tokens_per_second"));
  EXPECT_EQ(json.at("throughput_unit"), "samples");
  EXPECT_EQ(json.at("timeline_peak_gpu_bytes").get<Bytes>(), plans[0].simulation->peak_gpu_bytes);

  TimedPlan untimed = plans[0];
  untimed.simulation.reset();
  untimed.why_not_timed = "the cluster has no NVMe";
  const nlohmann::json null_json = timed_plan_to_json(untimed, resnet, cluster);
  EXPECT_TRUE(null_json.at("samples_per_second").is_null());
  EXPECT_NE(null_json.at("gpu_bytes_source").get<std::string>().find("the cluster has no NVMe"), std::string::npos);
}

TEST(CommVolume, OneGpuRunsNoCollective) {
  const ModelDescription model = testing::gpt2_small();
  const ClusterDescription one = with_gpu_count(load_cluster("h200x4"), 1);
  const ClusterDescription four = load_cluster("h200x4");
  TrainingConfig training;
  for (int stage : {0, 1, 2, 3}) {
    EXPECT_TRUE(estimate_comm(model, one, training, PlanChoice{stage}).collectives.empty()) << stage;
    EXPECT_EQ(estimate_comm(model, one, training, PlanChoice{stage}).total_wire_bytes, 0) << stage;
    EXPECT_FALSE(estimate_comm(model, four, training, PlanChoice{stage}).collectives.empty()) << stage;
  }
}

}  // namespace
}  // namespace zeroplan
