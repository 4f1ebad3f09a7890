// Where one rank stands: the step and phase the training loop is in, and the collective it waits for. Written by
// the training loop (step, phase) and by the communicator (collectives), read by other threads: the collective
// watchdog (exec/comm/collective_watchdog.h), which names it when a collective times out, and the heartbeats to
// the launcher (run/rank_heartbeat.h), which name the rank that stopped making progress. Atomics only, so a
// reader never blocks the training thread; phase and collective names are string literals.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace zeroplan::exec {

class RankProgress {
 public:
  RankProgress();

  // The step about to run, 1-based as the run prints it (0: before the first step).
  void set_step(std::int64_t step);
  // "start-up", "step", "report", or finer ones ("forward", "backward", "optimizer") where the engine sets them.
  void set_phase(const char* phase);

  // A collective was issued; returns its ordinal (1-based, counted on this rank). Every rank issues the same
  // collectives in the same order, so ordinals compare across ranks: a rank whose count is behind the others'
  // has not reached the collective they wait in.
  std::int64_t count_collective();
  // The oldest collective this rank waits for (its ordinal, and since when), or null when it waits for none.
  // MPI: around each blocking call; NCCL: the watchdog, from the oldest enqueued collective whose completion
  // event has not fired.
  void set_waiting(const char* collective, std::int64_t ordinal,
                   std::chrono::steady_clock::time_point since = std::chrono::steady_clock::now());

  struct Snapshot {
    std::int64_t step = 0;
    const char* phase = "";
    const char* collective = nullptr;  // waited for, or null
    std::int64_t ordinal = 0;          // of the collective waited for
    std::int64_t collectives = 0;      // issued so far
    double seconds_in_state = 0;       // since the wait began, or since the last change outside a collective
  };
  Snapshot snapshot() const;

 private:
  void touch();
  std::atomic<std::int64_t> step_{0};
  std::atomic<const char*> phase_{"start-up"};
  std::atomic<const char*> collective_{nullptr};
  std::atomic<std::int64_t> ordinal_{0};
  std::atomic<std::int64_t> collectives_{0};
  std::atomic<std::int64_t> changed_ns_{0};  // steady_clock: the last change of step, phase or wait
  std::atomic<std::int64_t> waiting_since_ns_{0};
};

// "step 3, phase step, waiting in all_reduce #57 for 5.0 s" / "step 3, phase step, outside any collective for
// 5.0 s (56 collectives issued)".
std::string describe(const RankProgress::Snapshot& s);

}  // namespace zeroplan::exec
