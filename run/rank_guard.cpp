#include "run/rank_guard.h"

#include <utility>

#include "exec/comm/mpi_communicator.h"

namespace zeroplan {

RankGuard::RankGuard(int rank, int world, std::int64_t steps, double collective_timeout_s, std::string backend)
    : rank_(rank),
      world_(world),
      collective_timeout_s_(collective_timeout_s),
      backend_(std::move(backend)),
      fault_(read_test_fault(world, steps)),
      heartbeat_(rank, progress_) {}

exec::CommWatch RankGuard::comm_watch() {
  exec::CommWatch watch;
  watch.timeout_s = collective_timeout_s_;
  watch.progress = &progress_;
  watch.on_failure = [this](const std::string& message) { heartbeat_.fail("comm", message); };
  return watch;
}

void RankGuard::before_step(std::int64_t step) {
  progress_.set_step(step);
  progress_.set_phase("step");
  heartbeat_.beat();  // the launcher knows the step even when steps are shorter than the beat period
  if (fault_) inject_test_fault(*fault_, rank_, step, backend_);
}

int RankGuard::fail(const std::string& what) {
  const exec::RankProgress::Snapshot s = progress_.snapshot();
  std::string line = "rank " + std::to_string(rank_) + " of " + std::to_string(world_) + " failed ";
  line += s.step == 0 ? std::string("during start-up") : "at step " + std::to_string(s.step);
  line += std::string(" (phase ") + s.phase + (s.collective ? std::string(", in ") + s.collective : "") + "): " + what;
  exec::write_stderr_line("zeroplan run: " + line);
  heartbeat_.fail("error", what);  // the launcher has the rank and where from the message's fields
  // The peers wait for this rank in their next collective: end them now rather than at the collective timeout.
  exec::abort_mpi_world(exec::kCommFailureExitStatus);
  return exec::kCommFailureExitStatus;
}

void RankGuard::done(int exit_status) { heartbeat_.done(exit_status); }

}  // namespace zeroplan
