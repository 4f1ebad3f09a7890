// `zeroplan run` reports collective bytes per applied optimizer step (run/applied_step_comm.h): a step fp16's loss
// scaler skipped is left out of the mean, whatever it moved.
#include "run/applied_step_comm.h"

#include <gtest/gtest.h>

namespace zeroplan {
namespace {

exec::CommCounters counters(std::int64_t all_reduce, std::int64_t reduce_scatter, std::int64_t all_gather) {
  exec::CommCounters c;
  c.add(exec::CommKind::all_reduce, all_reduce);
  c.add(exec::CommKind::reduce_scatter, reduce_scatter);
  c.add(exec::CommKind::all_gather, all_gather);
  return c;
}

TEST(AppliedStepComm, SkippedStepsAreLeftOutOfTheMeanPerStep) {
  AppliedStepComm comm;
  // Three timed steps: an applied one (reduce-scatter 100, all-gather 100), a skipped one that reduced its
  // gradients but gathered nothing, another applied one; the counters only grow.
  comm.add(counters(0, 0, 0), counters(0, 100, 100), false);
  comm.add(counters(0, 100, 100), counters(0, 200, 100), true);
  comm.add(counters(0, 200, 100), counters(0, 300, 200), false);
  EXPECT_EQ(comm.applied(), 2);
  EXPECT_EQ(comm.skipped(), 1);
  EXPECT_EQ(comm.per_step(static_cast<int>(exec::CommKind::reduce_scatter)), 100);
  EXPECT_EQ(comm.per_step(static_cast<int>(exec::CommKind::all_gather)), 100);  // over all three: 66
  EXPECT_EQ(comm.per_step(static_cast<int>(exec::CommKind::all_reduce)), 0);
}

TEST(AppliedStepComm, NoAppliedStepMeansNoFigure) {
  AppliedStepComm comm;
  comm.add(counters(0, 0, 0), counters(50, 0, 0), true);
  EXPECT_EQ(comm.applied(), 0);
  EXPECT_EQ(comm.per_step(static_cast<int>(exec::CommKind::all_reduce)), 0);
}

}  // namespace
}  // namespace zeroplan
