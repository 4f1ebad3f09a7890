#include "run/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>

#include "run/process_memory.h"
#include "run/rank_heartbeat.h"
#include "run/rank_supervisor.h"

namespace zeroplan {

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > 1 << 20)
    throw std::invalid_argument(std::string("environment variable ") + name + ": expected a rank number, got '" + v +
                                "'");
  return static_cast<int>(x);
}

std::string self_executable() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error("cannot read /proc/self/exe to start the ranks");
  buf[n] = '\0';
  return buf;
}

[[noreturn]] void exec_or_die(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "zeroplan: cannot start %s: %s\n", argv[0], std::strerror(errno));
  _exit(127);
}

// In a child about to exec: die with the launcher (PR_SET_PDEATHSIG), also when it died before this call.
void die_with_parent(pid_t launcher, int signal) {
  ::prctl(PR_SET_PDEATHSIG, signal, 0, 0, 0);
  if (::getppid() != launcher) ::_exit(127);
}

struct Pipes {
  int out[2] = {-1, -1}, err[2] = {-1, -1};
  Pipes() {
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
      throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  }
  // In the child: standard output and error into the pipes (dup2 clears close-on-exec on the copies).
  void attach_child() {
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
  }
  // In the parent: keep the read ends.
  void keep_read_ends() {
    ::close(out[1]);
    ::close(err[1]);
  }
};

}  // namespace

RankEnvironment rank_environment() {
  RankEnvironment e;
  if (std::getenv("ZEROPLAN_WORLD_SIZE")) {
    e.launched = true;
    e.world = env_int("ZEROPLAN_WORLD_SIZE", 1);
    e.rank = env_int("ZEROPLAN_RANK", 0);
    e.local_rank = env_int("ZEROPLAN_LOCAL_RANK", e.rank);
    if (const char* id = std::getenv("ZEROPLAN_NCCL_ID")) e.nccl_id_hex = id;
  } else if (std::getenv("OMPI_COMM_WORLD_SIZE")) {
    e.launched = e.by_mpi = true;
    e.world = env_int("OMPI_COMM_WORLD_SIZE", 1);
    e.rank = env_int("OMPI_COMM_WORLD_RANK", 0);
    e.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0);
  } else if (std::getenv("PMI_SIZE")) {
    e.launched = e.by_mpi = true;
    e.world = env_int("PMI_SIZE", 1);
    e.rank = env_int("PMI_RANK", 0);
    e.local_rank = env_int("MPI_LOCALRANKID", 0);
  }
  if (e.world < 1 || e.rank >= e.world)
    throw std::invalid_argument("rank " + std::to_string(e.rank) + " is outside a world of " + std::to_string(e.world));
  return e;
}

int launch_local_ranks(const std::vector<std::string>& argv, int world, const std::string& nccl_id_hex,
                       double collective_timeout_s) {
  std::vector<std::string> args = argv;
  args[0] = self_executable();
  HeartbeatListener heartbeats;
  RankSupervisor supervisor(world, collective_timeout_s, heartbeats);
  const pid_t launcher = ::getpid();
  // The node before any rank allocated: the baseline of the ranks' host memory measurement (run/process_memory.h).
  std::string available_at_launch;
  try {
    available_at_launch = std::to_string(read_available_host_memory());
  } catch (const std::exception&) {
  }  // no /proc/meminfo: each rank takes its own first reading instead
  for (int r = 0; r < world; ++r) {
    Pipes pipes;
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      die_with_parent(launcher, SIGKILL);
      pipes.attach_child();
      setenv("ZEROPLAN_RANK", std::to_string(r).c_str(), 1);
      setenv("ZEROPLAN_WORLD_SIZE", std::to_string(world).c_str(), 1);
      setenv("ZEROPLAN_LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("ZEROPLAN_NCCL_ID", nccl_id_hex.c_str(), 1);
      setenv(kHeartbeatVariable, heartbeats.address().c_str(), 1);
      setenv("NCCL_NVLS_ENABLE", "0", 0);  // NVLink multicast stays off unless the user set it
      if (!available_at_launch.empty()) setenv(kHostAvailableAtLaunchVariable, available_at_launch.c_str(), 1);
      exec_or_die(args);
    }
    pipes.keep_read_ends();
    supervisor.add_rank_process(r, pid, pipes.out[0], pipes.err[0]);
  }
  return supervisor.run();
}

int launch_under_mpirun(const std::vector<std::string>& argv, int world, double collective_timeout_s) {
  HeartbeatListener heartbeats;
  // mpirun's local ranks inherit its environment; -x carries the variable to other nodes' ranks too.
  setenv(kHeartbeatVariable, heartbeats.address().c_str(), 1);
  std::vector<std::string> args = {"mpirun", "-np", std::to_string(world), "--oversubscribe", "--tag-output",
                                   "-x", kHeartbeatVariable};
  if (geteuid() == 0) args.push_back("--allow-run-as-root");
  args.push_back(self_executable());
  args.insert(args.end(), argv.begin() + 1, argv.end());
  RankSupervisor supervisor(world, collective_timeout_s, heartbeats);
  const pid_t launcher = ::getpid();
  Pipes pipes;
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    // SIGTERM: mpirun then ends its ranks itself.
    die_with_parent(launcher, SIGTERM);
    pipes.attach_child();
    exec_or_die(args);
  }
  pipes.keep_read_ends();
  supervisor.add_mpirun(pid, pipes.out[0], pipes.err[0]);
  return supervisor.run();
}

std::vector<std::string> this_process_command_line() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  std::string arg;
  while (std::getline(f, arg, '\0')) args.push_back(arg);
  if (args.empty()) throw std::runtime_error("cannot read this process's command line (/proc/self/cmdline) to start the ranks");
  return args;
}

}  // namespace zeroplan
