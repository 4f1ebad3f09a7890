#include "run/rank_supervisor.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <regex>
#include <sstream>
#include <utility>

namespace zeroplan {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "stopped";
}

// A rank's own ending: 0 trained, 1 the plan does not fit (every rank decides the same).
bool normal_exit(int status) { return WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 1); }

// /proc/<pid>/stat's state field ("Z": a zombie, dead but not reaped), or nullopt when the pid is gone.
std::optional<char> process_state(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return std::nullopt;
  const std::size_t paren = text.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos || paren + 2 >= text.size()) return std::nullopt;
  return text[paren + 2];
}
bool alive(pid_t pid) {
  const std::optional<char> state = process_state(pid);
  return state && *state != 'Z';
}

// Our children by /proc (the launcher is a subreaper, so orphaned ranks are among them).
std::vector<pid_t> own_children() {
  std::vector<pid_t> children;
  const pid_t self = ::getpid();
  DIR* proc = ::opendir("/proc");
  if (!proc) return children;
  while (const dirent* entry = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    std::ifstream stat(std::string("/proc/") + entry->d_name + "/stat");
    std::string text;
    if (!std::getline(stat, text)) continue;
    const std::size_t paren = text.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(text.substr(paren + 2));
    char state = 0;
    long parent = 0;
    if (rest >> state >> parent && parent == self) children.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(proc);
  return children;
}

}  // namespace

SupervisionDeadlines supervision_deadlines(double collective_timeout_s) {
  SupervisionDeadlines d;
  d.silence_s = std::clamp(collective_timeout_s, 3 * kHeartbeatPeriodS, 30.0);
  d.first_beat_s = 60 + d.silence_s;
  d.stuck_s = collective_timeout_s + std::max(10.0, collective_timeout_s / 2);
  return d;
}

struct RankSupervisor::State {
  struct Rank {
    pid_t pid = -1;
    bool child = false;         // our child (local launch): waitpid knows how it ended
    bool ended = false;         // reaped (child) or vanished (under mpirun)
    int status = 0;             // waitpid status (child)
    bool done = false;          // said goodbye
    int done_status = 0;
    bool beat_seen = false;
    Clock::time_point last_beat;
    HeartbeatMessage beat;      // the last one
    std::string fail_kind, fail_message;
    std::string last_error_line;
    std::string mpirun_says;    // how mpirun says it ended: "killed by signal 9 (Killed)", "exit status 2"
    Clock::time_point vanished_at;
  };
  struct Stream {
    int fd = -1;
    bool mpirun = false;  // tagged lines of several ranks, and mpirun's own
    bool is_stdout = false;
    int rank = -1;
    std::string pending;
  };
  struct Failure {
    int rank = -1;
    std::string cause;
    HeartbeatMessage where;  // the rank's last beat, if any
    bool where_known = false;
    // Ranks under mpirun vanished: which one went first is decided at the end, from mpirun's own account
    // (mpirun ends the others within milliseconds, so two may vanish between two looks).
    bool vanished = false;
  };

  int world;
  double timeout_s;
  SupervisionDeadlines deadlines;
  HeartbeatListener& heartbeats;
  std::vector<Rank> ranks;
  std::vector<Stream> streams;
  pid_t mpirun = -1;
  bool mpirun_reaped = false;
  int mpirun_status = 0;
  Clock::time_point started = Clock::now();
  std::optional<Failure> failure;
  // Stopping, once a failure is known: under mpirun, first mpirun's own teardown (it ends every rank when one
  // dies or calls MPI_Abort, and a SIGTERM in the middle of it crashes Open MPI 4.1's mpirun); then SIGTERM;
  // then SIGKILL. Each stage waits the grace period.
  enum class Stop { running, mpirun_teardown, terminated, killed };
  Stop stop = Stop::running;
  bool stopping = false;
  Clock::time_point next_stage_at;
  bool plan_does_not_fit = false;
  int mpirun_named = -1;  // the rank of mpirun's "Process name: [[job,1],rank]" line, until its "Exit code:" line
  // The node's available host memory while the ranks run: a rank killed by SIGKILL that we did not send is most
  // often the kernel's OOM killer's work, and the lowest figure says whether memory ran out. Started by run(),
  // after the ranks are forked: a thread of ours running at fork() could hold a lock the child then needs.
  std::optional<HostMemoryWatch> host_memory;

