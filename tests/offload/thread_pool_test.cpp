// The CPU AdamW's thread pool (exec/offload/thread_pool.h): every thread runs every task exactly once, whether the
// next task comes while the workers still spin (back to back, as the offloaded optimizer's pieces come) or after
// they went to sleep; a worker's exception reaches run() and the pool stays usable. A lost hand-off shows as a hang,
// which ctest's timeout turns into a failure.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "exec/offload/thread_pool.h"

namespace zeroplan::exec::offload {
namespace {

void expect_each_thread_once_per_run(ThreadPool& pool, int runs, std::chrono::microseconds pause) {
  std::vector<std::atomic<int>> calls(static_cast<std::size_t>(pool.threads()));
  for (int r = 0; r < runs; ++r) {
    pool.run([&](int t) { calls[static_cast<std::size_t>(t)].fetch_add(1); });
    // Every thread has returned from this run when run() returns.
    for (int t = 0; t < pool.threads(); ++t)
      ASSERT_EQ(calls[static_cast<std::size_t>(t)].load(), r + 1) << "run " << r << ", thread " << t;
    if (pause.count() > 0) std::this_thread::sleep_for(pause);
  }
}

TEST(ThreadPool, BackToBackRunsReachEveryThreadOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    expect_each_thread_once_per_run(pool, 3000, std::chrono::microseconds(0));
  }
}

TEST(ThreadPool, RunsAfterTheWorkersSleptReachEveryThreadOnce) {
  // Pauses longer than the spin (ThreadPool::kSpinSeconds), and around it.
  ThreadPool pool(4);
  expect_each_thread_once_per_run(pool, 40, std::chrono::microseconds(2000));
  const auto spin = std::chrono::microseconds(static_cast<long>(ThreadPool::kSpinSeconds * 1e6));
  expect_each_thread_once_per_run(pool, 400, spin);
}

TEST(ThreadPool, SlowCallerAndSlowWorkersFinishTogether) {
  // run() sleeps while a worker is slow, and the workers sleep while the caller is slow.
  ThreadPool pool(3);
  for (int r = 0; r < 50; ++r) {
    std::atomic<int> done{0};
    pool.run([&](int t) {
      if (t == (r % 3)) std::this_thread::sleep_for(std::chrono::microseconds(300));
      done.fetch_add(1);
    });
    EXPECT_EQ(done.load(), 3);
  }
}

TEST(ThreadPool, AWorkersExceptionReachesRunAndThePoolGoesOn) {
  ThreadPool pool(4);
  EXPECT_THROW(pool.run([](int t) {
                 if (t == 2) throw std::runtime_error("worker 2 failed");
               }),
               std::runtime_error);
  EXPECT_THROW(pool.run([](int t) {
                 if (t == 0) throw std::logic_error("the caller failed");
               }),
               std::logic_error);
  std::atomic<int> calls{0};
  pool.run([&](int) { calls.fetch_add(1); });
  EXPECT_EQ(calls.load(), 4);
}

TEST(ThreadPool, RefusesNoThreads) { EXPECT_THROW(ThreadPool(0), std::invalid_argument); }

}  // namespace
}  // namespace zeroplan::exec::offload
