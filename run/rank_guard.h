// What one rank of a run keeps for failure handling: where it stands (exec/comm/rank_progress.h, shared with
// its communicator), its heartbeats to the launcher (run/rank_heartbeat.h), the test-only fault switch
// (run/fault_injection.h), and the failure path that ends the whole run when this rank cannot go on.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "exec/comm/collective_watchdog.h"
#include "exec/comm/rank_progress.h"
#include "run/fault_injection.h"
#include "run/rank_heartbeat.h"

namespace zeroplan {

class RankGuard {
 public:
  // Reads ZEROPLAN_TEST_FAULT (an InputError when malformed) and starts the heartbeats when a launcher listens.
  RankGuard(int rank, int world, std::int64_t steps, double collective_timeout_s, std::string backend);

  // For the communicators: the timeout, this rank's progress, and the heartbeat channel told of a watchdog's
  // failure (kind "comm": the cause may be another rank).
  exec::CommWatch comm_watch();
  exec::RankProgress& progress() { return progress_; }
  int world() const { return world_; }

  // Before step `step` (1-based): marks it, and does the test fault when it is this rank's and this step's.
  void before_step(std::int64_t step);
  void set_phase(const char* phase) { progress_.set_phase(phase); }

  // This rank cannot go on (an exception: CUDA, NCCL or MPI error, out of memory): writes one line naming the
  // rank, the step and the phase, tells the launcher, and ends every rank of an MPI world (MPI_Abort); returns
  // the exit status (2, a failed run) for a rank whose peers are ended by the launcher instead.
  int fail(const std::string& what);
  // The rank finished with this exit status (0 trained, 1 the plan does not fit): the launcher's goodbye.
  void done(int exit_status);

 private:
  int rank_, world_;
  double collective_timeout_s_;
  std::string backend_;
  exec::RankProgress progress_;
  std::optional<TestFault> fault_;
  HeartbeatSender heartbeat_;  // after progress_, which it reads
};

}  // namespace zeroplan
