// The planner's verdicts and searches.
#include <gtest/gtest.h>

#include "core/input_error.h"

#include "sim/planner.h"
#include "sim/simulator.h"
#include "tests/sim/sim_test_fixtures.h"

namespace zeroplan {
namespace {

using testing::gpt2_shape;
using testing::gpt2_xl;
using testing::params_only_model;
using testing::test_cluster;

TrainingConfig training_b(std::int64_t micro_batch) {
  TrainingConfig t;
  t.engine = TrainingEngine::ideal;  // the searches' figures below are the textbook model's
  t.precision = Precision::bf16;
  t.seq_len = 1024;
  t.micro_batch = micro_batch;
  return t;
}

TEST(PlanChoices, EnumeratesEveryStageAndValidOffloadPair) {
  const auto all = enumerate_plan_choices();
  EXPECT_EQ(all.size(), 1u + 2u + 2u + 9u);  // NVMe optimizer offload is stage 3 only (ZeRO-Infinity)
  for (const PlanChoice& c : all) {
    if (c.stage < 3) EXPECT_EQ(c.offload_param, OffloadDevice::none);
    if (c.stage < 3) EXPECT_NE(c.offload_optimizer, OffloadDevice::nvme) << c.label();
  }
  PlanChoiceFilter filter;
  filter.stage = 3;
  filter.offload_param_set = true;
  filter.offload_param = OffloadDevice::nvme;
  const auto narrowed = enumerate_plan_choices(filter);
  ASSERT_EQ(narrowed.size(), 3u);
  EXPECT_EQ(narrowed[0].label(), "stage 3 + param:nvme");
  EXPECT_EQ(narrowed[1].label(), "stage 3 + opt:cpu + param:nvme");
  EXPECT_EQ(PlanChoice{2}.label(), "stage 2");
}

// DeepSpeed accepts offload_param without offload_optimizer (issue 9): the parameter partition leaves the GPU,
// the fp32 master and the optimizer states stay, and the updated partition goes back over PCIe every step.
TEST(PlanChoices, ParameterOffloadWithTheOptimizerOnTheGpu) {
  const ModelDescription model = gpt2_xl();
  const ClusterDescription cluster = load_cluster("h200x4");
  const TrainingConfig training = training_b(1);
  PlannerOptions options;
  options.search_max_micro_batch = false;
  const PlanResult plain = evaluate_plan(model, cluster, training, {3}, options);
  const PlanResult offloaded = evaluate_plan(model, cluster, training, {3, OffloadDevice::none, OffloadDevice::cpu}, options);
  EXPECT_EQ(offloaded.memory.gpu.params, 0);
  EXPECT_GT(plain.memory.gpu.params, 0);
  EXPECT_EQ(offloaded.memory.gpu.optimizer_states, plain.memory.gpu.optimizer_states);
  EXPECT_EQ(offloaded.memory.gpu.master_params, plain.memory.gpu.master_params);
  EXPECT_GT(offloaded.memory.host.total, plain.memory.host.total);
  EXPECT_GT(offloaded.comm.pcie_device_to_host_bytes, 0);
  EXPECT_GT(offloaded.comm.pcie_host_to_device_bytes, 0);
  EXPECT_EQ(plain.comm.pcie_device_to_host_bytes, 0);

  const StepSimulation step = simulate_step(model, cluster, training, {3, OffloadDevice::none, OffloadDevice::nvme});
  EXPECT_GT(step.step_seconds, simulate_step(model, cluster, training, {3}).step_seconds);
}

TEST(PlanChoices, ApplyChoiceSetsStageAndOffloads) {
  const TrainingConfig applied = apply_choice(TrainingConfig{}, {3, OffloadDevice::cpu, OffloadDevice::nvme});
  EXPECT_EQ(applied.zero.stage, 3);
  EXPECT_EQ(applied.zero.offload_optimizer, OffloadDevice::cpu);
  EXPECT_EQ(applied.zero.offload_param, OffloadDevice::nvme);
}

TEST(EvaluatePlan, VerdictAndHeadroomFollowTheCapacity) {
  const ModelDescription model = gpt2_xl();
  ClusterDescription cluster = test_cluster(4, 1);
  PlannerOptions options;
  options.compare_deepspeed = true;
  options.gpu_memory_margin = 0.0;  // the capacity itself (the margin has its own tests)
  const PlanResult r = evaluate_plan(model, cluster, training_b(8), {3, OffloadDevice::none, OffloadDevice::none},
                                     options);
  EXPECT_TRUE(r.fits);
  EXPECT_EQ(r.gpu_headroom_bytes, cluster.gpu_memory_bytes - r.memory.gpu.total);
  EXPECT_EQ(r.training.zero.stage, 3);
  ASSERT_TRUE(r.deepspeed);
  EXPECT_EQ(r.deepspeed->stage, 3);
  EXPECT_GE(r.max_micro_batch, 8);
  // Shrink the GPU below the estimate: it no longer fits and the headroom is negative.
  cluster.gpu_memory_bytes = r.memory.gpu.total - 1;
  const PlanResult tight = evaluate_plan(model, cluster, training_b(8), r.choice, options);
  EXPECT_FALSE(tight.fits);
  EXPECT_FALSE(tight.gpu_fits);
  EXPECT_EQ(tight.gpu_headroom_bytes, -1);
  EXPECT_EQ(tight.max_micro_batch, 7);
}

TEST(EvaluatePlan, HostAndNvmeCapacityCount) {
  const ModelDescription model = params_only_model(10'000'000'000);
  ClusterDescription cluster = test_cluster(4, 1);
  cluster.host_memory_bytes = 100 * kGiB;  // 16 B/param of 10B/4 per rank x 4 ranks = 160 GB: too little
  const PlanResult r =
      evaluate_plan(model, cluster, training_b(1), {3, OffloadDevice::cpu, OffloadDevice::none}, PlannerOptions{});
  EXPECT_FALSE(r.host_fits);
  EXPECT_FALSE(r.fits);
  EXPECT_EQ(r.max_micro_batch, 0);
  cluster.nvme_capacity_bytes = 1 * kGiB;
  const PlanResult n =
      evaluate_plan(model, cluster, training_b(1), {3, OffloadDevice::nvme, OffloadDevice::nvme}, PlannerOptions{});
  EXPECT_FALSE(n.nvme_fits);
}

TEST(MaxMicroBatch, BisectionAgreesWithALinearScan) {
  const ModelDescription model = gpt2_xl();
  ClusterDescription cluster = test_cluster(4, 1);
  cluster.gpu_memory_bytes = 40 * kGiB;
  for (const PlanChoice& choice : enumerate_plan_choices()) {
    const TrainingConfig training = apply_choice(training_b(1), choice);
    std::int64_t linear = 0;
    for (std::int64_t b = 1; b <= 256; ++b) {
      TrainingConfig t = training;
      t.micro_batch = b;
      if (!gpu_memory_fits(estimate_memory(model, cluster, t, choice), cluster, 0.0)) break;
      linear = b;
    }
    EXPECT_EQ(largest_fitting_micro_batch(model, cluster, training, choice, 256, 0.0), linear) << choice.label();
  }
}

TEST(MaxMicroBatch, RespectsTheLimit) {
  const ModelDescription model = testing::gpt2_small();
  const ClusterDescription cluster = test_cluster(4, 1);
  const PlanChoice choice{2};
  EXPECT_EQ(largest_fitting_micro_batch(model, cluster, training_b(1), choice, 3, 0.0), 3);
  EXPECT_EQ(largest_fitting_micro_batch(model, cluster, training_b(1), choice, 0, 0.0), 0);
}

TEST(FewestGpus, Stage3OfA30BModelNeedsSeveralGpusAndStage0NeverFits) {
  const std::int64_t P = 30'000'000'000;
  const ModelDescription model = testing::layered_model(P, 60);
  const ClusterDescription cluster = test_cluster(8, 4);
  const TrainingConfig training = training_b(1);
  // Stage 3, no activations: 20P/N (16-bit params and grads 4, fp32 grad partition 4, master 4, Adam 8)
  // + reduce bucket 2 x 5e8 + one 5e8-param layer and the 5e7 prefetch bucket gathered in 16-bit = 600e9/N +
  // 2.1e9 bytes <= 143771 MiB = 150.75e9 bytes -> N >= 4.03: 5 GPUs.
  const auto gpus = fewest_gpus_that_fit(model, cluster, training, {3}, 32, 0.0);
  ASSERT_TRUE(gpus);
  EXPECT_EQ(*gpus, 5);
  for (int g = 1; g < *gpus; ++g)
    EXPECT_FALSE(gpu_memory_fits(estimate_memory(model, with_gpu_count(cluster, g), apply_choice(training, {3}), {3}),
                                 with_gpu_count(cluster, g), 0.0));
  EXPECT_FALSE(fewest_gpus_that_fit(model, cluster, training, {0}, 32, 0.0));
}

TEST(LargestModel, LargerGpusFitLargerModelsAndTheAnswerFitsWhileOneMoreLayerDoesNot) {
  const ModelDescription base = expand_transformer("gpt2-family", gpt2_shape(1600, 48, 25), "test");
  const ClusterDescription cluster = test_cluster(4, 1);
  const TrainingConfig training = training_b(1);
  const PlanChoice stage3{3};
  const auto largest = largest_fitting_model(base, cluster, training, stage3, 0.0);
  ASSERT_TRUE(largest);
  EXPECT_TRUE(gpu_memory_fits(estimate_memory(*largest, cluster, apply_choice(training, stage3), stage3), cluster, 0.0));
  EXPECT_GT(largest->params(), base.params());
  // Stage 0 keeps 16 B/param on every GPU: a smaller model is the largest that fits.
  const auto largest0 = largest_fitting_model(base, cluster, training, PlanChoice{0}, 0.0);
  ASSERT_TRUE(largest0);
  EXPECT_LT(largest0->params(), largest->params());
  // One more layer than a layer-scaled answer does not fit.
  if (largest0->transformer->hidden == 1600) {
    TransformerShape more = *largest0->transformer;
    more.layers += 1;
    const ModelDescription bigger = expand_transformer("more", more, "test");
    EXPECT_FALSE(gpu_memory_fits(estimate_memory(bigger, cluster, apply_choice(training, PlanChoice{0}), PlanChoice{0}),
                                 cluster, 0.0));
  }
}

TEST(LargestModel, LayerListTemplateIsAnInputError) {
  EXPECT_THROW(largest_fitting_model(params_only_model(1000), test_cluster(1, 1), training_b(1), PlanChoice{0}, 0.0),
               InputError);
}

}  // namespace
}  // namespace zeroplan
