// sim/plan_timing recommended_plan and sim/plan_json timed_plan_to_json: the one recommendation and the one JSON
// schema the CLI and the GUI share (issue 9), and the one-GPU communication volume.
#include <gtest/gtest.h>

#include "core/cluster_description.h"
#include "core/model_description.h"
#include "sim/comm_model.h"
#include "sim/compute_time.h"
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

namespace zeroplan {
namespace {

// zeroplan's executor runs cuDNN's fused attention where its trainer is offered it (16-bit, T a multiple of 128, not
// --deterministic) and its own kernels elsewhere; the planner times each at its own rate (the cluster's
// executor_attention and executor_kernel_attention), by the trainer's own test. Other engines never see either.
TEST(ExecutorAttention, TimedAtTheRateOfTheKernelsTheTrainerRuns) {
  const ModelDescription model = testing::gpt2_small();
  ClusterDescription cluster = load_cluster("h200x1");
  cluster.executor_attention_forward_flops = 400e12;  // the fused path, four times the kernels' rate
  cluster.executor_attention_backward_flops = 320e12;
  cluster.executor_kernel_attention_forward_flops = 100e12;
  cluster.executor_kernel_attention_backward_flops = 80e12;
  TrainingConfig training;
  training.engine = TrainingEngine::zeroplan;
  training.precision = Precision::bf16;
  training.micro_batch = 4;
  training.seq_len = 1024;
  const auto block = [&](const TrainingConfig& t) { return layer_compute_times(model, cluster, t).at(1); };
  const LayerCompute fused = block(training);
  TrainingConfig deterministic = training;
  deterministic.deterministic = true;
  TrainingConfig odd = training;
  odd.seq_len = 1000;  // not a multiple of 128: the kernels, over fewer tokens
  EXPECT_GT(block(deterministic).forward_seconds, fused.forward_seconds);
  EXPECT_GT(block(deterministic).backward_input_seconds + block(deterministic).backward_weight_seconds,
            fused.backward_input_seconds + fused.backward_weight_seconds);
  EXPECT_GT(block(odd).forward_seconds, fused.forward_seconds) << "fewer tokens, yet slower: the kernels' rate";
  // Without the kernels' rates in the cluster, every run is timed at the executor's one rate.
  ClusterDescription one_rate = cluster;
  one_rate.executor_kernel_attention_forward_flops = one_rate.executor_kernel_attention_backward_flops = 0.0;
  EXPECT_DOUBLE_EQ(layer_compute_times(model, one_rate, deterministic).at(1).forward_seconds, fused.forward_seconds);
  // DeepSpeed's runs are PyTorch's attention: the same whatever the executor's rates.
  TrainingConfig deepspeed = training;
  deepspeed.engine = TrainingEngine::deepspeed;
  EXPECT_DOUBLE_EQ(layer_compute_times(model, cluster, deepspeed).at(1).forward_seconds,
                   layer_compute_times(model, one_rate, deepspeed).at(1).forward_seconds);
}

}  // namespace
}  // namespace zeroplan
