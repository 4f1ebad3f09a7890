// The stage-3 fetch plan against schedules worked through by hand from DeepSpeed's rules (prefetch within the
// bucket, live bound, release unless reused within the distance, first-fit arena).
#include "core/zero3_fetch_plan.h"

#include <gtest/gtest.h>

#include <stdexcept>

using namespace zeroplan;

namespace {

// A GPT-like model: embeddings (10), three blocks (20 each), a final norm that is persistent (0); forward uses
// the embeddings again as the LM head, backward runs LM head, norm, blocks top down.
const std::vector<std::int64_t> kUnits = {10, 20, 20, 20, 0};
const std::vector<int> kUses = {0, 1, 2, 3, 4, 0, 0, 4, 3, 2, 1};

struct Expected {
  std::vector<std::tuple<int, std::int64_t, bool>> gathers;
  std::vector<int> releases;
};

void expect_step(const Zero3UseStep& step, const Expected& e, int i) {
  ASSERT_EQ(step.gathers.size(), e.gathers.size()) << "use " << i;
  for (std::size_t g = 0; g < e.gathers.size(); ++g) {
    EXPECT_EQ(step.gathers[g].unit, std::get<0>(e.gathers[g])) << "use " << i << " gather " << g;
    EXPECT_EQ(step.gathers[g].arena_offset, std::get<1>(e.gathers[g])) << "use " << i << " gather " << g;
    EXPECT_EQ(step.gathers[g].prefetch, std::get<2>(e.gathers[g])) << "use " << i << " gather " << g;
  }
  EXPECT_EQ(step.releases, e.releases) << "use " << i;
}

}  // namespace

TEST(Zero3FetchPlan, NoReuseRegathersForBackwardExceptAdjacentUses) {
  Zero3FetchRules rules;
  rules.prefetch_elements = 25;
  rules.max_live_elements = 1000;
  rules.max_reuse_distance = 0;
  const Zero3FetchPlan plan = make_zero3_fetch_plan(kUnits, kUses, rules);
  ASSERT_EQ(plan.steps.size(), kUses.size());
  const std::vector<Expected> want = {
      {{{0, 0, false}, {1, 10, true}}, {0}},  // block 1 prefetched; embeddings' next use is 60 elements away
      {{{2, 30, true}}, {1}},                 // [0, 10) is too small for 20: placed after block 1
      {{{3, 0, true}}, {2}},                  // [0, 30) free again
      {{{0, 20, true}}, {3}},                 // the LM head's embeddings (the norm is never gathered)
      {{}, {}},                               // persistent norm
      {{{3, 0, true}}, {}},                   // LM head forward; reused at once by its backward (distance 0)
      {{}, {0}},
      {{}, {}},
      {{{2, 20, true}}, {3}},
      {{{1, 0, true}}, {2}},
      {{}, {1}},
  };
  for (std::size_t i = 0; i < want.size(); ++i) expect_step(plan.steps[i], want[i], static_cast<int>(i));
  EXPECT_EQ(plan.gathered_elements, 140);  // every block twice, the embeddings twice (input and LM head)
  EXPECT_EQ(plan.gathers, 8);
  EXPECT_EQ(plan.arena_elements, 50);
  EXPECT_EQ(plan.peak_live_elements, 40);
}

TEST(Zero3FetchPlan, LargeReuseDistanceKeepsEveryUnitGatheredOnce) {
  Zero3FetchRules rules;
  rules.prefetch_elements = 25;
  rules.max_live_elements = 1000;
  rules.max_reuse_distance = 1000;
  const Zero3FetchPlan plan = make_zero3_fetch_plan(kUnits, kUses, rules);
  EXPECT_EQ(plan.gathered_elements, 70);
  EXPECT_EQ(plan.peak_live_elements, 70);
  // each unit is released once, after its last use (embeddings after the LM head's backward, then the blocks)
  EXPECT_EQ(plan.steps[6].releases, std::vector<int>{0});
  EXPECT_EQ(plan.steps[8].releases, std::vector<int>{3});
  EXPECT_EQ(plan.steps[9].releases, std::vector<int>{2});
  EXPECT_EQ(plan.steps[10].releases, std::vector<int>{1});
}

