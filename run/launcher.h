// Starting the ranks of a multi-process run on this machine and watching them.
//
// `zeroplan run --gpus N` (CUDA backend) starts N copies of this program itself, one per GPU: each gets its
// rank, the world size, its GPU and the NCCL unique id in the environment (ZEROPLAN_RANK, ZEROPLAN_WORLD_SIZE,
// ZEROPLAN_LOCAL_RANK, ZEROPLAN_NCCL_ID). The launcher relays rank 0's standard output as it comes and every
// rank's standard error line by line prefixed with "[rank r] "; when one rank fails it stops the others
// (SIGTERM, then SIGKILL after a grace period) and says which rank failed and how. The CPU backend's ranks talk
// through MPI, so there the launcher re-executes the command under Open MPI's mpirun, which does the same.
// `mpirun -np N zeroplan run ...` works directly too (ranks from the MPI environment: the multi-node path).
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

// Runs `argv` (this program's command line) as `world` ranks with the environment above and waits; returns the
// exit status to use (0 when every rank succeeded). `nccl_id_hex` is handed to every rank.
int launch_local_ranks(const std::vector<std::string>& argv, int world, const std::string& nccl_id_hex);

// Re-executes `argv` under mpirun with `world` ranks (CPU backend); returns mpirun's exit status.
int launch_under_mpirun(const std::vector<std::string>& argv, int world);

}  // namespace zeroplan
