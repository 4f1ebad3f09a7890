// The CPU backend's communicator: Open MPI collectives over MPI_COMM_WORLD (host buffers, fp32/fp64 only, as the
// CPU reference trains in fp32). Every MPI call is checked and reports file:line.
#pragma once

#include <memory>

#include "exec/comm/communicator.h"

namespace zeroplan::exec {

// True when this process was started by an MPI launcher (mpirun/mpiexec set OMPI_COMM_WORLD_SIZE or PMI_SIZE).
bool launched_by_mpi();
// Initializes MPI (once per process; MPI_Init_thread with MPI_THREAD_FUNNELED) and returns a communicator over
// MPI_COMM_WORLD. MPI is finalized when the last communicator is destroyed.
std::unique_ptr<Communicator> make_mpi_communicator();
// True when this binary was built with MPI.
bool mpi_available();

}  // namespace zeroplan::exec