  State(int w, double t, HeartbeatListener& h)
      : world(w), timeout_s(t), deadlines(supervision_deadlines(t)), heartbeats(h), ranks(static_cast<std::size_t>(w)) {}

  // --- output ---
  void emit(bool to_stdout, const std::string& line) {
    (to_stdout ? std::cout : std::cerr) << line << '\n' << std::flush;
  }
  void rank_line(int rank, bool is_stdout, const std::string& line) {
    if (is_stdout && rank == 0) {
      emit(true, line);
      return;
    }
    emit(is_stdout, "[rank " + std::to_string(rank) + "] " + line);
    if (!is_stdout && !line.empty() && rank >= 0 && rank < world) ranks[rank].last_error_line = line;
  }
  // mpirun --tag-output: "[jobid,rank]<stdout>:text" (Open MPI 4).
  void mpirun_line(bool is_stdout, const std::string& line) {
    static const std::regex tagged(R"(^\[\d+,(\d+)\]<(stdout|stderr|stddiag)>:(.*)$)");
    std::smatch m;
    if (std::regex_match(line, m, tagged)) {
      const int rank = std::atoi(m[1].str().c_str());
      rank_line(rank, m[2] == "stdout", m[3].str());
      return;
    }
    emit(is_stdout, line);
    // mpirun's account of the first rank it saw end (Open MPI 4 wording):
    //   "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed)."
    //   "The first process to do so was:" / "Process name: [[22260,1],1]" / "Exit code: 5"
    static const std::regex died(R"(process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)( \(([^)]*)\))?)");
    static const std::regex named(R"(Process name: \[\[\d+,\d+\],(\d+)\])");
    static const std::regex exit_code(R"(Exit code: +(\d+))");
    auto says = [&](int rank, const std::string& text) {
      if (rank >= 0 && rank < world && ranks[rank].mpirun_says.empty()) ranks[rank].mpirun_says = text;
    };
    if (std::regex_search(line, m, died))
      says(std::atoi(m[1].str().c_str()), "killed by signal " + m[2].str() + (m[4].matched ? " (" + m[4].str() + ")" : ""));
    else if (std::regex_search(line, m, named))
      mpirun_named = std::atoi(m[1].str().c_str());
    else if (mpirun_named >= 0 && std::regex_search(line, m, exit_code))
      says(std::exchange(mpirun_named, -1), "exit status " + m[1].str());
  }
  void drain(Stream& s, bool at_end) {
    char buffer[8192];
    for (;;) {
      const ssize_t n = ::read(s.fd, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
          ::close(s.fd);
          s.fd = -1;
          at_end = true;
        }
        break;
      }
      s.pending.append(buffer, static_cast<std::size_t>(n));
    }
    std::size_t at;
    while ((at = s.pending.find('\n')) != std::string::npos) {
      const std::string line = s.pending.substr(0, at);
      s.pending.erase(0, at + 1);
      s.mpirun ? mpirun_line(s.is_stdout, line) : rank_line(s.rank, s.is_stdout, line);
    }
    if (at_end && !s.pending.empty()) {
      const std::string line = s.pending;
      s.pending.clear();
      s.mpirun ? mpirun_line(s.is_stdout, line) : rank_line(s.rank, s.is_stdout, line);
    }
  }

  // --- heartbeats ---
  void take(const HeartbeatMessage& m) {
    if (m.rank < 0 || m.rank >= world) return;
    Rank& r = ranks[m.rank];
    if (r.pid < 0) r.pid = m.pid;
    switch (m.type) {
      case HeartbeatMessage::Type::beat:
        r.beat_seen = true;
        r.last_beat = Clock::now();
        r.beat = m;
        break;
      case HeartbeatMessage::Type::fail:
        r.beat_seen = true;
        r.last_beat = Clock::now();
        r.beat = m;  // where it stood when it failed
        r.fail_kind = m.kind;
        r.fail_message = m.message;
        if (!failure) failure = m.kind == "comm" ? from_comm_failure(m.rank) : blame(m.rank, m.message);
        break;
      case HeartbeatMessage::Type::done:
        r.done = true;
        r.done_status = m.exit_status;
        if (m.exit_status == 1) plan_does_not_fit = true;
        break;
    }
  }

  Failure blame(int rank, const std::string& cause) const {
    Failure f;
    f.rank = rank;
    f.cause = cause;
    f.where = ranks[rank].beat;
    f.where_known = ranks[rank].beat_seen;
    return f;
  }

  // A watchdog stopped `reporter`: name the rank that explains it. A rank gone or silent first; else the rank
  // with the fewest collectives issued, if it never reached the collective the reporter waits in.
  Failure from_comm_failure(int reporter) {
    const Rank& rep = ranks[reporter];
    for (int r = 0; r < world; ++r) {
      if (r == reporter) continue;
      const Rank& o = ranks[r];
      if (o.ended && !o.done) return blame(r, ended_cause(r) + "; rank " + std::to_string(reporter) +
                                                  " then stopped: " + rep.fail_message);
      if (o.beat_seen && !o.done && seconds_since(o.last_beat) > 2.5 * kHeartbeatPeriodS)
        return blame(r, "it stopped answering (no heartbeat for " + seconds_text(seconds_since(o.last_beat)) +
                            ") while rank " + std::to_string(reporter) + " waited for it past the collective "
                            "timeout (" + seconds_text(timeout_s) + ")");
    }
    const std::int64_t waited = rep.beat_seen && !rep.beat.collective.empty() ? rep.beat.ordinal : rep.beat.collectives;
    int behind = -1;
    for (int r = 0; r < world; ++r) {
      if (r == reporter || !ranks[r].beat_seen || ranks[r].done) continue;
      if (ranks[r].beat.collectives < waited && (behind < 0 || ranks[r].beat.collectives < ranks[behind].beat.collectives))
        behind = r;
    }
    if (behind >= 0)
      return blame(behind, "it stopped making progress (" + describe(ranks[behind].beat) + ") while rank " +
                               std::to_string(reporter) + " waited for it in " +
                               (rep.beat.collective.empty() ? std::string("a collective") : rep.beat.collective) +
                               " #" + std::to_string(waited) + " past the collective timeout (" +
                               seconds_text(timeout_s) + ")");
    return blame(reporter, rep.fail_message);
  }

  static std::string gib_text(std::int64_t bytes) {
    char text[48];
    std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
    return text;
  }

  static std::string seconds_text(double s) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f s", s);
    return text;
  }

  std::string ended_cause(int rank) const {
    const Rank& r = ranks[rank];
    std::string cause;
    if (r.child) cause = describe_status(r.status);
    else cause = r.mpirun_says.empty() ? "the process vanished without a goodbye (killed)" : r.mpirun_says;
    // Why, in the rank's words: its failure report, else (an exit status, not a signal) its last error line.
    const bool signaled = r.child ? WIFSIGNALED(r.status) : r.mpirun_says.rfind("exit status", 0) != 0;
    if (!r.fail_message.empty()) cause += ": " + r.fail_message;
    else if (!signaled && !r.last_error_line.empty()) cause += ": " + r.last_error_line;
    const bool killed = r.child ? WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGKILL
                                : r.mpirun_says.rfind("killed by signal 9", 0) == 0;
    if (killed && host_memory && host_memory->samples() > 0)
      cause += "; the node's available host memory (MemAvailable) went from " + gib_text(host_memory->first_bytes()) +
               " at launch to " + gib_text(host_memory->lowest_bytes()) +
               " at its lowest (when that nears 0, the kernel's OOM killer ends a process with SIGKILL: see dmesg; "
               "`zeroplan plan` shows the host memory a plan needs)";
    return cause;
  }

  // --- detection ---
  void reap() {
    for (int rank = 0; rank < world; ++rank) {
      Rank& r = ranks[rank];
      if (!r.child || r.ended) continue;
      int status = 0;
      const pid_t got = ::waitpid(r.pid, &status, WNOHANG);
      if (got != r.pid) continue;
      r.ended = true;
      r.status = status;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 1) plan_does_not_fit = true;
      if (!failure && !stopping && !normal_exit(status)) failure = blame(rank, ended_cause(rank));
    }
    if (mpirun > 0 && !mpirun_reaped) {
      int status = 0;
      if (::waitpid(mpirun, &status, WNOHANG) == mpirun) {
        mpirun_reaped = true;
        mpirun_status = status;
      }
    }
    if (mpirun > 0) {
      for (int rank = 0; rank < world; ++rank) {
        Rank& r = ranks[rank];
        if (r.ended || r.pid < 0 || alive(r.pid)) continue;
        r.ended = true;
        r.vanished_at = Clock::now();
        // A rank under mpirun that vanished without a goodbye was killed, or mpirun ended it because another
        // rank ended first (then that one is the failure; a rank that stopped because the plan does not fit
        // is no failure at all).
        if (!r.done && !failure && !stopping && !plan_does_not_fit) {
          Failure f;
          f.vanished = true;
          failure = f;
        }
      }
    }
  }

  void check_deadlines() {
    if (failure || stopping) return;
    for (int rank = 0; rank < world; ++rank) {
      const Rank& r = ranks[rank];
      if (r.ended || r.done) continue;
      if (!r.beat_seen) {
        if (seconds_since(started) > deadlines.first_beat_s)
          failure = blame(rank, "it never reported (no heartbeat within " + seconds_text(deadlines.first_beat_s) +
                                    " of the start)");
      } else if (seconds_since(r.last_beat) > deadlines.silence_s) {
        failure = blame(rank, "it stopped answering: no heartbeat for " + seconds_text(seconds_since(r.last_beat)) +
                                  " (the deadline is the collective timeout, at most 30 s)");
      } else if (!r.beat.collective.empty() &&
                 r.beat.seconds_in_state + seconds_since(r.last_beat) > deadlines.stuck_s) {
        failure = blame(rank, "it waited in " + r.beat.collective + " #" + std::to_string(r.beat.ordinal) + " for " +
                                  seconds_text(r.beat.seconds_in_state) +
                                  ", past the collective timeout, and its watchdog did not stop it");
      }
      if (failure) return;
    }
    if (mpirun > 0 && mpirun_reaped && !normal_exit(mpirun_status) && !plan_does_not_fit) {
      // mpirun ended the run without any rank telling us why: its own messages (relayed above) say more.
      Failure f;
      f.vanished = true;
      failure = f;
    }
  }

  // --- stopping ---
  void signal_all(int signal) {
    for (const Rank& r : ranks)
      if (r.pid > 0 && !r.ended) ::kill(r.pid, signal);
    if (mpirun > 0 && !mpirun_reaped) ::kill(mpirun, signal);
  }

  bool everything_gone() const {
    if (mpirun > 0 && !mpirun_reaped) return false;
    for (const Rank& r : ranks) {
      if (r.child && !r.ended) return false;
      if (!r.child && r.pid > 0 && alive(r.pid)) return false;
    }
    return true;
  }

  // Ranks orphaned by a dying mpirun came back to this subreaper; and a rank pid learnt from heartbeats may
  // outlive mpirun. Kill and reap all of them (our own ranks and mpirun are reaped by reap(), which keeps
  // their exit statuses).
  void sweep() {
    for (const Rank& r : ranks)
      if (!r.child && r.pid > 0 && alive(r.pid)) ::kill(r.pid, SIGKILL);
    for (pid_t orphan : own_children()) {
      bool known = orphan == mpirun;
      for (const Rank& r : ranks) known |= r.child && r.pid == orphan;
      if (known) continue;
      ::kill(orphan, SIGKILL);
      int status = 0;
      ::waitpid(orphan, &status, 0);
    }
  }

  // The first rank to vanish under mpirun: the one mpirun names, else the first seen gone.
  Failure first_vanished() const {
    int first = -1;
    for (int r = 0; r < world && first < 0; ++r)
      if (!ranks[r].mpirun_says.empty()) first = r;
    for (int r = 0; r < world; ++r) {
      if (first >= 0) break;
      const Rank& o = ranks[r];
      if (!o.ended || o.done) continue;
      first = r;
      for (int q = r + 1; q < world; ++q)
        if (ranks[q].ended && !ranks[q].done && ranks[q].vanished_at < ranks[first].vanished_at) first = q;
    }
    if (first >= 0) return blame(first, "");
    Failure f;
    f.cause = "mpirun ended the run (" + describe_status(mpirun_status) + ") without naming a rank";
    return f;
  }

  std::string final_message() const {
    const Failure f = failure->vanished ? first_vanished() : *failure;
    std::string text = "zeroplan run: ";
    if (f.rank < 0) return text + f.cause + "; every rank was stopped";
    text += "rank " + std::to_string(f.rank) + " of " + std::to_string(world) + " failed";
    if (!f.where_known) text += " during start-up (before its first heartbeat)";
    else if (f.where.step == 0) text += " during start-up (phase " + f.where.phase + ")";
    else {
      text += " at step " + std::to_string(f.where.step) + " (phase " + f.where.phase;
      if (!f.where.collective.empty()) text += ", in " + f.where.collective + " #" + std::to_string(f.where.ordinal);
      text += ")";
    }
    const std::string cause = f.cause.empty() ? ended_cause(f.rank) : f.cause;
    return text + ": " + cause + "; every rank was stopped";
  }
};

