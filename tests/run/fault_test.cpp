// A failing rank ends the whole run: the zeroplan binary on the CPU backend over MPI, 2 and 4 ranks, started
// both ways (`zeroplan run --gpus N`, whose launcher runs mpirun and watches the ranks, and `mpirun -np N
// zeroplan run`), with one rank made to fail by the test-only switch ZEROPLAN_TEST_FAULT (run/fault_injection.h)
// or by a real `kill -9`. Each test checks that every process of the run is gone within 60 s of the fault, that
// the messages name the failed rank and the cause, that the exit status is non-zero and that no process is left
// (every process of a run carries a marker in its environment, which mpirun passes on to its ranks; the ranks
// sit in process groups of their own, so the marker, not the group, finds them). A clean run is unchanged.
//
// No test can hang CI: every run has a hard limit (90 s), after which all its processes are killed and the
// test fails.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const std::string kTinyModel = std::string(ZEROPLAN_SOURCE_DIR) + "/tests/cli/data/tiny-gpt2.json";
constexpr const char* kMarker = "ZEROPLAN_FAULT_TEST_MARKER";
constexpr double kHardLimitS = 90;  // a run still alive then is killed and the test fails
constexpr double kAllGoneS = 60;    // the bound: every rank gone within 60 s of the fault

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The NUL-separated environment of a process, or empty when it is gone (or a zombie).
std::vector<std::string> environment_of(pid_t pid) {
  std::vector<std::string> vars;
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  std::string var;
  while (std::getline(in, var, '\0')) vars.push_back(var);
  return vars;
}

// Every live process whose environment carries this marker; with `rank` >= 0, only that rank's (its MPI rank,
// or the rank our launcher gave it).
std::vector<pid_t> marked(const std::string& marker, int rank = -1) {
  std::vector<pid_t> found;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    const std::vector<std::string> vars = environment_of(pid);
    bool mine = false, rank_matches = rank < 0;
    for (const std::string& v : vars) {
      mine |= v == std::string(kMarker) + "=" + marker;
      if (rank >= 0) rank_matches |= v == "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
    }
    if (mine && rank_matches) found.push_back(pid);
  }
  return found;
}

struct Started {
  pid_t pid = -1;
  std::string marker;
  fs::path out, err;
  Clock::time_point started;
};

struct Ended {
  bool in_time = false;           // the top process and every marked process ended within the hard limit
  int status = -1;                // the top process's waitpid status
  Clock::time_point all_gone;     // when the last process of the run was seen gone
  std::vector<pid_t> left_behind; // marked processes alive 10 s after the top process ended (then killed)
  std::string out, err;
};

