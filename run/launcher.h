// Starting the ranks of a multi-process run on this machine and watching them.
//
// `zeroplan run --gpus N` (CUDA backend) starts N copies of this program itself, one per GPU: each gets its
// rank, the world size, its GPU and the NCCL unique id in the environment (ZEROPLAN_RANK, ZEROPLAN_WORLD_SIZE,
// ZEROPLAN_LOCAL_RANK, ZEROPLAN_NCCL_ID). The CPU backend's ranks talk through MPI, so there the launcher runs
// the command under Open MPI's mpirun (--tag-output, so that every line names its rank). Either way the
// launcher watches the ranks (run/rank_supervisor.h): it relays their output prefixed with "[rank r] ", follows
// their heartbeats (run/rank_heartbeat.h, the socket named in ZEROPLAN_HEARTBEAT), and when one rank fails it
// stops every other one (SIGTERM, then SIGKILL after a grace period), reaps them all and prints one line saying
// which rank failed, where and why. A rank that loses its launcher is killed (PR_SET_PDEATHSIG), so none is
// left behind. `mpirun -np N zeroplan run ...` works directly too (ranks from the MPI environment: the
// multi-node path); there mpirun's own policy ends every rank when one dies, and the ranks' collective watchdogs
// (exec/comm/collective_watchdog.h) end a hang.
#pragma once

#include <string>
#include <vector>

namespace zeroplan {

// Where this process stands: a rank of a launched run, or the launcher itself.
struct RankEnvironment {
  int rank = 0;
  int world = 1;
  int local_rank = 0;          // the GPU index on this node
  std::string nccl_id_hex;     // from our launcher; empty under mpirun (rank 0 makes one, MPI broadcasts it)
  bool launched = false;       // started by our launcher or by mpirun
  bool by_mpi = false;
};

// Reads ZEROPLAN_* (our launcher) or OMPI_COMM_WORLD_* / PMI_* (mpirun) from the environment.
RankEnvironment rank_environment();

// Runs `argv` (this program's command line) as `world` ranks with the environment above and watches them;
// returns the exit status to use (run/rank_supervisor.h: 0 trained, 1 the plan does not fit, 2 a rank failed).
// `nccl_id_hex` is handed to every rank; the launcher's deadlines derive from `collective_timeout_s`.
int launch_local_ranks(const std::vector<std::string>& argv, int world, const std::string& nccl_id_hex,
                       double collective_timeout_s);

// Runs `argv` under mpirun with `world` ranks (CPU backend) and watches them the same way.
int launch_under_mpirun(const std::vector<std::string>& argv, int world, double collective_timeout_s);

// This process's command line (/proc/self/cmdline), for a launcher that starts its ranks with it.
std::vector<std::string> this_process_command_line();

}  // namespace zeroplan
