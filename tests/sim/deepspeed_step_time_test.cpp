// What the step-time model adds for DeepSpeed's engine and for layer-list models, checked against the facts it
// rests on: a layer list's kernels cannot run faster than their launches; DeepSpeed's stage-3 hooks run on the host
// before the module's work (a model of many small modules is bound by them); the CPU optimizer's rate follows its
// threads up to the node's share.
#include <gtest/gtest.h>

#include "core/cluster_description.h"
#include "core/input_error.h"
#include "core/model_description.h"
#include "sim/simulator.h"

namespace zeroplan {
namespace {

TrainingConfig resnet_training(TrainingEngine engine) {
  TrainingConfig training;
  training.engine = engine;
  training.micro_batch = 128;
  training.seq_len = 1;
  training.precision = Precision::fp16;
  return training;
}

std::int64_t modules(const ModelDescription& model) {
  std::int64_t count = 0;
  for (const LayerDescription& layer : model.layers) count += layer.module_count;
  return count;
}

// ResNet-101 on CIFAR-10 shapes: every module's kernels are launched, so a step takes at least its launches
// (forward one and a half, backward three per module, at the cluster's measured time per launch), whatever the
// FLOPs (issue 13: the planner used to say 1-2 ms for it).
TEST(LayerListCompute, SmallModulesAreBoundByTheirLaunches) {
  const ModelDescription model = load_model("resnet101");
  const ClusterDescription cluster = with_gpu_count(load_cluster("h200x2"), 1);
  const StepSimulation step = simulate_step(model, cluster, resnet_training(TrainingEngine::ideal), PlanChoice{0});
  const double launches = 4.5 * static_cast<double>(modules(model));
  EXPECT_GE(step.compute_seconds, launches * cluster.kernel_overhead_seconds);
  EXPECT_GT(step.step_seconds, 5e-3);
}

// DeepSpeed ZeRO-3: each module's fetch/release hooks run on the host before its kernels are issued, forward and
// backward; a model of hundreds of small modules waits on them.
TEST(DeepSpeedStepTime, Stage3HooksBindAModelOfSmallModules) {
  const ModelDescription model = load_model("resnet101");
  const ClusterDescription cluster = load_cluster("h200x2");
  ASSERT_GT(cluster.deepspeed_module_hook_seconds, 0.0);
  const StepSimulation deepspeed =
      simulate_step(model, cluster, resnet_training(TrainingEngine::deepspeed), PlanChoice{3});
  const StepSimulation ideal = simulate_step(model, cluster, resnet_training(TrainingEngine::ideal), PlanChoice{3});
  std::int64_t hooked = 0;
  for (const LayerDescription& layer : model.layers) hooked += layer.module_calls;
  EXPECT_GE(deepspeed.step_seconds, 2.0 * static_cast<double>(hooked) * cluster.deepspeed_module_hook_seconds);
  EXPECT_GT(deepspeed.busy_seconds[static_cast<int>(Resource::host_python)], 0.0);
  EXPECT_GT(deepspeed.step_seconds, 10.0 * ideal.step_seconds);
}

TEST(DeepSpeedStepTime, CpuOptimizerRateFollowsItsThreadsUpToTheNodesShare) {
  const ClusterDescription cluster = load_cluster("h200x2");
  ASSERT_GT(cluster.cpu_adam_params_per_second_per_thread, 0.0);
  TrainingConfig training;
  training.cpu_threads_per_rank = 1;
  EXPECT_DOUBLE_EQ(cpu_optimizer_rate(cluster, training, 2), cluster.cpu_adam_params_per_second_per_thread);
  training.cpu_threads_per_rank = 16;  // 16 x 5.2e8 is above the node's 6.2e9 shared by 2 ranks
  EXPECT_DOUBLE_EQ(cpu_optimizer_rate(cluster, training, 2), cluster.cpu_optimizer_params_per_second / 2);
  training.cpu_threads_per_rank = 0;  // default: the node's cores divided among its ranks
  EXPECT_DOUBLE_EQ(cpu_optimizer_rate(cluster, training, 2),
                   std::min(cluster.cpu_optimizer_params_per_second / 2,
                            (cluster.host_cores / 2) * cluster.cpu_adam_params_per_second_per_thread));
  // One thread per rank (torchrun's default) makes an offloaded step slower.
  const ModelDescription model = load_model("gpt2-1.5b");
  TrainingConfig offload;
  offload.micro_batch = 8;
  offload.seq_len = 1024;
  const PlanChoice choice{2, OffloadDevice::cpu, OffloadDevice::none};
  offload.cpu_threads_per_rank = 1;
  const double one = simulate_step(model, cluster, offload, choice).step_seconds;
  offload.cpu_threads_per_rank = 16;
  const double sixteen = simulate_step(model, cluster, offload, choice).step_seconds;
  EXPECT_GT(one, 2.0 * sixteen);
}

}  // namespace
}  // namespace zeroplan
