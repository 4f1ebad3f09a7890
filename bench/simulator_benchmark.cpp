// Speed of the step-time simulator (issue 3's targets): full-timeline simulations per second of GPT-2 1.5B on the
// bundled 4x H200 cluster (target: over 10,000 per second on one core), and the time of one GPT-3 175B step on
// 1024 GPUs over 128 nodes (target: milliseconds). Run: build/bench/simulator_benchmark
#include <benchmark/benchmark.h>

#include "core/cluster_description.h"
#include "core/model_description.h"
#include "core/training_config.h"
#include "sim/recommender.h"
#include "sim/simulator.h"

namespace zeroplan {
namespace {

// GPT-2 1.5B, micro-batch 8, sequence 1024, bf16, one plan per benchmark argument (stage 0..3).
void BM_SimulateGpt2_1_5B_4Gpus(benchmark::State& state) {
  const ModelDescription model = load_model("gpt2-1.5b");
  const ClusterDescription cluster = load_cluster("h200x4");
  TrainingConfig training;
  training.micro_batch = 8;
  training.seq_len = 1024;
  training.zero.overlap_comm = true;
  PlanChoice choice;
  choice.stage = static_cast<int>(state.range(0));
  for (auto _ : state) {
    StepSimulation simulation = simulate_step(model, cluster, training, choice);
    benchmark::DoNotOptimize(simulation.step_seconds);
  }
  state.SetItemsProcessed(state.iterations());  // items/s = simulations per second
  state.SetLabel("stage " + std::to_string(choice.stage));
}
BENCHMARK(BM_SimulateGpt2_1_5B_4Gpus)->DenseRange(0, 3);

// GPT-3 175B, stage 3, micro-batch 1, sequence 2048, full checkpointing, on 1024 A100s (128 nodes of 8).
void BM_SimulateGpt3_175B_1024Gpus(benchmark::State& state) {
  const ModelDescription model = load_model("gpt3-175b");
  const ClusterDescription cluster = with_gpu_count(load_cluster("a100x8-multinode"), 1024);
  TrainingConfig training;
  training.micro_batch = 1;
  training.seq_len = 2048;
  training.grad_accum = static_cast<std::int64_t>(state.range(0));
  training.checkpointing = Checkpointing::full;
  PlanChoice choice;
  choice.stage = 3;
  for (auto _ : state) {
    StepSimulation simulation = simulate_step(model, cluster, training, choice);
    benchmark::DoNotOptimize(simulation.step_seconds);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel("grad-accum " + std::to_string(training.grad_accum));
}
BENCHMARK(BM_SimulateGpt3_175B_1024Gpus)->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond);

// A whole `zeroplan recommend` search for GPT-2 1.5B, global batch 32, on up to 4 GPUs.
void BM_RecommendGpt2_1_5B(benchmark::State& state) {
  const ModelDescription model = load_model("gpt2-1.5b");
  const ClusterDescription cluster = load_cluster("h200x4");
  TrainingConfig training;
  training.seq_len = 1024;
  RecommendOptions options;
  options.global_batch = 32;
  for (auto _ : state) {
    RecommendResult result = recommend_plans(model, cluster, training, options);
    benchmark::DoNotOptimize(result.plans.data());
  }
}
BENCHMARK(BM_RecommendGpt2_1_5B)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace zeroplan

BENCHMARK_MAIN();
