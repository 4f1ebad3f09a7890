#include "run/launcher.h"

#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>

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

struct Child {
  pid_t pid = -1;
  int out = -1, err = -1;     // read ends
  std::string out_line, err_line, last_error;
  bool done = false;
  int status = 0;
};

// Relays complete lines from fd; rank 0's stdout unprefixed, everything else "[rank r] ".
void relay(int fd, std::string& pending, int rank, bool is_stdout, std::string& last_error) {
  char buf[8192];
  const ssize_t n = read(fd, buf, sizeof buf);
  if (n <= 0) return;
  pending.append(buf, static_cast<std::size_t>(n));
  std::size_t at;
  while ((at = pending.find('\n')) != std::string::npos) {
    const std::string line = pending.substr(0, at);
    pending.erase(0, at + 1);
    if (is_stdout && rank == 0) {
      std::cout << line << '\n' << std::flush;
    } else if (is_stdout) {
      // other ranks print their own lines only when something is wrong; keep them readable anyway
      std::cout << "[rank " << rank << "] " << line << '\n' << std::flush;
    } else {
      std::cerr << "[rank " << rank << "] " << line << '\n' << std::flush;
      if (!line.empty()) last_error = line;
    }
  }
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + strsignal(WTERMSIG(status));
  return "stopped";
}

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

int launch_local_ranks(const std::vector<std::string>& argv, int world, const std::string& nccl_id_hex) {
  std::vector<std::string> args = argv;
  args[0] = self_executable();
  std::vector<Child> children(world);
  for (int r = 0; r < world; ++r) {
    int out[2], err[2];
    if (pipe(out) != 0 || pipe(err) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      dup2(out[1], STDOUT_FILENO);
      dup2(err[1], STDERR_FILENO);
      close(out[0]), close(out[1]), close(err[0]), close(err[1]);
      setenv("ZEROPLAN_RANK", std::to_string(r).c_str(), 1);
      setenv("ZEROPLAN_WORLD_SIZE", std::to_string(world).c_str(), 1);
      setenv("ZEROPLAN_LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("ZEROPLAN_NCCL_ID", nccl_id_hex.c_str(), 1);
      setenv("NCCL_NVLS_ENABLE", "0", 0);  // NVLink multicast stays off unless the user set it
      exec_or_die(args);
    }
    close(out[1]), close(err[1]);
    children[r].pid = pid;
    children[r].out = out[0];
    children[r].err = err[0];
  }
  int failed_rank = -1;
  auto deadline = std::chrono::steady_clock::time_point::max();
  int running = world;
  while (running > 0) {
    std::vector<pollfd> fds;
    std::vector<std::pair<int, bool>> owner;  // (rank, is_stdout)
    for (int r = 0; r < world; ++r) {
      if (children[r].out >= 0) fds.push_back({children[r].out, POLLIN, 0}), owner.emplace_back(r, true);
      if (children[r].err >= 0) fds.push_back({children[r].err, POLLIN, 0}), owner.emplace_back(r, false);
    }
    if (!fds.empty()) poll(fds.data(), fds.size(), 200);
    for (std::size_t i = 0; i < fds.size(); ++i) {
      Child& c = children[owner[i].first];
      if (fds[i].revents & POLLIN) {
        relay(fds[i].fd, owner[i].second ? c.out_line : c.err_line, owner[i].first, owner[i].second, c.last_error);
      } else if (fds[i].revents & (POLLHUP | POLLERR)) {
        close(fds[i].fd);
        (owner[i].second ? c.out : c.err) = -1;
      }
    }
    for (int r = 0; r < world; ++r) {
      Child& c = children[r];
      if (c.done) continue;
      int status = 0;
      if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
        c.done = true;
        c.status = status;
        --running;
        const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok && failed_rank < 0) {
          failed_rank = r;
          // stop the others: they would wait forever in a collective with a dead peer
          for (const Child& o : children)
            if (!o.done) kill(o.pid, SIGTERM);
          deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        }
      }
    }
    if (failed_rank >= 0 && std::chrono::steady_clock::now() > deadline) {
      for (const Child& o : children)
        if (!o.done) kill(o.pid, SIGKILL);
      deadline = std::chrono::steady_clock::time_point::max();
    }
  }
  for (Child& c : children) {
    if (c.out >= 0) close(c.out);
    if (c.err >= 0) close(c.err);
  }
  if (failed_rank < 0) return 0;
  const Child& f = children[failed_rank];
  std::cerr << "zeroplan run: rank " << failed_rank << " of " << world << " failed (" << describe(f.status) << ")"
            << (f.last_error.empty() ? "" : ": " + f.last_error) << "; the other ranks were stopped\n";
  return WIFEXITED(f.status) && WEXITSTATUS(f.status) != 0 ? WEXITSTATUS(f.status) : 3;
}

int launch_under_mpirun(const std::vector<std::string>& argv, int world) {
  std::vector<std::string> args = {"mpirun", "-np", std::to_string(world), "--oversubscribe"};
  if (geteuid() == 0) args.push_back("--allow-run-as-root");
  args.push_back(self_executable());
  args.insert(args.end(), argv.begin() + 1, argv.end());
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) exec_or_die(args);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 3;
}

}  // namespace zeroplan
