// The simulator leaves repeated micro-steps of a long gradient accumulation off the timeline
// (sim/zero_schedule.h SteadyMicroSteps) and the recommender skips plans whose bytes held all step exceed the GPU.
// Both are shortcuts of an exhaustive computation, so each is checked against it: a step built micro-step by
// micro-step (record_events builds every one), and a recommendation ranked from every candidate simulated whole.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/cluster_description.h"
#include "core/model_description.h"
#include "sim/planner.h"
#include "sim/recommender.h"
#include "sim/simulator.h"

namespace zeroplan {
namespace {

void expect_close(double shortcut, double whole, const std::string& what) {
  EXPECT_NEAR(shortcut, whole, 1e-9 * std::max(1.0, std::abs(whole))) << what;
}

void expect_same_step(const StepSimulation& shortcut, const StepSimulation& whole, const std::string& label) {
  expect_close(shortcut.step_seconds, whole.step_seconds, label + " step");
  expect_close(shortcut.compute_seconds, whole.compute_seconds, label + " compute");
  expect_close(shortcut.recompute_seconds, whole.recompute_seconds, label + " recompute");
  expect_close(shortcut.communication_seconds, whole.communication_seconds, label + " communication");
  expect_close(shortcut.exposed_comm_seconds, whole.exposed_comm_seconds, label + " exposed");
  expect_close(shortcut.offload_wait_seconds, whole.offload_wait_seconds, label + " offload wait");
  for (int r = 0; r < kResourceCount; ++r)
    expect_close(shortcut.busy_seconds[r], whole.busy_seconds[r], label + " busy " + to_string(static_cast<Resource>(r)));
  EXPECT_EQ(shortcut.peak_gpu_bytes, whole.peak_gpu_bytes) << label;
  expect_close(shortcut.peak_memory_at_seconds, whole.peak_memory_at_seconds, label + " peak time");
  ASSERT_EQ(shortcut.collectives.size(), whole.collectives.size()) << label;
  for (std::size_t i = 0; i < whole.collectives.size(); ++i) {
    EXPECT_EQ(shortcut.collectives[i].calls, whole.collectives[i].calls) << label;
    EXPECT_EQ(shortcut.collectives[i].bytes, whole.collectives[i].bytes) << label;
    expect_close(shortcut.collectives[i].seconds, whole.collectives[i].seconds, label + " collective seconds");
  }
}

// Long accumulations over every stage and offload, with and without overlap_comm, on one node and across nodes:
// the step with repeated micro-steps left off equals the step built whole.
TEST(SteadyAccumulation, StepWithRepeatsLeftOffEqualsTheWholeStep) {
  const ModelDescription gpt2 = load_model("gpt2-1.5b");
  const ModelDescription gpt3 = load_model("gpt3-175b");
  const ClusterDescription h200 = load_cluster("h200x4");
  const ClusterDescription a100 = with_gpu_count(load_cluster("a100x8-multinode"), 64);
  int compared = 0, shortened = 0;
  for (const auto& [model, cluster, seq, micro] :
       {std::tuple{&gpt2, &h200, 1024, 4}, std::tuple{&gpt3, &a100, 2048, 1}}) {
    for (const PlanChoice& choice : enumerate_plan_choices()) {
      if (!cluster_supports(*cluster, choice)) continue;
      for (bool overlap : {false, true}) {
        for (std::int64_t accumulation : {3, 7, 40}) {
          TrainingConfig training;
          training.seq_len = seq;
          training.micro_batch = micro;
          training.grad_accum = accumulation;
          training.checkpointing = Checkpointing::full;
          training.zero.overlap_comm = overlap;
          training.zero.overlap_comm_given = true;
          SimulationOptions whole;
          whole.record_events = true;  // every micro-step on the timeline
          const std::string label = model->name + " " + choice.label() + " overlap " + std::to_string(overlap) +
                                    " accumulation " + std::to_string(accumulation);
          const StepSimulation shortcut = simulate_step(*model, *cluster, training, choice);
          expect_same_step(shortcut, simulate_step(*model, *cluster, training, choice, whole), label);
          ++compared;
          if (shortcut.repeated_micro_steps > 0) ++shortened;
        }
      }
    }
  }
  EXPECT_GT(compared, 100);
  EXPECT_GT(shortened, compared / 2);  // most of them did leave micro-steps off
}

// The recommender against the search it stands for: every candidate (GPU count x stage and offload x
// checkpointing x micro-batch dividing the samples per GPU), the larger micro-batches of a setting not tried once
// one does not fit, each tried one simulated whole and ranked by tokens/s, then by the lower peak.
struct Ranked {
  std::string setting;
  StepSimulation simulation;
};

std::vector<Ranked> exhaustive_ranking(const ModelDescription& model, const ClusterDescription& cluster,
                                       const TrainingConfig& training, std::int64_t global_batch,
                                       std::int64_t* candidates, std::int64_t* fitting) {
  std::vector<Ranked> fit;
  *candidates = 0;
  const double margin = default_memory_margin(training.engine).fraction;
  PlannerOptions memory_only;
  memory_only.search_max_micro_batch = false;
  memory_only.gpu_memory_margin = margin;
  SimulationOptions whole;
  whole.record_events = true;
  for (int gpus : default_gpu_counts(cluster)) {
    if (global_batch % gpus != 0) continue;
    const ClusterDescription sized = with_gpu_count(cluster, gpus);
    const std::int64_t per_gpu = global_batch / gpus;
    for (const PlanChoice& choice : enumerate_plan_choices()) {
      if (!cluster_supports(sized, choice)) continue;
      for (Checkpointing checkpointing : {Checkpointing::none, Checkpointing::selective, Checkpointing::full}) {
        for (std::int64_t micro = 1; micro <= per_gpu; ++micro) {
          if (per_gpu % micro != 0) continue;
          ++*candidates;
          TrainingConfig candidate = training;
          candidate.micro_batch = micro;
          candidate.grad_accum = per_gpu / micro;
          candidate.checkpointing = checkpointing;
          const PlanResult plan = evaluate_plan(model, sized, candidate, choice, memory_only);
          if (!plan.host_fits || !plan.nvme_fits) break;
          StepSimulation simulation = simulate_step(model, sized, candidate, choice, whole);
          if (!timeline_gpu_fits(simulation, sized, margin)) break;
          fit.push_back({choice.label() + " on " + std::to_string(gpus) + " GPUs, micro-batch " +
                             std::to_string(micro) + ", " + to_string(checkpointing),
                         std::move(simulation)});
        }
      }
    }
  }
  *fitting = static_cast<std::int64_t>(fit.size());
  std::stable_sort(fit.begin(), fit.end(), [](const Ranked& a, const Ranked& b) {
    if (a.simulation.tokens_per_second != b.simulation.tokens_per_second)
      return a.simulation.tokens_per_second > b.simulation.tokens_per_second;
    return a.simulation.peak_gpu_bytes < b.simulation.peak_gpu_bytes;
  });
  return fit;
}

void expect_exhaustive_ranking(const ModelDescription& model, const ClusterDescription& cluster, std::int64_t seq,
                               std::int64_t global_batch) {
  TrainingConfig training;
  training.seq_len = seq;
  RecommendOptions options;
  options.global_batch = global_batch;
  options.top = 8;
  const RecommendResult result = recommend_plans(model, cluster, training, options);
  std::int64_t candidates = 0, fitting = 0;
  const std::vector<Ranked> expected = exhaustive_ranking(model, cluster, training, global_batch, &candidates, &fitting);
  EXPECT_EQ(result.candidates, candidates);
  EXPECT_EQ(result.fitting, fitting);
  ASSERT_EQ(result.plans.size(), std::min<std::size_t>(options.top, expected.size()));
  for (std::size_t i = 0; i < result.plans.size(); ++i) {
    const Recommendation& r = result.plans[i];
    const std::string setting = r.choice.label() + " on " + std::to_string(r.gpus) + " GPUs, micro-batch " +
                                std::to_string(r.training.micro_batch) + ", " + to_string(r.training.checkpointing);
    EXPECT_EQ(setting, expected[i].setting) << "rank " << i + 1;
    expect_same_step(r.simulation, expected[i].simulation, setting);
  }
}

TEST(SteadyAccumulation, RecommendRanksAsTheExhaustiveSearch) {
  // Long accumulations on few GPUs (GPT-2 1.5B, 128 samples over up to 4 H200s) and a model that does not fit
  // most settings (GPT-3 175B over up to 64 A100s, where the bytes held all step rule out most plans unsimulated).
  expect_exhaustive_ranking(load_model("gpt2-1.5b"), load_cluster("h200x4"), 1024, 128);
  expect_exhaustive_ranking(load_model("gpt3-175b"), with_gpu_count(load_cluster("a100x8-multinode"), 64), 2048, 256);
}

}  // namespace
}  // namespace zeroplan
