#include "exec/comm/collective_watchdog.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace zeroplan::exec {

std::chrono::milliseconds watchdog_period(double timeout_s) {
  const double ms = std::clamp(timeout_s * 1000.0 / 20.0, 50.0, 1000.0);
  return std::chrono::milliseconds(static_cast<long long>(ms));
}

WatchdogThread::WatchdogThread(std::chrono::milliseconds period, std::function<void()> check)
    : period_(period), check_(std::move(check)), thread_([this] { loop(); }) {}

WatchdogThread::~WatchdogThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void WatchdogThread::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, period_, [this] { return stop_; })) {
    lock.unlock();
    check_();
    lock.lock();
  }
}

void write_stderr_line(const std::string& line) {
  const std::string text = line + "\n";
  std::size_t at = 0;
  while (at < text.size()) {
    const ssize_t n = ::write(STDERR_FILENO, text.data() + at, text.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // standard error is gone
    at += static_cast<std::size_t>(n);
  }
}

void report_comm_failure(const CommWatch& watch, const std::string& message) {
  write_stderr_line("zeroplan run: " + message);
  if (watch.on_failure) watch.on_failure(message);
}

}  // namespace zeroplan::exec
