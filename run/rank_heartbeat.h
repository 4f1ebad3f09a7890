// Heartbeats from the ranks to their launcher. The launcher (run/launcher.h) binds a Unix datagram socket in the
// abstract namespace (no file to clean up; it vanishes with the launcher) and hands its name to the ranks in
// ZEROPLAN_HEARTBEAT, directly or through mpirun, whose ranks inherit its environment. Each rank sends, once a
// second, where it stands (exec/comm/rank_progress.h); it also sends its failure, and its end. From these the
// launcher tells a rank that stopped answering (no heartbeat), a rank that stopped making progress (its peers
// wait in a collective it never reached), a rank that vanished without saying goodbye (killed), and which rank
// to name when a peer's watchdog reports a timeout.
//
// One datagram per message, tab-separated text (datagrams on a local socket arrive whole and in order):
//   beat  rank pid step phase collectives waited-collective ordinal seconds-in-state
//   fail  rank pid step phase collectives waited-collective ordinal seconds-in-state kind message
//         kind: "error" (this rank failed: the message says why) or "comm" (its communicator's watchdog stopped
//         it: a timeout or an asynchronous error, caused by whichever rank)
//   done  rank pid exit-status
// A beat goes out once a second and at the start of every step.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "exec/comm/collective_watchdog.h"
#include "exec/comm/rank_progress.h"

namespace zeroplan {

inline constexpr const char* kHeartbeatVariable = "ZEROPLAN_HEARTBEAT";
// A rank beats once a second; the launcher's deadlines are several periods (run/rank_supervisor.h).
inline constexpr double kHeartbeatPeriodS = 1.0;

struct HeartbeatMessage {
  enum class Type { beat, fail, done };
  Type type = Type::beat;
  int rank = -1;
  pid_t pid = -1;
  // beat and fail: where the rank stands
  std::int64_t step = 0;
  std::string phase;
  std::int64_t collectives = 0;
  std::string collective;  // waited in; empty: none
  std::int64_t ordinal = 0;
  double seconds_in_state = 0;
  // fail
  std::string kind;
  std::string message;
  // done
  int exit_status = 0;
};

std::string encode(const HeartbeatMessage& m);
std::optional<HeartbeatMessage> decode(const std::string& datagram);  // nullopt: not one of ours
// The state of a beat in words, as exec::describe says it ("step 3, phase step, waiting in all_reduce #57 for 5.0 s").
std::string describe(const HeartbeatMessage& beat);

// The rank's side: a thread beating every kHeartbeatPeriodS, and the failure and end messages. Inactive (sends
// nothing) when ZEROPLAN_HEARTBEAT is not set: a rank started by a plain mpirun has no launcher of ours.
class HeartbeatSender {
 public:
  HeartbeatSender(int rank, const exec::RankProgress& progress);
  ~HeartbeatSender();
  HeartbeatSender(const HeartbeatSender&) = delete;
  HeartbeatSender& operator=(const HeartbeatSender&) = delete;

  bool active() const { return fd_ >= 0; }
  void beat();                                                      // any thread
  void fail(const std::string& kind, const std::string& message);  // any thread
  void done(int exit_status);

 private:
  void send(const HeartbeatMessage& m);
  int rank_;
  const exec::RankProgress& progress_;
  int fd_ = -1;
  std::unique_ptr<exec::WatchdogThread> beating_;
};

// The launcher's side: the bound socket and what arrives on it.
class HeartbeatListener {
 public:
  HeartbeatListener();  // binds "@zeroplan-heartbeat-<pid>-<random>"; throws std::runtime_error with errno's text
  ~HeartbeatListener();
  HeartbeatListener(const HeartbeatListener&) = delete;
  HeartbeatListener& operator=(const HeartbeatListener&) = delete;

  const std::string& address() const { return address_; }  // the value of ZEROPLAN_HEARTBEAT
  int fd() const { return fd_; }
  std::vector<HeartbeatMessage> receive();  // everything waiting, without blocking

 private:
  std::string address_;
  int fd_ = -1;
};

}  // namespace zeroplan
