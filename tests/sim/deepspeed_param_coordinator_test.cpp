// DeepSpeed stage 3's parameter coordinator as the planner replays it (sim/deepspeed_param_coordinator.h), checked
// against what DeepSpeed 0.19.8 was seen to hold and against the rules of partitioned_param_coordinator.py.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/data_paths.h"
#include "core/model_description.h"
#include "core/training_config.h"
#include "sim/deepspeed_param_coordinator.h"
#include "sim/zero_schedule.h"

namespace zeroplan {
namespace {

ModelDescription gpt2_xl_as_measured() {
  // The GPT-2 1.5B that ds_peer.py trained (vocabulary 50304), as the stored measurements plan it.
  return load_model((data_directory() / "bench/deepspeed/models/gpt2-1.5b-v50304.json").string());
}

ZeroConfig stage3_defaults() {
  ZeroConfig zero;  // DeepSpeed's defaults: prefetch 5e7, max live 1e9, reuse distance 1e9, persistence 1e5
  zero.stage = 3;
  return zero;
}

// Elements of each layer still gathered once the forward is over.
std::vector<std::int64_t> gathered_after_forward(const ModelDescription& model, const CoordinatorReplay& replay) {
  std::vector<std::int64_t> live(model.layers.size(), 0);
  for (const CoordinatorPosition& position : replay.forward) {
    for (const CoordinatorGather& g : position.gathers) live[static_cast<std::size_t>(g.layer)] += g.elements;
    for (const CoordinatorRelease& r : position.releases) live[static_cast<std::size_t>(r.layer)] -= r.elements;
  }
  return live;
}

// DeepSpeed's allocator trace of GPT-2 1.5B at stage 3 with the parameters on the CPU, one H200
// (bench/deepspeed/results-pending/README.md, "what a one-rank stage-3 process holds outside the allocator"): at the
// allocated peak, the loss's backward, the tied embedding and all four weights of the last 30 of the 48 blocks are
// gathered; the first 18 blocks' were released.
TEST(DeepSpeedParamCoordinator, GptTwoXlKeepsTheLastThirtyBlocksAndTheTiedEmbeddingIntoTheBackward) {
  const ModelDescription model = gpt2_xl_as_measured();
  const ZeroConfig zero = stage3_defaults();
  const auto replay = replay_deepspeed_param_coordinator(model, zero);
  const std::vector<std::int64_t> live = gathered_after_forward(model, *replay);
  ASSERT_EQ(model.layers.front().kind, "embedding");
  const TransformerShape& shape = *model.transformer;
  EXPECT_EQ(live.front(), shape.vocab_size * shape.hidden) << "the token table (the tied head's weight)";
  int kept = 0, released = 0;
  for (std::size_t i = 0; i < model.layers.size(); ++i) {
    if (model.layers[i].kind != "transformer_block") continue;
    const std::int64_t gathered = model.layers[i].params - persistent_params(model.layers[i], zero);
    const std::size_t block = i - 1;
    if (block < 18) {
      EXPECT_EQ(live[i], 0) << "block " << block << " released in the forward";
      released += live[i] == 0;
    } else {
      EXPECT_EQ(live[i], gathered) << "block " << block << " kept whole into the backward";
      kept += live[i] == gathered;
    }
  }
  EXPECT_EQ(kept, 30);
  EXPECT_EQ(released, 18);
  // That is the 1.87 GiB of bf16 parameters the trace found (1.0e9 elements: max_live_parameters).
  std::int64_t total = 0;
  for (std::int64_t elements : live) total += elements;
  EXPECT_NEAR(2.0 * static_cast<double>(total) / (1u << 30), 1.87, 0.01);
}

// Without a prefetch bucket nothing is prefetched (fetch_sub_module prefetches only when stage3_prefetch_bucket_size
// > 0), and without a reuse distance nothing stays gathered past its use: every module is gathered before its
// forward and again before its backward, the ZeRO paper's 2 x (P - persistent) of parameter all-gathers per
// micro-step, plus the tied head's second use of the token table in each pass.
TEST(DeepSpeedParamCoordinator, WithoutPrefetchOrReuseEveryUseGathersOnDemand) {
  const ModelDescription model = gpt2_xl_as_measured();
  ZeroConfig zero = stage3_defaults();
  zero.prefetch_bucket_size = 0;
  zero.max_reuse_distance = 0;
  const auto replay = replay_deepspeed_param_coordinator(model, zero);
  std::int64_t gathered = 0;
  for (const LayerDescription& layer : model.layers) gathered += layer.params - persistent_params(layer, zero);
  const TransformerShape& shape = *model.transformer;
  EXPECT_EQ(replay->gathered_elements, 2 * (gathered + shape.vocab_size * shape.hidden));
  for (const auto* pass : {&replay->forward, &replay->backward})
    for (const CoordinatorPosition& position : *pass)
      for (const CoordinatorGather& g : position.gathers) EXPECT_FALSE(g.prefetch);
  for (std::int64_t elements : gathered_after_forward(model, *replay)) EXPECT_EQ(elements, 0);
  // One module gathered at a time: the largest weight (c_fc or the MLP's output projection, 4h x h) or the table.
  EXPECT_EQ(replay->peak_live_elements, shape.vocab_size * shape.hidden);
}

// The prefetcher stops taking parameters once max_live_parameters are gathered (max_params_to_prefetch =
// max_live - available): the default GPT-2 1.5B holds about 1e9 elements, a bound of 3e8 about 3e8 (at most one
// module's parameters beyond it, the module that crossed it).
TEST(DeepSpeedParamCoordinator, MaxLiveParametersBoundsWhatThePrefetcherHolds) {
  const ModelDescription model = gpt2_xl_as_measured();
  ZeroConfig zero = stage3_defaults();
  zero.max_reuse_distance = 0;  // only the prefetcher holds parameters
  const std::int64_t largest_weight = model.layers[1].largest_module_params;
  for (std::int64_t bound : {std::int64_t{300'000'000}, std::int64_t{1'000'000'000}}) {
    zero.max_live_parameters = bound;
    const auto replay = replay_deepspeed_param_coordinator(model, zero);
    EXPECT_GE(replay->peak_live_elements, bound - largest_weight) << bound;
    EXPECT_LE(replay->peak_live_elements, bound + 2 * model.transformer->vocab_size * model.transformer->hidden)
        << bound;
  }
}

// The replay is kept per thread for the last inputs: a changed setting is replayed again, never served stale.
TEST(DeepSpeedParamCoordinator, ChangedSettingsAreReplayedAgain) {
  const ModelDescription model = gpt2_xl_as_measured();
  ZeroConfig zero = stage3_defaults();
  const std::int64_t defaults = replay_deepspeed_param_coordinator(model, zero)->peak_live_elements;
  zero.max_live_parameters = 300'000'000;
  const std::int64_t bounded = replay_deepspeed_param_coordinator(model, zero)->peak_live_elements;
  EXPECT_LT(bounded, defaults);
  ModelDescription shallower = model;  // 8 of the 48 blocks: everything fits under max_live_parameters
  shallower.layers.erase(shallower.layers.begin() + 1, shallower.layers.begin() + 41);
  zero.max_live_parameters = 1'000'000'000;
  EXPECT_LT(replay_deepspeed_param_coordinator(shallower, zero)->peak_live_elements, bounded);
  EXPECT_EQ(replay_deepspeed_param_coordinator(model, zero)->peak_live_elements, defaults);
}

}  // namespace
}  // namespace zeroplan
