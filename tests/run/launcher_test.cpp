// The launcher's watch over ranks that are its own children: the CUDA backend's launch path
// (launch_local_ranks), which CI cannot run with real GPUs. The ranks here are stand-ins: this test binary,
// started by the launcher with ZEROPLAN_RANK/ZEROPLAN_WORLD_SIZE set, runs a scenario with the real rank side
// (run/rank_guard.h: progress, heartbeats, failure path) and fails the way the scenario says; a stand-in that
// "waits in a collective" marks it in its progress as the NCCL communicator's watchdog does. Each test checks
// the exit status, the launcher's one line (rank, step, cause), the time until every process is gone, and that
// none is left behind (a marker in the environment, inherited by every stand-in).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "exec/comm/collective_watchdog.h"
#include "run/launcher.h"
#include "run/rank_guard.h"
#include "run/rank_heartbeat.h"
#include "run/rank_supervisor.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr double kTimeoutS = 3;  // the collective timeout the launcher derives its deadlines from
constexpr const char* kMarker = "ZEROPLAN_LAUNCHER_TEST_MARKER";

[[noreturn]] void wait_forever() {
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

// A stand-in rank: three steps of 50 ms, rank 1 (or the last rank, for "hang") failing at step 2 as `scenario`
// says; the other ranks then wait in a collective, as they would for a peer that is gone.
int stand_in_rank(const std::string& scenario) {
  const zeroplan::RankEnvironment env = zeroplan::rank_environment();
  zeroplan::RankGuard guard(env.rank, env.world, 3, kTimeoutS, "cuda");
  const int failing = scenario == "hang" ? env.world - 1 : 1;
  if (scenario == "plan-does-not-fit") {
    guard.done(1);
    return 1;
  }
  if (scenario == "ignores-sigterm" && env.rank == 0) ::signal(SIGTERM, SIG_IGN);
  for (std::int64_t step = 1; step <= 3; ++step) {
    guard.before_step(step);
    std::printf("stand-in rank %d step %lld\n", env.rank, static_cast<long long>(step));
    std::fflush(stdout);
    if (step == 2 && scenario != "clean") {
      if (env.rank == failing) {
        if (scenario == "exit-status" || scenario == "ignores-sigterm") {
          std::fprintf(stderr, "stand-in: something broke\n");
          return 3;
        }
        if (scenario == "killed") ::raise(SIGKILL);
        if (scenario == "error") return guard.fail("stand-in CUDA error: an illegal memory access");
        if (scenario == "frozen") ::raise(SIGSTOP);
        wait_forever();  // "hang": outside any collective
      }
      // The peers wait in the step's first collective; in "hang", rank 0's watchdog gives up after the timeout.
      zeroplan::exec::RankProgress& p = guard.progress();
      p.set_waiting("all_reduce", p.count_collective());
      if (scenario == "hang" && env.rank == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<long long>(kTimeoutS * 1000)));
        zeroplan::exec::report_comm_failure(guard.comm_watch(), "rank 0: all_reduce #1 did not complete within 3 s");
        std::_Exit(2);
      }
      wait_forever();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  guard.done(0);
  return 0;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<pid_t> marked(const std::string& marker) {
  std::vector<pid_t> found;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "environ", std::ios::binary);
    std::string var;
    while (std::getline(in, var, '\0'))
      if (var == std::string(kMarker) + "=" + marker) found.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return found;
}

struct Launched {
  bool in_time = false;
  int status = -1;
  double seconds = 0;  // from the launch until every process was gone
  std::vector<pid_t> left_behind;
  std::string out, err;
};

// Runs launch_local_ranks in a child of this test (its output to files), at most 60 s.
Launched launch(const std::string& scenario, int world) {
  static int counter = 0;
  const std::string marker = std::to_string(::getpid()) + "-" + std::to_string(++counter);
  const fs::path dir = fs::temp_directory_path() / ("zeroplan_launcher_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path out = dir / (scenario + ".out"), err = dir / (scenario + ".err");
  const Clock::time_point started = Clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (!std::freopen(out.c_str(), "w", stdout) || !std::freopen(err.c_str(), "w", stderr)) ::_exit(126);
    ::setenv(kMarker, marker.c_str(), 1);
    ::_exit(zeroplan::launch_local_ranks({"stand-in", scenario}, world, "", kTimeoutS));
  }
  Launched l;
  bool reaped = false;
  for (;;) {
    if (!reaped && ::waitpid(pid, &l.status, WNOHANG) == pid) reaped = true;
    if (reaped) {
      const std::vector<pid_t> alive = marked(marker);
      if (alive.empty()) {
        l.in_time = true;
        break;
      }
      l.left_behind = alive;
    }
    if (std::chrono::duration<double>(Clock::now() - started).count() > 60) {
      ::kill(pid, SIGKILL);
      for (pid_t p : marked(marker)) ::kill(p, SIGKILL);
      if (!reaped) ::waitpid(pid, &l.status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  l.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  l.out = read_file(out);
  l.err = read_file(err);
  std::error_code ignored;
  fs::remove(out, ignored);
  fs::remove(err, ignored);
  fs::remove(dir, ignored);  // once empty
  std::printf("  %s: every process gone %.2f s after the launch\n", scenario.c_str(), l.seconds);
  return l;
}

int exit_status(const Launched& l) { return WIFEXITED(l.status) ? WEXITSTATUS(l.status) : -1; }

// The launcher's last line.
std::string final_line(const Launched& l) {
  const std::size_t at = l.err.rfind("zeroplan run: ");
  return at == std::string::npos ? std::string() : l.err.substr(at, l.err.find('\n', at) - at);
}

void expect_failure(const Launched& l, const std::string& head, const std::vector<std::string>& why) {
  ASSERT_TRUE(l.in_time) << l.out << l.err;
  EXPECT_EQ(exit_status(l), 2) << l.err;
  EXPECT_TRUE(l.left_behind.empty());
  const std::string line = final_line(l);
  EXPECT_EQ(line.rfind(head, 0), 0u) << line;
  for (const std::string& w : why) EXPECT_NE(line.find(w), std::string::npos) << "no '" << w << "' in: " << line;
  EXPECT_NE(line.find("every rank was stopped"), std::string::npos) << line;
}

TEST(LocalRanks, ACleanRunRelaysEveryRankAndExitsZero) {
  const Launched l = launch("clean", 2);
  ASSERT_TRUE(l.in_time);
  EXPECT_EQ(exit_status(l), 0) << l.err;
  EXPECT_NE(l.out.find("\nstand-in rank 0 step 3\n"), std::string::npos) << l.out;  // rank 0 as it is
  EXPECT_NE(l.out.find("[rank 1] stand-in rank 1 step 3\n"), std::string::npos) << l.out;
  EXPECT_EQ(l.err.find("failed"), std::string::npos) << l.err;
}

TEST(LocalRanks, RanksThatStopBecauseThePlanDoesNotFitAreNoFailure) {
  const Launched l = launch("plan-does-not-fit", 2);
  ASSERT_TRUE(l.in_time);
  EXPECT_EQ(exit_status(l), 1) << l.err;
  EXPECT_EQ(l.err.find("failed"), std::string::npos) << l.err;
}

TEST(LocalRanks, AnExitStatusIsNamedWithTheRanksLastErrorLine) {
  expect_failure(launch("exit-status", 2), "zeroplan run: rank 1 of 2 failed at step 2 (phase step)",
                 {"exit status 3", "stand-in: something broke"});
}

TEST(LocalRanks, AKilledRankIsNamedWithItsSignal) {
  // With the node's available host memory beside it: the OOM killer's signal is SIGKILL.
  expect_failure(launch("killed", 4), "zeroplan run: rank 1 of 4 failed at step 2",
                 {"killed by signal 9 (Killed)", "available host memory (MemAvailable) went from",
                  "GiB at launch to", "GiB at its lowest"});
}

TEST(LocalRanks, ARankReportingItsErrorIsNamedWithIt) {
  expect_failure(launch("error", 2), "zeroplan run: rank 1 of 2 failed at step 2 (phase step)",
                 {"stand-in CUDA error: an illegal memory access"});
}

TEST(LocalRanks, AWatchdogTimeoutNamesTheRankThatNeverReachedTheCollective) {
  // Rank 2 hangs outside any collective; ranks 0 and 1 wait in all_reduce #1; rank 0's watchdog reports.
  const Launched l = launch("hang", 3);
  expect_failure(l, "zeroplan run: rank 2 of 3 failed at step 2 (phase step)",
                 {"it stopped making progress", "while rank 0 waited for it in all_reduce #1"});
  EXPECT_LT(l.seconds, kTimeoutS + 5);
}

TEST(LocalRanks, AFrozenRankIsNamedWhenItsHeartbeatsStop) {
  // SIGSTOP: no heartbeat after the silence deadline (the collective timeout here); SIGTERM cannot end a
  // stopped process, so this also takes the SIGKILL after the grace period.
  const Launched l = launch("frozen", 2);
  expect_failure(l, "zeroplan run: rank 1 of 2 failed at step 2", {"stopped answering: no heartbeat for"});
  const zeroplan::SupervisionDeadlines d = zeroplan::supervision_deadlines(kTimeoutS);
  EXPECT_LT(l.seconds, d.silence_s + d.grace_s + 5);
}

TEST(LocalRanks, ARankIgnoringSigtermIsKilledAfterTheGracePeriod) {
  const Launched l = launch("ignores-sigterm", 2);
  expect_failure(l, "zeroplan run: rank 1 of 2 failed at step 2", {"exit status 3"});
  const zeroplan::SupervisionDeadlines d = zeroplan::supervision_deadlines(kTimeoutS);
  EXPECT_GE(l.seconds, d.grace_s);
  EXPECT_LT(l.seconds, d.grace_s + 5);
}

TEST(Heartbeat, MessagesRoundTripAndForeignDatagramsAreRefused) {
  zeroplan::HeartbeatMessage m;
  m.type = zeroplan::HeartbeatMessage::Type::fail;
  m.rank = 3;
  m.pid = 4242;
  m.step = 17;
  m.phase = "backward";
  m.collectives = 99;
  m.collective = "all_reduce (host scalars)";
  m.ordinal = 98;
  m.seconds_in_state = 2.5;
  m.kind = "comm";
  m.message = "line one\twith a tab\nand a newline";
  const auto back = zeroplan::decode(zeroplan::encode(m));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->type, m.type);
  EXPECT_EQ(back->rank, 3);
  EXPECT_EQ(back->pid, 4242);
  EXPECT_EQ(back->step, 17);
  EXPECT_EQ(back->phase, "backward");
  EXPECT_EQ(back->collectives, 99);
  EXPECT_EQ(back->collective, "all_reduce (host scalars)");
  EXPECT_EQ(back->ordinal, 98);
  EXPECT_DOUBLE_EQ(back->seconds_in_state, 2.5);
  EXPECT_EQ(back->message, "line one with a tab and a newline");  // one field, one line
  for (const char* foreign : {"", "beat", "beat\t1\t2", "fail\t1\t2\tcomm", "done\tx\t2\t0", "done\t1\t-2\t0",
                              "hello\t1\t2\t3"})
    EXPECT_FALSE(zeroplan::decode(foreign)) << foreign;
}

TEST(Heartbeat, DeadlinesDeriveFromTheCollectiveTimeout) {
  const zeroplan::SupervisionDeadlines small = zeroplan::supervision_deadlines(1);
  EXPECT_EQ(small.silence_s, 3 * zeroplan::kHeartbeatPeriodS);  // never below three missed beats
  const zeroplan::SupervisionDeadlines standard = zeroplan::supervision_deadlines(zeroplan::exec::kDefaultCollectiveTimeoutS);
  EXPECT_EQ(standard.silence_s, 30);  // a frozen rank is named in 30 s, not after the whole timeout
  EXPECT_GT(standard.stuck_s, zeroplan::exec::kDefaultCollectiveTimeoutS);
}

}  // namespace

int main(int argc, char** argv) {
  // Started by launch_local_ranks: be a stand-in rank.
  if (std::getenv("ZEROPLAN_WORLD_SIZE") && argc > 1) return stand_in_rank(argv[1]);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
