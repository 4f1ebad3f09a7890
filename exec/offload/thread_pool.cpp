#include "exec/offload/thread_pool.h"

#include <stdexcept>
#include <string>

namespace zeroplan::exec::offload {

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
    task_ = &task;
    error_ = nullptr;
    running_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  start_.notify_all();
  std::exception_ptr own_error;
  try {
    task(0);
  } catch (...) {
    own_error = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [this] { return running_ == 0; });
  task_ = nullptr;
  if (own_error) std::rethrow_exception(own_error);
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::worker_loop(int thread_index) {
  std::uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      start_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      task = task_;
    }
    std::exception_ptr error;
    try {
      (*task)(thread_index);
    } catch (...) {
      error = std::current_exception();
    }
    bool last;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (error && !error_) error_ = error;
      last = --running_ == 0;
    }
    if (last) done_.notify_one();
  }
}

}  // namespace zeroplan::exec::offload