RankSupervisor::RankSupervisor(int world, double collective_timeout_s, HeartbeatListener& heartbeats)
    : state_(std::make_unique<State>(world, collective_timeout_s, heartbeats)) {
  // Ranks orphaned by a dying mpirun become our children, so they can be killed and reaped (prctl(2)).
  ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
}

RankSupervisor::~RankSupervisor() {
  for (const State::Stream& s : state_->streams)
    if (s.fd >= 0) ::close(s.fd);
}

namespace {
// The loop reads whatever a pipe holds and goes on: non-blocking reads.
void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }
}  // namespace

void RankSupervisor::add_rank_process(int rank, pid_t pid, int stdout_fd, int stderr_fd) {
  set_nonblocking(stdout_fd);
  set_nonblocking(stderr_fd);
  State::Rank& r = state_->ranks.at(static_cast<std::size_t>(rank));
  r.pid = pid;
  r.child = true;
  state_->streams.push_back({stdout_fd, false, true, rank, {}});
  state_->streams.push_back({stderr_fd, false, false, rank, {}});
}

void RankSupervisor::add_mpirun(pid_t pid, int stdout_fd, int stderr_fd) {
  set_nonblocking(stdout_fd);
  set_nonblocking(stderr_fd);
  state_->mpirun = pid;
  state_->streams.push_back({stdout_fd, true, true, -1, {}});
  state_->streams.push_back({stderr_fd, true, false, -1, {}});
}

