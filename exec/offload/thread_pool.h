// A fixed set of worker threads that run one task at a time on every thread: the CPU AdamW's parallel loop.
// Persistent, so that an update per gradient piece costs a hand-off, not thread creation; sized by the caller
// (never by OMP_NUM_THREADS or another environment variable).
//
// The hand-off spins before it sleeps: a worker that finished a task watches for the next one for kSpinSeconds, and
// run() watches for the workers' completion as long, before either blocks on a condition variable (OpenMP runtimes
// do the same, GOMP_SPINCOUNT / OMP_WAIT_POLICY). The offloaded optimizer calls run() once per gradient piece, back
// to back: ResNet-101's ~180 pieces a step at stage 3 cost 34.5 us each through condition variables alone with 16
// threads on an H200 host (configs/clusters/h200x2.json host.cpu_optimizer_call_seconds).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace zeroplan::exec::offload {

class ThreadPool {
 public:
  // How long a worker (or run()) watches for the next task (or the workers' completion) before it sleeps.
  static constexpr double kSpinSeconds = 50e-6;

  // threads >= 1 (std::invalid_argument otherwise): the calling thread plus threads - 1 workers.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls task(t) for every t in [0, threads()): t = 0 on the calling thread, the others on the workers, and
  // returns when all have returned; the first exception a task threw is rethrown here. Calls from several
  // threads run one after the other.
  void run(const std::function<void(int)>& task);

 private:
  void worker_loop(int thread_index);

  std::mutex run_mutex_;  // one run() at a time
  std::mutex mutex_;      // the sleepers' side: start_, done_, error_
  std::condition_variable start_;
  std::condition_variable done_;
  // Written by run() before it publishes a generation, read by the workers after they see it.
  const std::function<void(int)>* task_ = nullptr;
  std::atomic<std::uint64_t> generation_{0};  // incremented by each run(); a worker runs the task once per generation
  std::atomic<int> running_{0};               // workers still inside the current task
  std::atomic<int> sleeping_workers_{0};      // workers blocked on start_ (run() notifies only when there are)
  std::atomic<bool> caller_sleeping_{false};  // run() blocked on done_ (the last worker notifies only then)
  std::atomic<bool> stopping_{false};
  std::exception_ptr error_;  // guarded by mutex_
  std::vector<std::thread> workers_;
};

}  // namespace zeroplan::exec::offload
