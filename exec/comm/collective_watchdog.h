// The collective timeout and the thread that enforces it. A rank whose peer died or hangs would otherwise wait
// in its next collective forever; as in PyTorch's ProcessGroupNCCL watchdog (a thread polling each collective's
// completion and ncclCommGetAsyncError against a timeout, then ncclCommAbort), each communicator runs a
// WatchdogThread that checks the collective this rank waits for against `timeout_s` and, past it, says which
// collective, step and phase timed out, and stops the rank so that every rank of the run ends:
//   MPI  (exec/comm/mpi_communicator.cpp): MPI_Abort, after asking the peers where they are;
//   NCCL (exec/comm/nccl_communicator.cpp): ncclCommAbort on a timeout or an asynchronous NCCL error.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "exec/comm/rank_progress.h"

namespace zeroplan::exec {

// Default: long enough for any collective of a healthy run (the slowest, a multi-GiB all-gather on a loaded CPU
// backend, takes seconds), short enough that a hang costs minutes, not hours. PyTorch's default for NCCL is 10
// minutes; we choose 5.
inline constexpr double kDefaultCollectiveTimeoutS = 300;
inline constexpr double kMinCollectiveTimeoutS = 1;
inline constexpr double kMaxCollectiveTimeoutS = 86400;

// The exit status of a rank stopped by a communication failure: a failed run (cli/run_command.h).
inline constexpr int kCommFailureExitStatus = 2;

struct CommWatch {
  double timeout_s = kDefaultCollectiveTimeoutS;
  // Where this rank stands, shared with the training loop and the heartbeats (not owned); null: the
  // communicator keeps its own.
  RankProgress* progress = nullptr;
  // Told the one-line failure message before the rank is stopped (the launcher's heartbeat channel listens
  // here); the message always goes to standard error as well.
  std::function<void(const std::string& message)> on_failure;
};

// The polling period for a timeout: a twentieth of it, between 50 ms and 1 s, so that a timeout is noticed
// within 5% of its length and an idle watchdog costs nothing measurable.
std::chrono::milliseconds watchdog_period(double timeout_s);

// A thread calling `check` every `period` until it is destroyed (the destructor stops and joins it).
class WatchdogThread {
 public:
  WatchdogThread(std::chrono::milliseconds period, std::function<void()> check);
  ~WatchdogThread();
  WatchdogThread(const WatchdogThread&) = delete;
  WatchdogThread& operator=(const WatchdogThread&) = delete;

 private:
  void loop();
  std::chrono::milliseconds period_;
  std::function<void()> check_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

// Writes "zeroplan run: <message>" to standard error (write_stderr_line), then tells watch.on_failure.
void report_comm_failure(const CommWatch& watch, const std::string& message);
// One line to standard error in one write(2) (the lines of ranks sharing a pipe do not interleave), safe from
// any thread; a newline is added.
void write_stderr_line(const std::string& line);

}  // namespace zeroplan::exec
