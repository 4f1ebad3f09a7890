// How fast the planner evaluates configurations (target: over 1,000,000 memory-only evaluations per second
// on one core). Run a Release build: build/bench/planner_benchmark. items_per_second = configurations
// evaluated per second.
#include <benchmark/benchmark.h>

#include <vector>

#include "core/model_description.h"
#include "sim/memory_model.h"
#include "sim/planner.h"
#include "sim/recommender.h"

namespace zeroplan {
namespace {

TransformerShape gpt2(std::int64_t hidden, std::int64_t layers, std::int64_t heads) {
  TransformerShape s;
  s.family = ModelFamily::gpt2;
  s.vocab_size = 50257;
  s.hidden = hidden;
  s.layers = layers;
  s.heads = heads;
  s.kv_heads = heads;
  s.ffn_hidden = 4 * hidden;
  s.max_seq = 2048;
  return s;
}

TransformerShape llama(std::int64_t hidden, std::int64_t layers, std::int64_t heads, std::int64_t kv_heads,
                       std::int64_t ffn, std::int64_t vocab) {
  TransformerShape s;
  s.family = ModelFamily::llama;
  s.vocab_size = vocab;
  s.hidden = hidden;
  s.layers = layers;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.ffn_hidden = ffn;
  s.max_seq = 8192;
  s.norm = NormKind::rms_norm;
  s.activation = ActivationKind::swiglu;
  s.attention_bias = s.mlp_bias = s.tied_embeddings = s.learned_positions = false;
  return s;
}

ClusterDescription h200_node(int gpus) {
  ClusterDescription c;
  c.name = "h200";
  c.gpu_memory_bytes = 143771LL * kMiB;
  c.gpus_per_node = gpus;
  c.nodes = 1;
  c.host_memory_bytes = 512 * kGiB;
  c.nvme_capacity_bytes = 8'000'000'000'000;
  c.runtime = {500 * kMiB, 32 * kMiB, 1 * kGiB, 0.05};
  return c;
}

std::vector<ModelDescription> models() {
  return {expand_transformer("gpt2-xl", gpt2(1600, 48, 25), "bench"),
          expand_transformer("llama-2-7b", llama(4096, 32, 32, 32, 11008, 32000), "bench"),
          expand_transformer("llama-3-70b", llama(8192, 80, 64, 8, 28672, 128256), "bench"),
          expand_transformer("gpt-3-175b", gpt2(12288, 96, 96), "bench")};
}

struct Configuration {
  const ModelDescription* model;
  TrainingConfig training;
  PlanChoice choice;
};

// Every model x every plan choice x micro-batch 1..8 x three checkpointing modes x two precisions.
std::vector<Configuration> configurations(const std::vector<ModelDescription>& all) {
  std::vector<Configuration> out;
  for (const ModelDescription& model : all)
    for (const PlanChoice& choice : enumerate_plan_choices())
      for (std::int64_t b = 1; b <= 8; ++b)
        for (Checkpointing c : {Checkpointing::none, Checkpointing::selective, Checkpointing::full})
          for (Precision p : {Precision::bf16, Precision::fp32}) {
            TrainingConfig t;
            t.micro_batch = b;
            t.seq_len = 2048;
            t.checkpointing = c;
            t.precision = p;
            out.push_back({&model, apply_choice(t, choice), choice});
          }
  return out;
}

void BM_EstimateMemory(benchmark::State& state) {
  const std::vector<ModelDescription> all = models();
  const std::vector<Configuration> configs = configurations(all);
  const ClusterDescription cluster = h200_node(4);
  std::size_t i = 0;
  for (auto _ : state) {
    const Configuration& c = configs[i];
    MemoryEstimate estimate = estimate_memory(*c.model, cluster, c.training, c.choice);
    benchmark::DoNotOptimize(estimate.gpu.total);
    if (++i == configs.size()) i = 0;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
  state.counters["configurations"] = static_cast<double>(configs.size());
}
BENCHMARK(BM_EstimateMemory);

// The 96-block GPT-3 alone: the per-layer cost must not grow with the depth.
void BM_EstimateMemoryGpt3(benchmark::State& state) {
  const ModelDescription model = expand_transformer("gpt-3-175b", gpt2(12288, 96, 96), "bench");
  const ClusterDescription cluster = h200_node(4);
  TrainingConfig training;
  training.seq_len = 2048;
  const PlanChoice choice{3, OffloadDevice::cpu, OffloadDevice::cpu};
  training = apply_choice(training, choice);
  std::int64_t b = 1;
  for (auto _ : state) {
    training.micro_batch = b;
    MemoryEstimate estimate = estimate_memory(model, cluster, training, choice);
    benchmark::DoNotOptimize(estimate.gpu.total);
    b = b == 16 ? 1 : b + 1;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_EstimateMemoryGpt3);

// A full plan: memory, communication, verdict and the largest-micro-batch search, for every choice in turn.
void BM_EvaluatePlanWithMaxMicroBatch(benchmark::State& state) {
  const std::vector<ModelDescription> all = models();
  const ClusterDescription cluster = h200_node(4);
  const std::vector<PlanChoice> choices = enumerate_plan_choices();
  TrainingConfig training;
  training.seq_len = 2048;
  PlannerOptions options;
  options.micro_batch_search_limit = 4096;
  std::size_t i = 0;
  for (auto _ : state) {
    const ModelDescription& model = all[i % all.size()];
    const PlanChoice& choice = choices[(i / all.size()) % choices.size()];
    PlanResult result = evaluate_plan(model, cluster, training, choice, options);
    benchmark::DoNotOptimize(result.max_micro_batch);
    ++i;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_EvaluatePlanWithMaxMicroBatch);

// `zeroplan recommend --model gpt3-175b --cluster a100x8-multinode --gpus 1024 --seq 2048` (issue 13): the
// whole search the command runs, global batch 1024 over 1, 2, 4, ... 1024 GPUs, every stage and offload, three
// checkpointing modes. Goal: under 0.3 s on one core, so the GUI can re-rank while the user types.
void BM_RecommendGpt3_175B_1024Gpus(benchmark::State& state) {
  const ModelDescription model = load_model("gpt3-175b");
  const ClusterDescription cluster = with_gpu_count(load_cluster("a100x8-multinode"), 1024);
  TrainingConfig training;
  training.seq_len = 2048;
  RecommendOptions options;
  options.global_batch = 1024;
  std::int64_t simulated = 0;
  for (auto _ : state) {
    RecommendResult result = recommend_plans(model, cluster, training, options);
    simulated = result.simulated;
    benchmark::DoNotOptimize(result.plans.data());
  }
  state.counters["simulated"] = static_cast<double>(simulated);
}
BENCHMARK(BM_RecommendGpt3_175B_1024Gpus)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace zeroplan

BENCHMARK_MAIN();
