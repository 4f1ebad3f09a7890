#include "exec/offload/thread_pool.h"

#include <chrono>
#include <stdexcept>
#include <string>

namespace zeroplan::exec::offload {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Watches `done` for up to ThreadPool::kSpinSeconds; true when it held within that time.
template <typename Done>
bool spin_until(Done&& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(ThreadPool::kSpinSeconds);
  for (int i = 0;; ++i) {
    if (done()) return true;
    cpu_relax();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() >= deadline) return done();
  }
}

}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads < 1)
    throw std::invalid_argument("ThreadPool: threads is " + std::to_string(threads) + "; expected at least 1");
  workers_.reserve(static_cast<std::size_t>(threads - 1));
  try {
    for (int t = 1; t < threads; ++t) workers_.emplace_back([this, t] { worker_loop(t); });
  } catch (...) {
    // std::thread failed (std::system_error): stop the workers already started before reporting it.
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    start_.notify_all();
    for (std::thread& w : workers_) w.join();
    throw;
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  start_.notify_all();
  for (std::thread& w : workers_) w.join();
}

void ThreadPool::run(const std::function<void(int)>& task) {
  std::lock_guard<std::mutex> run_lock(run_mutex_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = nullptr;
  }
  task_ = &task;
  running_.store(static_cast<int>(workers_.size()));
  // Published after the task and the count (sequentially consistent, as is every access to the atomics here): a
  // worker that sees the new generation sees both. A worker that is about to sleep either sees the generation in
  // its wait's predicate (checked under mutex_) or is counted in sleeping_workers_ and woken below.
  generation_.fetch_add(1);
  if (sleeping_workers_.load() > 0) {
    { std::lock_guard<std::mutex> lock(mutex_); }
    start_.notify_all();
  }
  std::exception_ptr own_error;
  try {
    task(0);
  } catch (...) {
    own_error = std::current_exception();
  }
  if (!spin_until([this] { return running_.load() == 0; })) {
    std::unique_lock<std::mutex> lock(mutex_);
    caller_sleeping_.store(true);
    done_.wait(lock, [this] { return running_.load() == 0; });
    caller_sleeping_.store(false);
  }
  task_ = nullptr;
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error = error_;
  }
  if (own_error) std::rethrow_exception(own_error);
  if (error) std::rethrow_exception(error);
}

void ThreadPool::worker_loop(int thread_index) {
  std::uint64_t seen = 0;
  for (;;) {
    const auto ready = [&] { return stopping_.load() || generation_.load() != seen; };
    if (!spin_until(ready)) {
      std::unique_lock<std::mutex> lock(mutex_);
      sleeping_workers_.fetch_add(1);
      start_.wait(lock, ready);
      sleeping_workers_.fetch_sub(1);
    }
    if (stopping_.load()) return;
    seen = generation_.load();
    std::exception_ptr error;
    try {
      (*task_)(thread_index);
    } catch (...) {
      error = std::current_exception();
    }
    if (error) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = error;
    }
    // The last worker out wakes run() if it went to sleep; the lock orders the notification after run()'s
    // predicate check (run() sets caller_sleeping_ under mutex_ before it waits).
    if (running_.fetch_sub(1) == 1 && caller_sleeping_.load()) {
      { std::lock_guard<std::mutex> lock(mutex_); }
      done_.notify_one();
    }
  }
}

}  // namespace zeroplan::exec::offload