fs::path temp_dir() {
  const fs::path dir = fs::temp_directory_path() / ("zeroplan_fault_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

// Starts argv with `fault` in ZEROPLAN_TEST_FAULT (none when empty), in a process group of its own, output to
// files, and a fresh marker in the environment.
Started start(const std::vector<std::string>& argv, const std::string& fault, const std::string& name) {
  static int counter = 0;
  Started run;
  run.marker = std::to_string(::getpid()) + "-" + std::to_string(++counter);
  run.out = temp_dir() / (name + ".out");
  run.err = temp_dir() / (name + ".err");
  run.started = Clock::now();
  run.pid = ::fork();
  if (run.pid == 0) {
    ::setpgid(0, 0);
    if (!std::freopen(run.out.c_str(), "w", stdout) || !std::freopen(run.err.c_str(), "w", stderr)) ::_exit(126);
    ::setenv(kMarker, run.marker.c_str(), 1);
    if (fault.empty()) ::unsetenv("ZEROPLAN_TEST_FAULT");
    else ::setenv("ZEROPLAN_TEST_FAULT", fault.c_str(), 1);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  return run;
}

void kill_everything(const Started& run) {
  ::kill(-run.pid, SIGKILL);
  for (pid_t pid : marked(run.marker)) ::kill(pid, SIGKILL);
}

// Waits until the run's top process has ended and no marked process is left, at most the hard limit.
Ended wait_until_gone(const Started& run) {
  Ended e;
  std::optional<Clock::time_point> top_ended;
  for (;;) {
    if (!top_ended) {
      int status = 0;
      if (::waitpid(run.pid, &status, WNOHANG) == run.pid) {
        e.status = status;
        top_ended = Clock::now();
      }
    }
    if (top_ended) {
      const std::vector<pid_t> alive = marked(run.marker);
      if (alive.empty()) {
        e.in_time = true;
        e.all_gone = Clock::now();
        break;
      }
      if (seconds(Clock::now() - *top_ended) > 10) {
        e.left_behind = alive;
        e.all_gone = Clock::now();
        kill_everything(run);
        break;
      }
    }
    if (seconds(Clock::now() - run.started) > kHardLimitS) {
      kill_everything(run);
      if (!top_ended) ::waitpid(run.pid, &e.status, 0);
      e.all_gone = Clock::now();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  e.out = read_file(run.out);
  e.err = read_file(run.err);
  std::error_code ignored;
  fs::remove(run.out, ignored);
  fs::remove(run.err, ignored);
  fs::remove(temp_dir(), ignored);  // once empty
  return e;
}

// When `text` first appears in the file (polled every 10 ms), or nullopt when the run ends first or the hard
// limit passes.
std::optional<Clock::time_point> wait_for_text(const Started& run, const fs::path& file, const std::string& text) {
  while (seconds(Clock::now() - run.started) < kHardLimitS) {
    if (read_file(file).find(text) != std::string::npos) return Clock::now();
    if (::kill(run.pid, 0) != 0) return std::nullopt;
    int status = 0;
    if (::waitpid(run.pid, &status, WNOHANG) == run.pid) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return std::nullopt;
}

enum class Launch { launcher, mpirun };

std::vector<std::string> command(Launch launch, int ranks, int steps, double collective_timeout_s) {
  std::vector<std::string> argv;
  if (launch == Launch::mpirun)
    argv = {ZEROPLAN_MPIEXEC, "-np", std::to_string(ranks), "--oversubscribe", "--allow-run-as-root"};
  argv.push_back(ZEROPLAN_BINARY);
  for (const char* a : {"run", "--model"}) argv.push_back(a);
  argv.push_back(kTinyModel);
  for (const char* a : {"--backend", "cpu", "--micro-batch", "2", "--seq", "32", "--steps"}) argv.push_back(a);
  argv.push_back(std::to_string(steps));
  argv.push_back("--collective-timeout");
  std::ostringstream t;
  t << collective_timeout_s;
  argv.push_back(t.str());
  if (launch == Launch::launcher) {
    argv.push_back("--gpus");
    argv.push_back(std::to_string(ranks));
  }
  return argv;
}

// Injected (hang, error, oom, exit), or done by the test to the rank's pid once step 3 is done: kill -9, and
// SIGSTOP (a frozen process: no heartbeat, no answer to its peers' watchdogs).
enum class Fault { hang, error, oom, exit, kill9, sigstop };

struct Case {
  Fault fault;
  Launch launch;
  int ranks;
};

std::string name_of(const Case& c) {
  const char* faults[] = {"Hang", "Error", "Oom", "Exit", "Kill9", "Sigstop"};
  return std::string(faults[static_cast<int>(c.fault)]) + (c.launch == Launch::launcher ? "ViaLauncher" : "ViaMpirun") +
         std::to_string(c.ranks) + "Ranks";
}

// The rank that fails: the last but one, so neither rank 0 (which prints the run) nor an edge.
int failing_rank(int ranks) { return ranks - 2 >= 1 ? ranks - 2 : 1; }

class RankFailure : public ::testing::TestWithParam<Case> {};

TEST_P(RankFailure, EveryRankIsGoneWithinSixtySecondsAndTheMessageNamesTheRankAndTheCause) {
  const Case c = GetParam();
  const int rank = failing_rank(c.ranks);
  constexpr int kFaultStep = 3;
  // Hangs wait for the collective timeout: 5 s keeps the test short. A kill -9 needs a run that is still going
  // when the test kills the rank: enough steps that it cannot end first (the tiny model takes milliseconds
  // per step; the run is stopped at step 3).
  const double timeout_s = 5;
  const bool by_test = c.fault == Fault::kill9 || c.fault == Fault::sigstop;
  const int steps = by_test ? 100000 : 6;
  const char* kinds[] = {"hang", "error", "oom", "exit"};
  const std::string fault = by_test ? "" : std::string(kinds[static_cast<int>(c.fault)]) + ":" + std::to_string(rank) +
                                               ":" + std::to_string(kFaultStep);
  const Started run = start(command(c.launch, c.ranks, steps, timeout_s), fault, name_of(c));

  std::optional<Clock::time_point> fault_at;
  if (by_test) {
    // Rank 0 prints "step    3/100000" when step 3 is done; then signal the failing rank by its pid.
    if (wait_for_text(run, run.out, "step    3/")) {
      std::vector<pid_t> pids;
      for (int tries = 0; tries < 100 && pids.empty(); ++tries) {
        pids = marked(run.marker, rank);
        if (pids.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      ASSERT_EQ(pids.size(), 1u) << "rank " << rank << "'s process";
      ASSERT_EQ(::kill(pids[0], c.fault == Fault::kill9 ? SIGKILL : SIGSTOP), 0);
      fault_at = Clock::now();
    }
  } else {
    fault_at = wait_for_text(run, run.err, "ZEROPLAN_TEST_FAULT=" + std::string(kinds[static_cast<int>(c.fault)]));
  }
  const Ended e = wait_until_gone(run);
  const std::string all = e.out + e.err;
  ASSERT_TRUE(fault_at) << "the fault never happened\n" << all;
  ASSERT_TRUE(e.in_time) << "still running after " << kHardLimitS << " s\n" << all;
  const double gone_s = seconds(e.all_gone - *fault_at);
  std::printf("  %s: every process gone %.2f s after the fault\n", name_of(c).c_str(), gone_s);
  EXPECT_LT(gone_s, kAllGoneS) << all;
  EXPECT_TRUE(e.left_behind.empty()) << e.left_behind.size() << " process(es) left behind\n" << all;
  EXPECT_FALSE(WIFEXITED(e.status) && WEXITSTATUS(e.status) == 0) << "exit status 0 after a failure\n" << all;

  // The message: which rank, and why.
  const std::string who = "rank " + std::to_string(rank);
  std::vector<std::string> why;
  switch (c.fault) {
    case Fault::hang: why = {"stopped making progress"}; break;
    case Fault::error: why = {"MPI error", "MPI_ERR_COUNT"}; break;
    case Fault::oom: why = {"out of host memory"}; break;
    case Fault::exit:
    case Fault::kill9: why = {"signal 9"}; break;
    case Fault::sigstop: why = {"stopped answering"}; break;
  }
  if (c.launch == Launch::launcher) {
    // The launcher's one line, last: "zeroplan run: rank R of N failed at step S (...): CAUSE; every rank ..."
    const std::size_t at = e.err.rfind("zeroplan run: rank ");
    ASSERT_NE(at, std::string::npos) << all;
    const std::string line = e.err.substr(at, e.err.find('\n', at) - at);
    // A rank killed or frozen by the test is named at the step its last heartbeat reported (3 or a later one).
    const std::string head = "zeroplan run: " + who + " of " + std::to_string(c.ranks) + " failed at step " +
                             (by_test ? "" : std::to_string(kFaultStep) + " ");
    EXPECT_EQ(line.rfind(head, 0), 0u) << line;
    // A rank ended by SIGKILL: the node's available host memory beside it (the OOM killer's signal).
    if (c.fault == Fault::kill9) why.push_back("available host memory (MemAvailable) went from");
    for (const std::string& w : why) EXPECT_NE(line.find(w), std::string::npos) << "no '" << w << "' in: " << line;
    EXPECT_NE(line.find("every rank was stopped"), std::string::npos) << line;
    EXPECT_EQ(e.err.substr(at).find('\n'), e.err.size() - at - 1) << "the launcher's line is the last";
  } else {
    // Under a plain mpirun the lines come from the ranks and from mpirun: the failed rank's own line, or the
    // watchdog of a rank that waited for it, or mpirun's account of a rank killed by a signal.
    if (c.fault == Fault::hang) why = {who + " never reached it", "did not complete within 5 s"};
    else if (c.fault == Fault::exit || c.fault == Fault::kill9) why = {"process " + who + " with PID", "signal 9"};
    else if (c.fault == Fault::sigstop) why = {"rank(s) " + std::to_string(rank) + " did not answer"};
    else why.push_back(who + " of " + std::to_string(c.ranks) + " failed at step " + std::to_string(kFaultStep));
    for (const std::string& w : why) EXPECT_NE(e.err.find(w), std::string::npos) << "no '" << w << "' in:\n" << all;
  }
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (Fault f : {Fault::hang, Fault::error, Fault::oom, Fault::exit, Fault::kill9})
    for (Launch l : {Launch::launcher, Launch::mpirun})
      for (int ranks : {2, 4}) cases.push_back({f, l, ranks});
  for (Launch l : {Launch::launcher, Launch::mpirun}) cases.push_back({Fault::sigstop, l, 2});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(CpuBackendOverMpi, RankFailure, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return name_of(info.param); });

// The step lines rank 0 prints ("step    1/4 | loss 5.5429 | ..."), loss only (times differ run to run).
std::vector<std::string> losses(const std::string& out) {
  std::vector<std::string> found;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("step ", 0) == 0 && line.find("| loss") != std::string::npos)
      found.push_back(line.substr(0, line.find(" | ", line.find("loss"))));
  return found;
}

TEST(CleanRun, BothLaunchesTrainTheSameAndLeaveNothingBehind) {
  for (int ranks : {2, 4}) {
    std::vector<std::string> seen[2];
    for (Launch l : {Launch::launcher, Launch::mpirun}) {
      const Started run = start(command(l, ranks, 4, 300), "", "clean" + std::to_string(ranks));
      const Ended e = wait_until_gone(run);
      ASSERT_TRUE(e.in_time) << e.out << e.err;
      EXPECT_TRUE(WIFEXITED(e.status) && WEXITSTATUS(e.status) == 0) << e.out << e.err;
      EXPECT_TRUE(e.left_behind.empty());
      EXPECT_EQ(e.err.find("failed"), std::string::npos) << e.err;
      seen[static_cast<int>(l)] = losses(e.out);
    }
    ASSERT_EQ(seen[0].size(), 4u);
    EXPECT_EQ(seen[0], seen[1]) << "the launcher's run and mpirun's run print the same losses";
  }
}

TEST(FaultSwitch, AMalformedValueIsAnInputErrorNamingTheVariable) {
  for (const char* bad : {"melt:1:3", "hang:2:3", "hang:1:99", "hang:1", "hang:x:3"}) {
    const Started run = start(command(Launch::launcher, 2, 6, 300), bad, "malformed");
    const Ended e = wait_until_gone(run);
    ASSERT_TRUE(e.in_time);
    EXPECT_TRUE(WIFEXITED(e.status) && WEXITSTATUS(e.status) == 2) << bad << ": " << e.err;
    EXPECT_NE(e.err.find("ZEROPLAN_TEST_FAULT"), std::string::npos) << bad << ": " << e.err;
    EXPECT_EQ(e.err.find('\n'), e.err.size() - 1) << "one line: " << e.err;
  }
}

TEST(CollectiveTimeout, OutOfRangeIsAnInputErrorNamingTheFlag) {
  for (const char* bad : {"0", "-5", "0.5", "1e9", "nan"}) {
    std::vector<std::string> argv = command(Launch::launcher, 2, 6, 300);
    argv[argv.size() - 3] = bad;  // the value after --collective-timeout
    const Started run = start(argv, "", "timeout_flag");
    const Ended e = wait_until_gone(run);
    ASSERT_TRUE(e.in_time);
    EXPECT_TRUE(WIFEXITED(e.status) && WEXITSTATUS(e.status) == 2) << bad << ": " << e.err;
    EXPECT_NE(e.err.find("--collective-timeout"), std::string::npos) << bad << ": " << e.err;
  }
}

}  // namespace