int RankSupervisor::run() {
  State& s = *state_;
  s.host_memory.emplace(std::chrono::milliseconds(50));
  std::optional<Clock::time_point> gone_at;
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<State::Stream*> owners;
    for (State::Stream& stream : s.streams)
      if (stream.fd >= 0) fds.push_back({stream.fd, POLLIN, 0}), owners.push_back(&stream);
    fds.push_back({s.heartbeats.fd(), POLLIN, 0});
    ::poll(fds.data(), fds.size(), 100);
    for (std::size_t i = 0; i < owners.size(); ++i)
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) s.drain(*owners[i], false);
    for (const HeartbeatMessage& m : s.heartbeats.receive()) s.take(m);
    s.reap();
    s.check_deadlines();
    const auto grace = std::chrono::milliseconds(static_cast<long long>(s.deadlines.grace_s * 1000));
    if (s.failure && s.stop == State::Stop::running) {
      // Stop every rank now: the ones still running would wait in a collective for a peer that is gone.
      s.stopping = true;
      if (s.mpirun > 0) {
        s.stop = State::Stop::mpirun_teardown;
      } else {
        s.signal_all(SIGTERM);
        s.stop = State::Stop::terminated;
      }
      s.next_stage_at = Clock::now() + grace;
    }
    if (s.stop == State::Stop::mpirun_teardown && Clock::now() > s.next_stage_at) {
      s.signal_all(SIGTERM);
      s.stop = State::Stop::terminated;
      s.next_stage_at = Clock::now() + grace;
    }
    if (s.stop == State::Stop::terminated && Clock::now() > s.next_stage_at) {
      s.signal_all(SIGKILL);
      s.sweep();
      s.stop = State::Stop::killed;
    }
    if (s.everything_gone()) {
      if (!gone_at) gone_at = Clock::now();
      bool streams_open = false;
      for (const State::Stream& stream : s.streams) streams_open |= stream.fd >= 0;
      // The pipes close with their last writer; an orphan holding one is swept below after a short wait.
      if (!streams_open || seconds_since(*gone_at) > 2) break;
    }
  }
  for (State::Stream& stream : s.streams)
    if (stream.fd >= 0) s.drain(stream, true);
  s.sweep();
  for (const HeartbeatMessage& m : s.heartbeats.receive()) s.take(m);
  if (s.failure) {
    std::cerr << s.final_message() << '\n' << std::flush;
    return 2;
  }
  return s.plan_does_not_fit ? 1 : 0;
}

}  // namespace zeroplan