// An untied Llama-like model at the turn from forward to backward: embeddings (10), three blocks (20 each), the head
// unit (10); the embeddings' backward reads no parameters. The reuse distance keeps blocks 2 and 3 gathered for the
// backward (60 and 20 elements of other uses before their next) and releases block 1 (100). Kept units ahead fill
// the 5-element bucket, so block 1 is gathered at block 2's backward use, one unit ahead, not beside the kept units
// and the head at the forward's end (DeepSpeed's coordinator, which skips available parameters, would: 70 live).
TEST(Zero3FetchPlan, KeptUnitsAheadFillThePrefetchBucket) {
  Zero3FetchRules rules;
  rules.prefetch_elements = 5;
  rules.max_reuse_distance = 65;
  const Zero3FetchPlan plan =
      make_zero3_fetch_plan({10, 20, 20, 20, 10}, {0, 1, 2, 3, 4, 4, 3, 2, 1}, rules);
  ASSERT_EQ(plan.steps.size(), 9u);
  const std::vector<Expected> expected = {
      {{{0, 0, false}, {1, 10, true}}, {0}},  // the embeddings, then block 1 ahead
      {{{2, 30, true}}, {1}},                 // block 1 released: 100 elements before its backward
      {{{3, 0, true}}, {}},                   // block 2 kept: 60
      {{{4, 20, true}}, {}},                  // block 3 kept: 20
      {{}, {}},                               // the head's forward: blocks 3 and 2 kept ahead, nothing gathered
      {{}, {4}},                              // the head's backward
      {{}, {3}},                              // block 3: block 2 kept ahead
      {{{1, 0, true}}, {2}},                  // block 2: block 1, one unit ahead
      {{}, {1}}};
  for (int i = 0; i < 9; ++i) expect_step(plan.steps[static_cast<std::size_t>(i)], expected[static_cast<std::size_t>(i)], i);
  EXPECT_EQ(plan.peak_live_elements, 50);
  EXPECT_EQ(plan.arena_elements, 50);
  EXPECT_EQ(plan.gathered_elements, 100);  // block 1 twice, every other unit once
}

TEST(Zero3FetchPlan, LiveBoundStopsPrefetchButNeverTheUnitInUse) {
  Zero3FetchRules rules;
  rules.prefetch_elements = 1000;
  rules.max_live_elements = 15;
  rules.max_reuse_distance = 0;
  const Zero3FetchPlan plan = make_zero3_fetch_plan(kUnits, kUses, rules);
  for (const Zero3UseStep& s : plan.steps)
    for (const Zero3Gather& g : s.gathers) EXPECT_FALSE(g.prefetch) << "a 20-element prefetch breaks the bound 15";
  EXPECT_EQ(plan.peak_live_elements, 20);  // the block in use, alone
  EXPECT_EQ(plan.arena_elements, 20);
}

TEST(Zero3FetchPlan, ZeroPrefetchBucketGathersOnDemand) {
  Zero3FetchRules rules;
  rules.prefetch_elements = 0;
  const Zero3FetchPlan plan = make_zero3_fetch_plan({5, 7}, {0, 1, 1, 0}, rules);
  ASSERT_EQ(plan.steps.size(), 4u);
  EXPECT_EQ(plan.steps[0].gathers.size(), 1u);
  EXPECT_FALSE(plan.steps[0].gathers[0].prefetch);
  EXPECT_EQ(plan.steps[1].gathers.size(), 1u);
  EXPECT_EQ(plan.steps[1].gathers[0].arena_offset, 5);  // unit 0 is kept (reused within 1e9)
  EXPECT_TRUE(plan.steps[2].gathers.empty());
  EXPECT_EQ(plan.gathered_elements, 12);
}

TEST(Zero3FetchPlan, RejectsUnknownUnitsAndNegativeSizes) {
  EXPECT_THROW(make_zero3_fetch_plan({5}, {1}, {}), std::invalid_argument);
  EXPECT_THROW(make_zero3_fetch_plan({-1}, {0}, {}), std::invalid_argument);
  Zero3FetchRules bad;
  bad.max_reuse_distance = -1;
  EXPECT_THROW(make_zero3_fetch_plan({5}, {0}, bad), std::invalid_argument);
}

// A bucket that holds every unit prefetches them all at the first use (DeepSpeed's rule); with at most two units
// ahead (the layer lists' graphs: exec/zero/zero_buffer_layout.cpp) they come two uses ahead, one a use, and the
// volume and the arena are unchanged (every unit is kept for its backward use either way).
TEST(Zero3FetchPlan, UnitsAheadSpreadTheBucketsPrefetchOverTheUses) {
  const std::vector<std::int64_t> units = {5, 5, 5, 5, 5, 5};
  const std::vector<int> uses = {0, 1, 2, 3, 4, 5, 5, 4, 3, 2, 1, 0};
  Zero3FetchRules rules;
  rules.prefetch_elements = 1000;
  const Zero3FetchPlan burst = make_zero3_fetch_plan(units, uses, rules);
  ASSERT_EQ(burst.steps[0].gathers.size(), 6u);  // unit 0 on demand, the five others ahead
  rules.max_units_ahead = 2;
  const Zero3FetchPlan spread = make_zero3_fetch_plan(units, uses, rules);
  ASSERT_EQ(spread.steps.size(), uses.size());
  const std::vector<std::vector<int>> want = {{0, 1, 2}, {3}, {4}, {5}, {}, {}, {}, {}, {}, {}, {}, {}};
  for (std::size_t i = 0; i < want.size(); ++i) {
    std::vector<int> got;
    for (const Zero3Gather& g : spread.steps[i].gathers) got.push_back(g.unit);
    EXPECT_EQ(got, want[i]) << "use " << i;
  }
  EXPECT_EQ(spread.gathered_elements, burst.gathered_elements);
  EXPECT_EQ(spread.arena_elements, burst.arena_elements);
  rules.max_units_ahead = -1;
  EXPECT_THROW(make_zero3_fetch_plan(units, uses, rules), std::invalid_argument);
}
