// The CPU backend's communicator: Open MPI collectives over MPI_COMM_WORLD (host buffers, fp32/fp64 only, as the
// CPU reference trains in fp32). Every MPI call is checked and reports file:line: MPI_ERRORS_RETURN is set on
// the communicators, so an MPI error comes back as a code and is thrown with the MPI error string.
//
// Failures across ranks: a watchdog thread (exec/comm/collective_watchdog.h) checks the collective this rank
// waits in against the collective timeout. Past it, it asks every peer where it stands (over a duplicate of
// MPI_COMM_WORLD, answered by the peers' watchdog threads, which run even when their training thread hangs),
// writes one line naming this rank, the collective, the step and the rank(s) that never reached the collective,
// and calls MPI_Abort, which makes mpirun end every rank. This needs MPI_THREAD_MULTIPLE.
#pragma once

#include <memory>

#include "exec/comm/communicator.h"

namespace zeroplan::exec {

// True when this process was started by an MPI launcher (mpirun/mpiexec set OMPI_COMM_WORLD_SIZE or PMI_SIZE).
bool launched_by_mpi();
// Initializes MPI (once per process; MPI_Init_thread with MPI_THREAD_MULTIPLE, for the watchdog thread) and
// returns a communicator over MPI_COMM_WORLD. MPI is finalized when the last communicator is destroyed, unless
// it is destroyed while an exception propagates: a failing rank leaves MPI up so that abort_mpi_world() can end
// the run (MPI_Finalize would wait for peers that wait for this rank).
std::unique_ptr<Communicator> make_mpi_communicator(const CommWatch& watch = {});
// True when this binary was built with MPI.
bool mpi_available();
// When MPI is initialized and not finalized: MPI_Abort(MPI_COMM_WORLD, status), which ends every rank of the
// run (mpirun kills them); otherwise returns.
void abort_mpi_world(int status);
// Throws a std::runtime_error naming the call, file:line and MPI's error string when code is not MPI_SUCCESS.
void mpi_check(int code, const char* call, const char* file, int line);

}  // namespace zeroplan::exec
