// A fixed set of worker threads that run one task at a time on every thread: the CPU AdamW's parallel loop.
// Persistent, so that an update per gradient piece costs a wake-up, not thread creation; sized by the caller
// (never by OMP_NUM_THREADS or another environment variable).
#pragma once

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
  std::mutex mutex_;      // guards everything below
  std::condition_variable start_;
  std::condition_variable done_;
  const std::function<void(int)>* task_ = nullptr;
  std::uint64_t generation_ = 0;  // incremented by each run(); a worker runs the task once per generation
  int running_ = 0;               // workers still inside the current task
  bool stopping_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> workers_;
};

}  // namespace zeroplan::exec::offload
