// The launcher's watch over the ranks it started (run/launcher.h): it relays their output line by line
// ("[rank r] " before every line but rank 0's standard output), follows their heartbeats (run/rank_heartbeat.h)
// and notices the first failure:
//   - a rank process that exits with a status other than 0 or 1, or dies of a signal (waitpid, for ranks that
//     are our children; for ranks under mpirun, the rank's pid vanishing without a goodbye, and mpirun's own
//     "process rank N ... exited on signal S" line for the signal);
//   - a rank that reports its own failure (an exception: CUDA or MPI error, out of memory);
//   - a rank whose communicator watchdog stopped it (a collective timeout or an asynchronous NCCL error): the
//     rank named is then the one its heartbeats show behind the others (it never reached the collective they
//     wait in), or silent, or gone; the reporter only when no other rank explains it;
//   - a rank that stopped answering: no heartbeat for the silence deadline (a frozen process);
//   - a rank that waits in one collective well past the timeout (its own watchdog failed: the backstop).
// Then it stops every rank (SIGTERM, then SIGKILL after a grace period), reaps every process (the launcher is a
// child subreaper, so ranks orphaned by a dying mpirun come back to it and are killed and reaped too), and
// prints one line: which rank failed, where (step, phase, collective), and why.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "run/process_memory.h"
#include "run/rank_heartbeat.h"

namespace zeroplan {

// The launcher's deadlines, derived from the collective timeout T.
struct SupervisionDeadlines {
  double silence_s = 0;     // no heartbeat for this long: stopped answering. T, within [3 periods, 30 s]
  double first_beat_s = 0;  // the first heartbeat must come within this (process start-up, MPI init): 60 s + silence
  double stuck_s = 0;       // waiting in one collective this long: T + max(10 s, T / 2)
  double grace_s = 5;       // between SIGTERM and SIGKILL
};
SupervisionDeadlines supervision_deadlines(double collective_timeout_s);

class RankSupervisor {
 public:
  RankSupervisor(int world, double collective_timeout_s, HeartbeatListener& heartbeats);
  ~RankSupervisor();
  RankSupervisor(const RankSupervisor&) = delete;
  RankSupervisor& operator=(const RankSupervisor&) = delete;

  // A rank that is our child, with the read ends of its standard output and error.
  void add_rank_process(int rank, pid_t pid, int stdout_fd, int stderr_fd);
  // mpirun, our child; its standard output and error carry the ranks' lines tagged "[job,rank]<stdout>:"
  // (mpirun --tag-output) and its own untagged messages.
  void add_mpirun(pid_t pid, int stdout_fd, int stderr_fd);

  // Watches until every process is gone; returns the run's exit status: 0 every rank trained, 1 the ranks
  // stopped because the plan does not fit, 2 a rank failed (after the one-line message).
  int run();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace zeroplan
