// The parameter swapper's buffer policy (exec/offload/swap_buffer_policy.h), by hand-worked sequences: which uses
// find their chunk still in a buffer, which buffer gives way, and what a write or a dropped plan leaves behind.
#include "exec/offload/swap_buffer_policy.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

namespace zeroplan::exec::offload {
namespace {

// Drives the policy as ParamSwapper does (top_up before a planned acquire, after each release) and counts reads.
struct Driver {
  explicit Driver(int buffers) : policy(buffers) {}
  SwapBufferPolicy policy;
  std::vector<int> dropped;
  std::vector<SwapBufferPolicy::Reservation> reserved;
  std::vector<int> read_chunks;

  void plan(const std::vector<int>& order, int ahead) {
    policy.plan(order, ahead, dropped);
    policy.top_up(reserved);
  }
  void use(int chunk) {
    if (policy.planned_next(chunk)) policy.top_up(reserved);
    const SwapBufferPolicy::Use u = policy.acquire(chunk, dropped);
    EXPECT_EQ(policy.chunk_in(u.buffer), chunk);
    if (u.read) read_chunks.push_back(chunk);
    policy.release(u.buffer);
    policy.top_up(reserved);
  }
  void write(int chunk, bool whole = true) { policy.end_write(policy.begin_write(chunk, whole, dropped)); }
};

TEST(SwapBufferPolicy, TheUpdatesLastChunksAreNotReadAgain) {
  // Three buffers; a step: the forward gathers 0..4, the update writes 4..0 (bucket order, the top of the layout
  // first), so 2, 1, 0 are in the buffers when the next forward asks for 0, 1, 2 first.
  Driver d(3);
  for (int c : {4, 3, 2, 1, 0}) d.write(c);
  for (int step = 0; step < 3; ++step) {
    d.read_chunks.clear();
    d.plan({0, 1, 2, 3, 4}, 3);
    for (int c : {0, 1, 2, 3, 4}) d.use(c);
    EXPECT_EQ(d.read_chunks, (std::vector<int>{3, 4})) << "step " << step;
    d.plan({}, 3);
    for (int c : {4, 3, 2, 1, 0}) d.write(c);
  }
}

TEST(SwapBufferPolicy, TheChunkAskedForFurthestAheadGivesWay) {
  // Two buffers hold 1 (released first) and 0; the plan asks for 2, then 1, then 0. The least recently released
  // buffer holds chunk 1, which the plan asks for next: it keeps it and gives chunk 0's buffer to chunk 2.
  Driver d(2);
  d.write(1);
  d.write(0);
  d.plan({2, 1, 0}, 1);
  for (int c : {2, 1, 0}) d.use(c);
  // Chunk 0 is needed last: its buffer takes chunk 2; then 1 is still there; then 0 is read back.
  EXPECT_EQ(d.read_chunks, (std::vector<int>{2, 0}));
}

TEST(SwapBufferPolicy, AChunkUsedTwiceInAPlanIsReadOnceWhileItsBufferIsSpared) {
  Driver d(2);
  d.plan({0, 1, 0}, 2);
  for (int c : {0, 1, 0}) d.use(c);
  EXPECT_EQ(d.read_chunks, (std::vector<int>{0, 1}));
}

TEST(SwapBufferPolicy, APartialWriteLeavesNoCurrentCopy) {
  Driver d(2);
  d.write(0);
  d.write(1);
  d.write(0, false);  // a piece of chunk 0 (a checkpoint's restore): the buffer holds only that piece
  d.plan({0, 1}, 2);
  for (int c : {0, 1}) d.use(c);
  EXPECT_EQ(d.read_chunks, (std::vector<int>{0}));
}

TEST(SwapBufferPolicy, ADroppedPlansReadsCountAsNotLanded) {
  Driver d(2);
  d.plan({0, 1}, 2);  // both reserved, reads in flight
  d.plan({}, 2);      // dropped before either was acquired
  EXPECT_EQ(d.dropped.size(), 2u);
  d.plan({0}, 2);
  d.use(0);
  EXPECT_EQ(d.read_chunks, (std::vector<int>{0})) << "whether the dropped read landed is timing: read again";
}

TEST(SwapBufferPolicy, AWriteOfAPlannedChunkDropsThePlanAndStalesOtherCopies) {
  Driver d(3);
  d.write(0);
  d.write(1);
  d.plan({1, 0}, 2);  // both hits, reserved
  d.dropped.clear();
  d.write(0);  // chunk 0's planned use would race the write: the plan goes
  EXPECT_EQ(d.dropped.size(), 2u);
  d.use(1);  // out of any plan: still in its buffer
  d.use(0);  // the buffer the write used holds the new values
  EXPECT_TRUE(d.read_chunks.empty());
}

TEST(SwapBufferPolicy, EveryBufferInUseIsALogicError) {
  SwapBufferPolicy policy(1);
  std::vector<int> dropped;
  const SwapBufferPolicy::Use u = policy.acquire(0, dropped);
  EXPECT_TRUE(u.read);
  EXPECT_THROW(policy.acquire(1, dropped), std::logic_error);
  EXPECT_THROW(policy.begin_write(1, true, dropped), std::logic_error);
  EXPECT_THROW(SwapBufferPolicy(0), std::invalid_argument);
}

}  // namespace
}  // namespace zeroplan::exec::offload
